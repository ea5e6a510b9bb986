"""What a tool handler is given: the session it acts in and the call's context.

The service makes one :class:`CallContext` per call after the ordered check
passed (docs/architecture.md); handlers read everything they may use from it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import policy
from engine import git
from engine.auth.signkeys import SigningKey
from engine.auth.verify import VerifiedToken
from engine.catalog.declarations import Offer
from engine.errors import denied
from engine.state import Store

__all__ = ["ApprovedRequest", "CallContext", "Session"]


@dataclass(frozen=True)
class ApprovedRequest:
    """The approval a call runs under, as its commit's provenance records it (docs/approvals.md).

    Attributes:
        approval_id: The approval's id.
        discharge: The ``chit-approval/1`` discharge bytes (verified when stored).
        operator_public_key: The approving operator's raw 32-byte Ed25519 key.
        request: The request map's ``chit-det/1`` bytes the discharge approves.
        change: For ``commit``: the approved staged change's bytes
            (:func:`engine.auth.discharge.change_bytes`).
    """

    approval_id: str
    discharge: bytes = field(repr=False)
    operator_public_key: bytes = field(repr=False)
    request: bytes = field(repr=False)
    change: bytes = field(default=b"", repr=False)


@dataclass
class Session:
    """One agent session (one MCP connection, or one resumed): its staged change, bound to a token.

    The staged change is kept in memory and, whenever a call changes it, saved
    under ``refs/chit/sessions/<session_id>`` (docs/engine-api.md, "Sessions
    that survive"), so another engine process can resume it.

    Attributes:
        session_id: The session's id (the edge's, or the one a client resumes).
        token_id: Identity block id of the token that opened it.
        agent: The agent that opened it.
        staged: The in-memory staged change.
        seen: Path to SHA-256 (hex) of the content this session last read or
            wrote there through its view, ``None`` if it saw the path absent.
            A write to a path whose content changed since is a ``conflict``:
            no session overwrites a change it never saw. Not saved.
        expires_at: Unix seconds: the latest expiry of the tokens that used it
            (a saved session is swept after it).
        saved: The commit of its saved reference as this engine last wrote or
            read it (``None``: it has none).
        restored: Whether its saved reference was read (done once, on first use).
        cache: What its last save wrote (:class:`engine.git.SaveCache`).
        lock: Serialises calls within the session.
    """

    session_id: str
    token_id: str
    agent: str
    staged: git.StagedChange
    seen: dict[str, str | None] = field(default_factory=dict, repr=False)
    expires_at: int = 0
    saved: pygit2.Oid | None = field(default=None, repr=False)
    restored: bool = field(default=False, repr=False)
    cache: git.SaveCache = field(default_factory=git.SaveCache, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class CallContext:
    """Everything a handler may use for one call."""

    token: VerifiedToken
    session: Session
    repo: git.Repository
    policy: policy.Policy
    now: int
    offer: Offer
    catalog_store: str
    keys: Callable[[str], bytes | None] = field(repr=False)
    store: Store = field(repr=False)
    policy_hash: str = ""
    tool: str = ""  # the tool called: what a listing's paths are evaluated as (a read)
    repo_name: str = ""  # the repository the call acts on (inside the token's repos scope)
    signing_key: Callable[[], SigningKey] | None = field(default=None, repr=False)
    public_keys: Callable[[], Mapping[str, Ed25519PublicKey]] | None = field(
        default=None, repr=False
    )
    approval: ApprovedRequest | None = None  # the approval this call runs under, if any
    # The repository's vital signs that are not silent (docs/vital-signs.md).
    coherence: Callable[[], list[dict[str, Any]]] | None = field(default=None, repr=False)
    _visible: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    def visible(self, path: str) -> bool:
        """True iff the caller may see ``path``: in scope, and the policy lets this tool read it.

        Answers are kept for the call (token and policy are fixed for it), so a
        tool that tests the same paths many times evaluates each once.
        """
        known = self._visible.get(path)
        if known is not None:
            return known
        seen = self.token.allows_path(path)
        if seen:
            request = policy.Request(
                agent=self.token.agent, tool=self.tool, operation="read", paths=(path,)
            )
            seen = policy.evaluate(self.policy, request).allowed
        self._visible[path] = seen
        return seen

    def enforce_sizes(
        self, tool: str, path: str, content_bytes: int, after: git.StagedChange
    ) -> None:
        """Apply the policy's size limits to a staging write.

        Raises:
            AccessDeniedError: ``limit_exceeded`` with the rule that matched.
        """
        request = policy.Request(
            agent=self.token.agent,
            tool=tool,
            operation="write",
            paths=(path,),
            content_bytes=content_bytes,
            staged_bytes=after.byte_size(),
            staged_files=len(after.changes),
        )
        decision = policy.evaluate(self.policy, request)
        if not decision.allowed:
            raise denied(decision)
