"""The state store's contract: the :class:`Store` protocol, its records and its bounds.

What the engine keeps between calls and shares between processes: revocations,
issued delegations, the engine's mode (frozen or not), the call log, the token
exchange's replay cache of JWT ``jti`` values, and sessions' declared intents
and staged paths. engine/state/sqlite.py implements it on one host; a PostgreSQL
store can implement it for several (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "GENESIS",
    "MAX_JTI_KEEP_UNTIL",
    "Delegation",
    "FreezeState",
    "Intent",
    "LogAppend",
    "LogRow",
    "Store",
]

GENESIS = bytes(32)
"""``prev`` of the first call-log entry: 32 zero bytes."""
MAX_JTI_KEEP_UNTIL = 2**62
"""Latest time a replay-cache entry may name (SQLite integers are 64-bit)."""


@dataclass(frozen=True)
class Delegation:
    """One issued delegation, for the provenance graph.

    Attributes:
        child_id: Block id (hex) of the delegation block: the child token's id.
        parent_id: Token id (hex) of the token that delegated.
        parent_agent: The delegating agent.
        child_agent: The new agent; its lane is ``agent/<child_agent>``.
        issued_at: Unix seconds.
        expires_at: The child's expiry, unix seconds.
        scope: ``{"ops": [...], "paths": [...], "delegable": bool}`` as granted.
    """

    child_id: str
    parent_id: str
    parent_agent: str
    child_agent: str
    issued_at: int
    expires_at: int
    scope: dict[str, Any]


@dataclass(frozen=True)
class FreezeState:
    """The engine's mode as the operator last set it (``chit freeze``).

    Attributes:
        frozen: True while the operator has frozen every engine on this store.
        reason: The operator's note (``--reason``); empty if none.
        changed_at: When the mode last changed, unix seconds (0: never set).
    """

    frozen: bool
    reason: str
    changed_at: int


@dataclass(frozen=True)
class Intent:
    """A session's declared intent to work on some paths (``project_context``).

    Attributes:
        repo: The repository it is about (the real path of its common git dir).
        session: The session id of the edge connection that declared it.
        token_id: Root block id (hex) of the token the session presents.
        agent: The declaring agent.
        paths: Repository paths or folders, validated and in the token's scope.
        expires_at: Unix seconds; the intent is gone after it.
    """

    repo: str
    session: str
    token_id: str
    agent: str
    paths: tuple[str, ...]
    expires_at: int


@dataclass(frozen=True)
class LogAppend:
    """One call-log entry, made inside the append transaction.

    Attributes:
        entry: The entry's ``chit-det/1`` bytes.
        sig: Ed25519 signature over the entry (engine/audit/calllog.py).
        head: The new chain head's ``chit-det/1`` bytes (names this entry).
        head_sig: Ed25519 signature over the head.
        time: The entry's time, unix seconds (copied to a column for ``show``).
        agent: The entry's agent (copied to a column for ``show``).
    """

    entry: bytes
    sig: bytes
    head: bytes
    head_sig: bytes
    time: int
    agent: str


@dataclass(frozen=True)
class LogRow:
    """A stored call-log row, untrusted until verified (any column may be tampered).

    Attributes:
        seq: The row's sequence column.
        time: The row's time column.
        agent: The row's agent column.
        entry: The stored entry bytes (or whatever a tamperer put there).
        sig: The stored signature.
    """

    seq: Any
    time: Any
    agent: Any
    entry: Any
    sig: Any


class Store(Protocol):
    """What the engine needs from its state store."""

    def revoke(self, block_id: str, *, now: int, reason: str = "") -> bool:
        """Revoke a token or block id; True if it was not revoked before."""

    def any_revoked(self, block_ids: Iterable[str]) -> bool:
        """True iff any of the hex block ids is revoked."""

    def record_delegation(self, delegation: Delegation) -> None:
        """Record an issued delegation."""

    def delegations(self) -> list[Delegation]:
        """Every recorded delegation, oldest first."""

    def freeze_state(self) -> FreezeState:
        """The engine's mode as the operator last set it."""

    def set_freeze(self, frozen: bool, *, now: int, reason: str = "") -> FreezeState:
        """Freeze or unfreeze every engine on this store; returns the new state."""

    def append_log(self, compose: Callable[[int, bytes], LogAppend]) -> int:
        """Append one call-log entry made by ``compose(seq, prev)``; returns its seq."""

    def claim_jti(self, issuer: str, jti: str, *, keep_until: int, now: int) -> bool:
        """Record ``(issuer, jti)`` as exchanged; False if it already was (a replay)."""

    def release_jti(self, issuer: str, jti: str) -> None:
        """Forget a claim whose exchange minted nothing, so the JWT may be retried."""

    def put_intent(self, intent: Intent, *, now: int, staged: bool = False) -> None:
        """Record (or replace) a session's intent, or its staged paths; drop expired ones."""

    def intents(self, repo: str, *, now: int, staged: bool = False) -> list[Intent]:
        """Intents (or sessions' staged paths) about ``repo`` that have not expired at ``now``."""

    def revoked(self) -> list[dict[str, Any]]:
        """Every revocation, oldest first: ``[{"id", "revoked_at", "reason"}]``."""

    def log_head(self) -> tuple[Any, Any, Any, Any] | None:
        """The stored chain head ``(seq, hash, head bytes, sig)``, untrusted; ``None`` if none."""

    def log_rows(
        self, *, agent: str | None = None, since: int | None = None, batch: int = 512
    ) -> Iterator[LogRow]:
        """Stored call-log rows in ascending ``seq``, untrusted, optionally filtered."""
