"""The state store's contract: the :class:`Store` protocol, its records and its bounds.

What the engine keeps between calls and shares between processes and hosts:
revocations, issued delegations, the engine's mode (frozen or not), the call
log, operators and approvals (engine/state/approvals.py), the token
exchange's replay cache of JWT ``jti`` values, sessions' declared intents and
staged paths, rate-limit windows, where each engine session is
served, and the change feed. engine/state/sqlite.py implements it on one host,
engine/state/postgres.py for several (docs/deployment.md, docs/architecture.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from engine.limits import LIMITS
from engine.state.approvals import ApprovalStore

__all__ = [
    "CHANGE_KINDS",
    "GENESIS",
    "MAX_JTI_KEEP_UNTIL",
    "SCHEMA_VERSION",
    "Delegation",
    "FreezeState",
    "Intent",
    "LogBatch",
    "LogCheckpoint",
    "LogEntry",
    "LogRow",
    "LogTree",
    "Presence",
    "RateWindow",
    "Store",
    "check_intent",
    "check_jti",
    "check_presence",
    "read_intent_paths",
]

GENESIS = bytes(32)
"""``prev`` of the first call-log entry: 32 zero bytes."""
MAX_JTI_KEEP_UNTIL = 2**62
"""Latest time a replay-cache entry may name (SQLite integers are 64-bit)."""
SCHEMA_VERSION = 4
"""The newest schema version this chit knows; every store numbers its migrations alike."""
CHANGE_KINDS: frozenset[str] = frozenset(
    {"revocation", "freeze", "keys", "policy", "approval"}
)
"""What the change feed announces: each can change what a token is offered."""


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


def check_intent(intent: Intent) -> None:
    """Refuse an intent no store keeps (every store calls this before writing one).

    Raises:
        ValueError: If it names more than ``LIMITS.intent_paths`` paths or a
            path that is not a string (a programming error).
    """
    if len(intent.paths) > LIMITS.intent_paths or not all(
        isinstance(p, str) for p in intent.paths
    ):
        raise ValueError(f"an intent names at most {LIMITS.intent_paths} path strings")


def check_jti(issuer: str, jti: str) -> None:
    """Refuse an empty or unencodable issuer or jti (every store calls this first).

    Raises:
        ValueError: If either is empty, not text, holds NUL (which PostgreSQL
            text cannot hold: both stores refuse it alike), or is not UTF-8
            encodable.
    """
    for value in (issuer, jti):
        if not isinstance(value, str) or not value or "\x00" in value:
            raise ValueError("the issuer and jti must be non-empty text without NUL")
        value.encode("utf-8")  # UnicodeEncodeError (a ValueError) for lone surrogates


def read_intent_paths(raw: object) -> tuple[str, ...] | None:
    """A stored intent's paths column (untrusted JSON), or ``None`` if it is not a path list.

    An empty list is ``None`` too: a session that staged nothing names no path.
    """
    try:
        paths = json.loads(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if (
        not isinstance(paths, list)
        or not paths
        or len(paths) > LIMITS.intent_paths
        or not all(isinstance(p, str) for p in paths)
    ):
        return None
    return tuple(paths)


@dataclass(frozen=True)
class LogTree:
    """The call log's tree head: what every append continues from (one row).

    Read back from the store it is untrusted: a verifier recomputes it from the
    entries (docs/audit.md §8, *How it is protected*).

    Attributes:
        origin: The log's origin line, the name its checkpoints carry.
        size: Entries in the log.
        last: SHA-256 of the last entry's bytes: the next entry's ``prev``
            (:data:`GENESIS` for an empty log).
        frontier: The Merkle tree's frontier at ``size``, encoded
            (engine/audit/merkle.py: one 32-byte hash per set bit of ``size``).
        signed: Size of the newest checkpoint (0: none yet).
        signed_at: When the newest checkpoint was made, unix seconds (0: none).
    """

    origin: str
    size: int
    last: bytes
    frontier: bytes
    signed: int
    signed_at: int


@dataclass(frozen=True)
class LogEntry:
    """One new call-log entry.

    Attributes:
        seq: Its sequence number (from 1): leaf ``seq - 1`` of the tree.
        time: Its time, unix seconds (copied to a column for ``show``).
        agent: Its agent (copied to a column for ``show``).
        entry: Its ``chit-det/1`` bytes.
    """

    seq: int
    time: int
    agent: str
    entry: bytes


@dataclass(frozen=True)
class LogCheckpoint:
    """A signed checkpoint of the log (a C2SP ``tlog-checkpoint`` signed note).

    Read back from the store it is untrusted until its signature is verified.

    Attributes:
        size: The tree size it names.
        time: When it was made, unix seconds.
        note: The signed note's text.
    """

    size: int
    time: int
    note: str


@dataclass(frozen=True)
class LogBatch:
    """What one append transaction writes: entries, the new tree head, a checkpoint.

    Attributes:
        entries: New entries, numbered on from the tree head's ``size``.
        tree: The tree head after them.
        checkpoint: A checkpoint of ``tree``, or ``None``.
    """

    entries: tuple[LogEntry, ...]
    tree: LogTree
    checkpoint: LogCheckpoint | None = None


@dataclass(frozen=True)
class RateWindow:
    """One sliding window a call is counted in (a ``[[rate_limits]]`` entry, for one agent).

    Attributes:
        key: The window's name in the store: a digest of the entry (its index
            and value in the policy) and the agent, at most 64 characters.
        calls: How many calls the window admits.
        per_seconds: The window's length, seconds (at least 1).
    """

    key: str
    calls: int
    per_seconds: int


class LogRow(NamedTuple):
    """A stored call-log row, untrusted until verified (any column may be tampered).

    Attributes:
        seq: The row's sequence column.
        time: The row's time column.
        agent: The row's agent column.
        entry: The stored entry bytes (or whatever a tamperer put there).
        sig: The stored signature: Ed25519 for a ``chit-call-log/1`` entry,
            empty for later ones (the log's checkpoints sign those).
    """

    seq: Any
    time: Any
    agent: Any
    entry: Any
    sig: Any


@dataclass(frozen=True)
class Presence:
    """An engine process or an edge, as the engines saw it (docs/vital-signs.md).

    Attributes:
        kind: ``engine`` (an engine process, workers included) or ``edge``
            (an edge whose calls an engine served over ``chit-engine/1``).
        label: ``host/pid`` (an edge's is what it sent: untrusted, escaped,
            at most ``LIMITS.presence_label_chars``).
        role: An engine's role (``engine``, ``worker``, ``embedded``); ``edge``.
        started: When the engine started, or the edge was first seen, Unix seconds.
        seen: When it was last seen, Unix seconds.
    """

    kind: str
    label: str
    role: str
    started: int
    seen: int


class Store(ApprovalStore, Protocol):
    """What the engine needs from its state store.

    Every method may raise :class:`~engine.errors.StoreError` when the
    store fails (its message names the store by :attr:`location`, never a
    password); what failed changed nothing.
    """

    location: str
    """The store's URL without any password, for operators' messages."""

    def revoke(self, block_id: str, *, now: int, reason: str = "") -> bool:
        """Revoke a token or block id; True if it was not revoked before."""

    def any_revoked(self, block_ids: Iterable[str]) -> bool:
        """True iff any of the hex block ids is revoked."""

    def call_state(self, block_ids: Iterable[str]) -> tuple[bool, FreezeState]:
        """Whether any of the hex block ids is revoked, and the engine's mode, read together.

        What every call's check reads from the store, in one statement (one
        round trip to a PostgreSQL server).
        """

    def record_delegation(self, delegation: Delegation) -> None:
        """Record an issued delegation."""

    def delegations(self) -> list[Delegation]:
        """Every recorded delegation, oldest first."""

    def freeze_state(self) -> FreezeState:
        """The engine's mode as the operator last set it."""

    def set_freeze(self, frozen: bool, *, now: int, reason: str = "") -> FreezeState:
        """Freeze or unfreeze every engine on this store; returns the new state."""

    def append_log(
        self, compose: Callable[[LogTree | None], LogBatch | None]
    ) -> LogTree | None:
        """Write ``compose(tree head)``'s batch in one transaction serialised on the head.

        ``compose`` may be called more than once (a store may first try the
        head it last wrote, then the head it locked); only a batch made from
        the stored head is written, so ``compose`` must only compute from it.
        """

    def log_tree(self) -> LogTree | None:
        """The stored tree head, untrusted; ``None`` before the first entry of this form."""

    def log_checkpoints(self) -> Iterator[LogCheckpoint]:
        """Stored checkpoints in ascending ``size``, untrusted."""

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
        """The ``chit-call-log/1`` chain head ``(seq, hash, head bytes, sig)``, untrusted."""

    def log_rows(
        self, *, agent: str | None = None, since: int | None = None, batch: int = 512
    ) -> Iterator[LogRow]:
        """Stored call-log rows in ascending ``seq``, untrusted, optionally filtered."""

    # --- moving durable state between stores (``chit state copy``) -----------------

    def durable_state(self) -> frozenset[str]:
        """The durable tables (``engine.state.durable``) holding state; a missing one holds none."""

    def export_durable(self, *, now: int) -> Generator[tuple[str, tuple[Any, ...]], None, None]:
        """Every durable row, ``(table, values)``, table by table, from one snapshot.

        Replay-cache entries that expired before ``now`` are left out. The
        snapshot is held until the iterator is exhausted or closed.
        """

    def import_durable(
        self, rows: Iterable[tuple[str, tuple[Any, ...]]], *, now: int
    ) -> dict[str, int]:
        """Write ``rows`` (as :meth:`export_durable` yields them) into this empty store.

        One transaction that first checks, under the store's write lock, that no
        durable table holds state, then inserts every row and announces
        ``revocation`` and ``freeze`` on the change feed; nothing is written if
        any of it fails.

        Returns:
            Rows written per durable table (every table named, 0 included).

        Raises:
            ValueError: If the store already holds durable state, or a row names
                another table or is malformed; nothing is written.
        """

    # --- schema ------------------------------------------------------------------

    def schema_version(self) -> int:
        """The version of the schema the store holds (migrated forward when opened)."""

    def record_owner(self, owner: str) -> str:
        """Record whose the store is, unless it already says (docs/vital-signs.md).

        Args:
            owner: The identity (JSON text) of the engine's home and repositories.

        Returns:
            What the store records now: ``owner``, or what an engine wrote
            before (``owner`` when that is over ``LIMITS.identity_record_bytes``).
        """

    def recorded_owner(self) -> str | None:
        """Whose the store says it is (untrusted JSON text), or ``None``.

        ``None`` when it never said, or its record is longer than
        ``LIMITS.identity_record_bytes`` (bounded in the query: never loaded).
        """

    def note_presence(self, rows: Sequence[Presence], *, now: int) -> None:
        """Record engines and edges seen, in one transaction (docs/vital-signs.md).

        A row of the same ``(kind, label)`` is updated: its ``seen`` only moves
        forward, an engine's ``started`` is replaced, an edge's keeps the
        earliest. Rows last seen before ``now - LIMITS.presence_keep_seconds``
        are deleted, and beyond ``LIMITS.presence_rows`` the least recently
        seen.

        Args:
            rows: What was seen (each label at most ``LIMITS.presence_label_chars``).
            now: Unix seconds.

        Raises:
            ValueError: If a row's kind is not ``engine`` or ``edge``, or its
                label is empty or too long; nothing is written.
        """

    def presence(self, *, since: int) -> list[Presence]:
        """Engines and edges seen at or after ``since`` (Unix seconds), most recent first.

        At most ``LIMITS.presence_rows`` rows; read back they are untrusted.
        """

    def close(self) -> None:
        """Release the store's connections and stop its change watcher; idempotent."""

    # --- rate limits (docs/policy.md, "Rate limits") -------------------------------

    def admit_rate(self, windows: Sequence[RateWindow], *, now: float) -> tuple[int, float] | None:
        """Count one call in every window, or in none if one of them is full.

        Atomic across every engine on the store: of N concurrent calls against
        a window with room for k, exactly k are admitted.

        Args:
            windows: The windows the call falls in (at least one).
            now: The engine's clock, unix seconds (fractions allowed).

        Returns:
            ``None`` if the call was admitted (and is now counted in each
            window), else ``(i, oldest)``: ``windows[i]`` is the first full one
            and ``oldest`` the time of its oldest counted call, unix seconds.
        """

    # --- the change feed ---------------------------------------------------------

    def announce(self, kind: str, *, now: int) -> int:
        """Record a change every engine must act on; returns its feed position.

        :meth:`revoke` and :meth:`set_freeze` announce their own change in
        the same transaction; this is for changes made outside the store
        (keys, policy files).

        Raises:
            ValueError: If ``kind`` is not one of :data:`CHANGE_KINDS`.
        """

    def latest_change(self) -> int:
        """The feed position of the newest change (0: none yet)."""

    def wait_change(self, after: int, timeout: float) -> int:
        """Block until the feed moves past ``after``, or ``timeout`` seconds pass.

        Changes made by any engine or command on this store count. The first
        call starts the store's watcher (PostgreSQL ``LISTEN``, or polling).

        Args:
            after: A position a caller saw (``-1``: answer at once).
            timeout: Seconds to wait at most.

        Returns:
            The newest position known; greater than ``after`` unless it timed out.
        """

    # --- where each engine session is served (engine workers) ---------------------

    def place_session(self, session: str, owner: str, *, now: int) -> str:
        """Record ``owner`` as the worker serving ``session`` unless one is recorded.

        Returns:
            The owner on record afterwards (``owner`` if the claim won).
        """

    def move_session(self, session: str, old: str, new: str, *, now: int) -> bool:
        """Move ``session`` from ``old`` to ``new`` if ``old`` is still on record."""

    def release_sessions(self, owner: str, sessions: Sequence[str] | None = None) -> int:
        """Forget ``sessions`` (default: every one) placed with ``owner``; how many went.

        A worker releases a session it forgets, and all of its own when it stops.
        """

    # --- locks shared by engines on several hosts ---------------------------------

    def lane_lock(self, name: str) -> AbstractContextManager[None] | None:
        """A lock on ``name`` held across every engine on the store, or ``None``.

        ``None`` when the store reaches only one host's engines (SQLite),
        whose lane locks are files; PostgreSQL answers an advisory lock.
        """


def check_presence(rows: Sequence[Presence]) -> None:
    """Refuse presence rows a store must not write (see :meth:`Store.note_presence`).

    Raises:
        ValueError: If a row's kind, label or times are malformed.
    """
    for row in rows:
        if row.kind not in ("engine", "edge"):
            raise ValueError("a presence row is an engine's or an edge's")
        if not row.label or len(row.label) > LIMITS.presence_label_chars:
            raise ValueError("a presence label is 1 to presence_label_chars characters")
        if not 0 < len(row.role) <= 32:
            raise ValueError("a presence role is 1 to 32 characters")
        if not (0 <= row.started <= MAX_JTI_KEEP_UNTIL and 0 <= row.seen <= MAX_JTI_KEEP_UNTIL):
            raise ValueError("a presence time is out of range")
