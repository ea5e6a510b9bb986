"""The engine's narrow interface: ``offer`` and ``invoke``, plain data in and out.

Every call re-presents the token and re-runs the whole ordered check (docs/architecture.md);
no decision is cached across calls:

1. validity  - strict parse, known key id, chained MAC, expiry, not-before, revocation;
2. chain     - delegation blocks were made by the engine (none can be yet);
3. scope     - every path argument is valid and inside every block's scope;
4. operation - the tool is offered to this token (its operations, its flag);
5. policy    - the organisation policy's Decision.

Listing and calling share :func:`Engine._check`, so a tool that is not offered to
a token cannot be called by it under any spelling. Results and refusals are
JSON-ready dicts so the same interface can be served over HTTP later.

A frozen engine (``chit freeze on``, read from the state store on every call) or
one serving a read-only edge (``Engine(..., read_only=True)``) offers only tools
marked read-only; a call to any other tool the token holds fails with
``engine_frozen`` before its arguments are read. Every call, allowed or refused,
is appended to the signed call log (engine/calllog.py).
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

import policy
from engine import git
from engine.audit import calllog, redact
from engine.auth import sealing, signkeys
from engine.auth import verify as tokens
from engine.auth.rootkeys import Keyring
from engine.auth.sealkeys import SealingKeyring
from engine.catalog.declarations import CATALOG_ENCODING, CATALOG_STORE_REF, ToolSpec, tool_by_name
from engine.errors import (
    AccessDeniedError,
    ChitError,
    ConfigurationError,
    InvalidRequestError,
    StateError,
    denied,
)
from engine.paths import glob_may_match_below, validate_path
from engine.semantic.indexer import indexer_for
from engine.semantic.persist import PersistedIndex, derive_key
from engine.service.policyfile import PolicyFile, PolicySnapshot
from engine.service.ratelimit import RateLimiter
from engine.state.sqlite import open_store
from engine.tools.context import CallContext, Session
from engine.tools.offer import Offer, offer_for
from engine.tools.semantic.intents import share_staged_paths, staged_paths
from engine.tools.table import handler_for
from policy.paths import deny_matches

__all__ = ["Engine"]

logger = logging.getLogger("chit.engine")

_CONFIG_ERROR = {
    "error": "internal_error",
    "message": "the engine's configuration is unusable; the operator has been told",
}
MAX_SESSIONS = 4096


@dataclass(frozen=True)
class _Checked:
    token: tokens.VerifiedToken
    offer: Offer
    frozen: bool = False
    policy: PolicySnapshot | None = None  # the policy this call is decided under


@dataclass
class _CallFacts:
    """What a call established before it ended, for its call-log entry."""

    checked: _Checked | None = None


_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class Engine:
    """The authority behind every edge, embedded in-process or served remotely.

    Args:
        home: The chit home (keyring and ``policy.toml``).
        repo: Path of the git repository the engine works on.
        clock: Returns the current time in unix seconds (injected for tests).
        read_only: Serve this edge read-only (``chit mcp --read-only``): offer
            only read-only tools and refuse the rest with ``engine_frozen``,
            whatever the operator's freeze says.

    Raises:
        ConfigurationError: If the keyring, policy or repository is unusable.
    """

    def __init__(
        self,
        home: str | os.PathLike[str],
        repo: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        read_only: bool = False,
    ) -> None:
        self._home = Path(home)
        self._read_only = read_only
        self._log_signer = calllog.LogSigner(home)
        self._keyring = Keyring(home)
        # Re-read on every call when the file changes; fail closed if it turns invalid.
        self._policies = PolicyFile(self._home / "policy.toml")
        self._rates = RateLimiter()
        signkeys.active_signing_key(home)  # refuse to start without a signing key
        # Protected content is sealed in the commit path and opened on reads
        # (docs/sealing.md); protection follows whichever policy is current.
        self._sealing_keys = SealingKeyring(home)
        self._repo = git.Repository(
            repo, sealing=sealing.Sealing(self._sealing_keys, self._protects)
        )
        # The semantic index keeps parsed records beside the lane locks, shared by
        # every engine of this repository, under a key derived from the sealing
        # key (engine/semantic/persist.py); protected files are never kept there.
        indexer_for(self._repo).persist_to(
            PersistedIndex(self._repo.chit_dir, self._semantic_index_key)
        )
        self._store = open_store(home)
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()

    def __repr__(self) -> str:
        return "Engine()"

    @property
    def _policy(self) -> policy.Policy:
        """The newest policy that loaded (a call uses its own :class:`_Checked` snapshot)."""
        return self._policies.last_good.policy

    @property
    def _policy_hash(self) -> str:
        return self._policies.last_good.hash

    def _semantic_index_key(self) -> bytes:
        """The HMAC key of the persisted semantic index (from the newest sealing key)."""
        return derive_key(self._sealing_keys.sealing_key()[1])

    def _protects(self, path: str) -> bool:
        """Whether the current policy lists ``path`` under ``[paths] protected``."""
        return deny_matches(path, self._policy.paths.protected)

    def _public_keys(self) -> dict[str, Any]:
        """The engine's own signing keys' public halves (for provenance_graph)."""
        return signkeys.load_public_keys(signkeys.export_public_keys(self._home))

    # --- the interface -------------------------------------------------------

    def offer(self, token: str) -> dict[str, Any]:
        """Return the tools a token unlocks.

        Args:
            token: The token's text form.

        Returns:
            ``{"ok": True, "tools": [{name, description, input_schema,
            output_schema, annotations}], "catalog_hash", "catalog_encoding",
            "withheld"}``, or ``{"ok": False, "error": {...}}`` if the token is
            refused.
        """
        try:
            checked = self._check(token)
        except ChitError as exc:
            return {"ok": False, "error": exc.to_dict()}
        except ConfigurationError:
            logger.error("the engine's configuration is unusable; see `chit keys list`")
            return {"ok": False, "error": _CONFIG_ERROR}
        tools = [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": copy.deepcopy(t.encoded()["input_schema"]),
                "output_schema": copy.deepcopy(t.encoded()["output_schema"]),
                "annotations": {"readOnlyHint": t.read_only, "destructiveHint": t.destructive},
            }
            for t in checked.offer.tools
        ]
        return {
            "ok": True,
            "tools": tools,
            "catalog_hash": checked.offer.catalog_hash,
            "catalog_encoding": CATALOG_ENCODING,
            "withheld": checked.offer.withheld,
        }

    def invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        session: str,
        offered_catalog_hash: str | None = None,
    ) -> dict[str, Any]:
        """Run one tool call through the ordered check and, if it passes, the handler.

        Args:
            token: The token's text form, re-presented on every call.
            tool: The tool name exactly as the client sent it.
            arguments: The JSON arguments object.
            session: The edge's session id for this connection.
            offered_catalog_hash: The catalog hash the edge listed to the agent,
                or ``None`` if it listed none. Tools that are not read-only
                refuse with ``catalog_changed`` unless it equals the engine's.

        Returns:
            ``{"ok": True, "result": {...}}``; or ``{"ok": False, "error":
            {"error": CODE, "message": ..., ...}}`` for a refusal. A tool that is
            not offered gives the code ``tool_not_offered`` with ``offered``.
            Either way the call is in the call log first; if it cannot be
            recorded the answer is ``internal_error`` (the call's effect, if
            any, stands).
        """
        facts = _CallFacts()
        answer: dict[str, Any]
        try:
            answer = {
                "ok": True,
                "result": self._invoke(
                    token, tool, arguments, session, offered_catalog_hash, facts
                ),
            }
        except ChitError as exc:
            answer = {"ok": False, "error": exc.to_dict()}
        except ConfigurationError:
            logger.error("the engine's configuration is unusable; see `chit keys list`")
            answer = {"ok": False, "error": _CONFIG_ERROR}
        except Exception:
            # Never forward exception text: it can carry paths or secrets.
            logger.exception("tool %s failed unexpectedly", tool if tool_by_name(tool) else "?")
            answer = {
                "ok": False,
                "error": {
                    "error": "internal_error",
                    "message": "the engine failed; nothing was changed",
                },
            }
        return self._logged(answer, facts, tool, arguments, session)

    def _logged(
        self,
        answer: dict[str, Any],
        facts: _CallFacts,
        tool: object,
        arguments: object,
        session: object,
    ) -> dict[str, Any]:
        """Append the call to the call log; the answer, or ``internal_error`` if that fails."""
        checked = facts.checked
        code = None if answer["ok"] else str(answer["error"].get("error"))
        record = calllog.CallRecord(
            time=self._now(),
            agent=checked.token.agent if checked else calllog.UNKNOWN_AGENT,
            chain=tuple(block for block, _agent in checked.token.chain) if checked else (),
            session=redact.redact_label(session),
            tool=redact.redact_label(tool),
            arguments=redact.redact_arguments(arguments, self._protects),
            decision="allowed" if code is None else (
                "failed" if code == "internal_error" else "refused"
            ),
            code=code,
            policy_hash=checked.policy.hash if checked and checked.policy else self._policy_hash,
            catalog_hash=checked.offer.catalog_hash if checked else None,
        )
        try:
            calllog.append(self._store, self._log_signer, record)
        except Exception:
            logger.exception("the call log could not be written; run `chit audit log verify`")
            return {
                "ok": False,
                "error": {
                    "error": "internal_error",
                    "message": "the engine could not record this call; check `status` before "
                    "retrying",
                },
            }
        return answer

    # --- the ordered check ---------------------------------------------------

    def _now(self) -> int:
        return int(self._clock())

    def _check(self, token: str) -> _Checked:
        # 1-2. validity and chain: MAC, engine-made delegation blocks, depth,
        # expiry, revocation of any block (so of every ancestor).
        self._keyring.refresh()
        current = self._policies.current()  # this call's policy, start to end
        verified = tokens.verify_at_time(
            token,
            self._keyring.lookup,
            self._now(),
            is_revoked=self._store.any_revoked,
            depth_limit=current.policy.limits.delegation_depth,
        )
        # 4. the operations and the flag decide the offer; a frozen engine (the
        # operator's mode, read on every call) or a read-only edge offers only
        # the read-only tools among them.
        frozen = self._read_only or self._store.freeze_state().frozen
        return _Checked(
            verified, offer_for(verified.operations, verified.delegable, frozen), frozen, current
        )

    def _invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        session_id: str,
        offered_catalog_hash: str | None,
        facts: _CallFacts,
    ) -> dict[str, Any]:
        if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
            # It lands in commit trailers and the call log: no newlines, no tricks.
            raise InvalidRequestError(
                "invalid_argument", "the session id must be 1-128 of [A-Za-z0-9._:-]"
            )
        checked = self._check(token)
        facts.checked = checked
        spec = checked.offer.get(tool) if isinstance(tool, str) else None
        if spec is None and checked.frozen:
            # Read-only mode: a tool the token holds but that is not read-only
            # fails here, before any argument is read, so none can lift it.
            held = offer_for(checked.token.operations, checked.token.delegable)
            if isinstance(tool, str) and held.get(tool) is not None:
                raise StateError(
                    "engine_frozen",
                    "this engine serves read-only tools only"
                    + ("" if self._read_only else " (frozen by the operator)")
                    + "; list tools to see them",
                    offered=checked.offer.names(),
                )
        if spec is None:
            raise AccessDeniedError(
                "tool_not_offered",
                "this token is not offered that tool",
                offered=checked.offer.names(),
            )
        args = self._parse_arguments(spec, arguments)
        # 3. scope: every path argument, validated then matched per segment.
        paths = []
        for name in spec.path_args:
            path = validate_path(getattr(args, name))
            if not checked.token.allows_path(path):
                raise AccessDeniedError(
                    "path_outside_scope", f"{path!r} is outside this token's scope"
                )
            paths.append(path)
        value = getattr(args, "path", None)
        if "path" not in spec.path_args and value is not None:
            # A filter (log, diff): a file or folder with something in scope under it.
            # Results are pruned to scope; the filter itself must not probe outside.
            paths.append(self._check_filter(checked.token, validate_path(value)))
        # 5. policy.
        current = checked.policy or self._policies.current()
        decision = policy.evaluate(
            current.policy,
            policy.Request(
                agent=checked.token.agent,
                tool=spec.name,
                operation=spec.operation,
                paths=tuple(paths),
            ),
        )
        if not decision.allowed:
            raise denied(decision)
        if not spec.read_only and offered_catalog_hash != checked.offer.catalog_hash:
            # A write must be made having been shown the catalog it records.
            raise StateError(
                "catalog_changed",
                "no tool catalog was listed in this session; list tools first"
                if offered_catalog_hash is None
                else "the tool catalog changed since you listed it; list tools again",
                catalog_hash=checked.offer.catalog_hash,
            )
        session = self._session(session_id, checked.token)
        # Rate limits count only calls that get this far (docs/policy.md).
        limited = self._rates.admit(current.policy, checked.token.agent, spec.name, self._clock())
        if limited is not None:
            raise denied(limited)
        handler = handler_for(spec.name)
        if handler is None:  # unreachable: offers hold only tools with handlers
            raise AccessDeniedError(
                "tool_not_offered", "tool withheld", offered=checked.offer.names()
            )
        with session.lock:
            # The session's view follows its lane as far as it can without
            # changing what the staged change means: fully when nothing is
            # staged, else onto the lane head when no staged path moved there.
            if session.staged.is_empty():
                session.staged.base = None
            else:
                self._repo.rebase_if_clean(checked.token.agent, session.staged)
            ctx = CallContext(
                token=checked.token,
                session=session,
                repo=self._repo,
                policy=current.policy,
                now=self._now(),
                offer=checked.offer,
                catalog_store=CATALOG_STORE_REF,
                token_text=token,
                keys=self._keyring.lookup,
                store=self._store,
                policy_hash=current.hash,
                tool=spec.name,
                signing_key=functools.partial(signkeys.active_signing_key, self._home),
                public_keys=self._public_keys,
            )
            before = () if spec.read_only else staged_paths(session)
            result: BaseModel = handler(ctx, args)
            if not spec.read_only:
                share_staged_paths(ctx, before)
        dumped: dict[str, Any] = result.model_dump(mode="json")
        return dumped

    @staticmethod
    def _check_filter(token: tokens.VerifiedToken, path: str) -> str:
        if token.allows_path(path):
            return path
        if token.path_scopes and all(
            any(glob_may_match_below(g, path) for g in globs) for globs in token.path_scopes
        ):
            return path
        raise AccessDeniedError("path_outside_scope", f"{path!r} is outside this token's scope")

    @staticmethod
    def _parse_arguments(spec: ToolSpec, arguments: dict[str, Any] | None) -> BaseModel:
        try:
            return spec.input_model.model_validate(arguments or {})
        except ValidationError as exc:
            fields = sorted(
                {".".join(str(p) for p in e["loc"]) or "(arguments)" for e in exc.errors()}
            )
            raise InvalidRequestError(
                "invalid_argument", "invalid arguments for this tool", fields=fields
            ) from None

    def _evict_idle_sessions(self) -> None:
        """Forget the least recently used eighth of the sessions that hold nothing.

        A session with a staged change or an unsettled conflict is never
        dropped, nor one in the middle of a call. A dropped session that comes
        back starts afresh (nothing staged, no read versions), bound to the
        token that presents it. Called with the sessions lock held.
        """
        quota = max(1, MAX_SESSIONS // 8)
        for key, old in list(self._sessions.items()):
            if quota == 0:
                break
            if old.staged.is_empty() and not old.staged.conflicts and not old.lock.locked():
                del self._sessions[key]
                quota -= 1

    def _session(self, session_id: str, token: tokens.VerifiedToken) -> Session:
        if not isinstance(session_id, str) or not 1 <= len(session_id) <= 128:
            raise InvalidRequestError("invalid_argument", "invalid session id")
        with self._sessions_lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                if len(self._sessions) >= MAX_SESSIONS:
                    self._evict_idle_sessions()
                if len(self._sessions) >= MAX_SESSIONS:
                    raise AccessDeniedError("limit_exceeded", "too many open sessions")
                session = Session(
                    session_id=session_id,
                    token_id=token.token_id,
                    agent=token.agent,
                    staged=git.StagedChange(),
                )
            self._sessions[session_id] = session  # most recently used last
            if session.token_id != token.token_id or session.agent != token.agent:
                raise StateError("session_token_mismatch", "this session belongs to another token")
            return session
