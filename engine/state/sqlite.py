"""Engine state behind a small store interface: revocations, delegations, mode, log, intents.

The store keeps revocations, issued delegations, the engine's mode (frozen or
not), the call log, the token exchange's replay cache of JWT ``jti`` values and
the sessions' declared intents (``project_context``) and staged paths. The default store is
SQLite (the standard library's ``sqlite3``, WAL mode) at ``<home>/state.db``,
shared by every engine process and CLI command on one host: ``chit revoke`` or
``chit freeze on`` in one process takes effect on the next call served by
another, and an intent declared through one ``chit mcp`` is seen by
``project_context`` in another. Each operation is one short
transaction; there is no read-modify-write of a file. A PostgreSQL store can
implement :class:`Store` for several hosts.

The call log (``engine/calllog.py`` builds, signs and verifies its entries) is
append-only: :meth:`SQLiteStore.append_log` reads the chain head and inserts the
next entry inside one ``BEGIN IMMEDIATE`` transaction, so appends from several
engine processes are serialised and the chain never forks.

The replay cache (:meth:`SQLiteStore.claim_jti`) records each exchanged JWT's
``(issuer, jti)`` inside one ``BEGIN IMMEDIATE`` transaction too, so of two
exchanges of one JWT, in any processes of one home, exactly one finds it new.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "GENESIS",
    "MAX_INTENTS",
    "MAX_INTENTS_PER_TOKEN",
    "MAX_INTENT_PATHS",
    "MAX_JTI_KEEP_UNTIL",
    "Delegation",
    "FreezeState",
    "Intent",
    "LogAppend",
    "LogRow",
    "SQLiteStore",
    "Store",
    "open_store",
]

GENESIS = bytes(32)
"""``prev`` of the first call-log entry: 32 zero bytes."""
MAX_INTENTS = 10_000
"""Live intents kept per repository; past it the ones expiring first are dropped."""
MAX_INTENT_PATHS = 256
"""Paths one intent may name (``project_context`` takes at most this many)."""
MAX_INTENTS_PER_TOKEN = 16
"""Live intents kept per token (its latest sessions); older ones are dropped."""

_INTENT_SQL_TEMPLATES = {
    "expire": "DELETE FROM {table} WHERE expires_at <= ?",
    "forget": "DELETE FROM {table} WHERE repo = ? AND session = ? AND token_id = ?",
    "put": "INSERT OR REPLACE INTO {table} (repo, session, token_id, agent, paths, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?)",
    "per_token": "DELETE FROM {table} WHERE repo = ? AND token_id = ? AND session NOT IN ("
    "SELECT session FROM {table} WHERE repo = ? AND token_id = ?"
    " ORDER BY expires_at DESC LIMIT ?)",
    "per_repo": "DELETE FROM {table} WHERE repo = ? AND (session, token_id) NOT IN ("
    "SELECT session, token_id FROM {table} WHERE repo = ? ORDER BY expires_at DESC LIMIT ?)",
    "live": "SELECT session, token_id, agent, paths, expires_at FROM {table}"
    " WHERE repo = ? AND expires_at > ? ORDER BY session, token_id LIMIT ?",
}
_INTENT_SQL = {
    staged: {name: sql.format(table=table) for name, sql in _INTENT_SQL_TEMPLATES.items()}
    for staged, table in ((False, "intents"), (True, "staged_paths"))
}
"""Statements on declared intents (False) and on sessions' staged paths (True): two
tables of one shape, their names fixed here (values are always bound parameters)."""

MAX_JTI_KEEP_UNTIL = 2**62
"""Latest time a replay-cache entry may name (SQLite integers are 64-bit)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS revocations (
    id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS delegations (
    child_id TEXT PRIMARY KEY,
    parent_id TEXT NOT NULL,
    parent_agent TEXT NOT NULL,
    child_agent TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    scope TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS delegations_parent ON delegations (parent_id);
CREATE TABLE IF NOT EXISTS engine_mode (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    frozen INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    changed_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS call_log (
    seq INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    agent TEXT NOT NULL,
    entry BLOB NOT NULL,
    sig BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS call_log_agent ON call_log (agent, seq);
-- No index on time: every append would pay for it, and `show --since` reads in
-- seq order anyway (seq and time rise together).
DROP INDEX IF EXISTS call_log_time;
CREATE TABLE IF NOT EXISTS exchange_jti (
    issuer TEXT NOT NULL,
    jti TEXT NOT NULL,
    used_at INTEGER NOT NULL,
    keep_until INTEGER NOT NULL,
    PRIMARY KEY (issuer, jti)
);
CREATE INDEX IF NOT EXISTS exchange_jti_keep ON exchange_jti (keep_until);
CREATE TABLE IF NOT EXISTS call_log_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash BLOB NOT NULL,
    head BLOB NOT NULL,
    sig BLOB NOT NULL
);
"""
_INTENT_TABLE = """
CREATE TABLE IF NOT EXISTS {table} (
    repo TEXT NOT NULL,
    session TEXT NOT NULL,
    token_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    paths TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (repo, session, token_id)
);
CREATE INDEX IF NOT EXISTS {table}_expiry ON {table} (repo, expires_at);
"""
_SCHEMA += "".join(_INTENT_TABLE.format(table=table) for table in ("intents", "staged_paths"))



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
        sig: Ed25519 signature over the entry (engine/calllog.py).
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


class SQLiteStore:
    """:class:`Store` on SQLite in WAL mode.

    Args:
        path: The database file (created 0600 if missing).

    Raises:
        sqlite3.Error: If the database cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        if not self._path.exists():
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
        self._local = threading.local()
        with self._connect() as db:
            db.executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    def _connect(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self._path, timeout=10.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def revoke(self, block_id: str, *, now: int, reason: str = "") -> bool:
        """Revoke ``block_id`` (32 hex digits).

        Raises:
            ValueError: If ``block_id`` is not 32 lowercase hex digits.
        """
        if len(block_id) != 32 or any(c not in "0123456789abcdef" for c in block_id):
            raise ValueError("a token or block id is 32 lowercase hex digits")
        cursor = self._connect().execute(
            "INSERT OR IGNORE INTO revocations (id, revoked_at, reason) VALUES (?, ?, ?)",
            (block_id, now, reason),
        )
        return cursor.rowcount == 1

    def any_revoked(self, block_ids: Iterable[str]) -> bool:
        """True iff any of the hex block ids is revoked."""
        ids = list(block_ids)
        if not ids:
            return False
        marks = ",".join("?" * len(ids))
        row = (
            self._connect()
            .execute(
                f"SELECT 1 FROM revocations WHERE id IN ({marks}) LIMIT 1",  # noqa: S608 - only '?'
                ids,
            )
            .fetchone()
        )
        return row is not None

    def record_delegation(self, delegation: Delegation) -> None:
        """Record an issued delegation (idempotent on ``child_id``)."""
        self._connect().execute(
            "INSERT OR IGNORE INTO delegations (child_id, parent_id, parent_agent, child_agent,"
            " issued_at, expires_at, scope) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                delegation.child_id,
                delegation.parent_id,
                delegation.parent_agent,
                delegation.child_agent,
                delegation.issued_at,
                delegation.expires_at,
                json.dumps(delegation.scope, sort_keys=True),
            ),
        )

    def delegations(self) -> list[Delegation]:
        """Every recorded delegation, oldest first."""
        rows = (
            self._connect()
            .execute(
                "SELECT child_id, parent_id, parent_agent, child_agent, issued_at,"
                " expires_at, scope FROM delegations ORDER BY issued_at, child_id"
            )
            .fetchall()
        )
        return [
            Delegation(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), json.loads(r[6])) for r in rows
        ]

    def revoked(self) -> list[dict[str, Any]]:
        """Every revocation, oldest first: ``[{"id", "revoked_at", "reason"}]``."""
        rows = (
            self._connect()
            .execute("SELECT id, revoked_at, reason FROM revocations ORDER BY revoked_at, id")
            .fetchall()
        )
        return [{"id": r[0], "revoked_at": int(r[1]), "reason": r[2]} for r in rows]

    # --- the engine's mode -----------------------------------------------------

    def freeze_state(self) -> FreezeState:
        """The engine's mode as the operator last set it (not frozen if never set)."""
        row = (
            self._connect()
            .execute("SELECT frozen, reason, changed_at FROM engine_mode WHERE id = 1")
            .fetchone()
        )
        if row is None:
            return FreezeState(False, "", 0)
        return FreezeState(bool(row[0]), str(row[1]), int(row[2]))

    def set_freeze(self, frozen: bool, *, now: int, reason: str = "") -> FreezeState:
        """Freeze (``True``) or unfreeze every engine that uses this store.

        Args:
            frozen: The new mode.
            now: Unix seconds.
            reason: The operator's note, kept with the mode.

        Returns:
            The new state.
        """
        self._connect().execute(
            "INSERT OR REPLACE INTO engine_mode (id, frozen, reason, changed_at)"
            " VALUES (1, ?, ?, ?)",
            (int(frozen), reason, now),
        )
        return FreezeState(frozen, reason, now)

    # --- the call log ------------------------------------------------------------

    def append_log(self, compose: Callable[[int, bytes], LogAppend]) -> int:
        """Append one entry to the call log, serialised across processes.

        Inside one ``BEGIN IMMEDIATE`` transaction (the database's write lock,
        so no two appends interleave) this reads the chain head, asks
        ``compose(seq, prev)`` for the next entry, inserts it and moves the head.
        The next entry continues from the *head*, never from the last row: rows
        deleted behind the head's back stay a visible gap, and a deleted head
        starts a visible break (``prev`` = :data:`GENESIS` after earlier rows);
        the store repairs nothing.

        Args:
            compose: Makes the entry for sequence number ``seq`` whose ``prev`` is
                the SHA-256 of the previous entry's bytes (:data:`GENESIS` first).

        Returns:
            The new entry's sequence number.

        Raises:
            sqlite3.Error: If the database fails, or ``seq`` is taken (a row
                inserted behind the engine's back); nothing is appended.
        """
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            head = db.execute("SELECT seq, hash FROM call_log_head WHERE id = 1").fetchone()
            if head is not None:
                seq, prev = int(head[0]) + 1, bytes(head[1])
            else:
                last = db.execute("SELECT MAX(seq) FROM call_log").fetchone()
                seq, prev = (int(last[0]) + 1 if last and last[0] is not None else 1), GENESIS
            made = compose(seq, prev)
            db.execute(
                "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (?, ?, ?, ?, ?)",
                (seq, made.time, made.agent, made.entry, made.sig),
            )
            moved = (seq, hashlib.sha256(made.entry).digest(), made.head, made.head_sig)
            if head is None:
                db.execute(
                    "INSERT INTO call_log_head (id, seq, hash, head, sig) VALUES (1, ?, ?, ?, ?)",
                    moved,
                )
            else:
                db.execute(
                    "UPDATE call_log_head SET seq = ?, hash = ?, head = ?, sig = ? WHERE id = 1",
                    moved,
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return seq

    # --- the token exchange's replay cache -----------------------------------------

    def claim_jti(self, issuer: str, jti: str, *, keep_until: int, now: int) -> bool:
        """Record that the JWT ``(issuer, jti)`` is being exchanged, unless it already was.

        One ``BEGIN IMMEDIATE`` transaction (the database's write lock, as for
        :meth:`append_log`) first forgets the entries whose ``keep_until`` has
        passed, then inserts this one if it is not there. So among any number of
        exchanges of one JWT, in any threads or processes sharing this file,
        exactly one gets True, and the answer survives restarts.

        Args:
            issuer: The configured issuer whose signature verified (the exact ``iss``).
            jti: The verified ``jti`` claim (RFC 7519 section 4.1.7), compared exactly.
            keep_until: Unix seconds until which the entry must be kept: at
                least the last moment the JWT could still be accepted (its
                ``exp`` plus the largest leeway). Clamped to
                :data:`MAX_JTI_KEEP_UNTIL`.
            now: The current time, unix seconds (the clock the JWT's ``exp`` is
                checked against).

        Returns:
            True if this call recorded the entry (the first exchange), False if
            the entry was already there (a replay).

        Raises:
            ValueError: If ``issuer`` or ``jti`` is empty or not UTF-8 encodable
                (nothing is written).
            sqlite3.Error: If the database fails; nothing is recorded.
        """
        for value in (issuer, jti):
            if not isinstance(value, str) or not value:
                raise ValueError("the issuer and jti must be non-empty text")
            value.encode("utf-8")  # UnicodeEncodeError (a ValueError) for lone surrogates
        keep = min(int(keep_until), MAX_JTI_KEEP_UNTIL)
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM exchange_jti WHERE keep_until < ?", (now,))
            cursor = db.execute(
                "INSERT OR IGNORE INTO exchange_jti (issuer, jti, used_at, keep_until)"
                " VALUES (?, ?, ?, ?)",
                (issuer, jti, now, keep),
            )
            claimed = cursor.rowcount == 1
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return claimed

    def release_jti(self, issuer: str, jti: str) -> None:
        """Forget ``(issuer, jti)``: its exchange failed after the claim and minted nothing.

        Only the process that claimed the entry calls this, and only when it
        returns no token; until then every other exchange of the JWT was refused.

        Raises:
            sqlite3.Error: If the database fails (the entry stays: fail closed).
        """
        self._connect().execute(
            "DELETE FROM exchange_jti WHERE issuer = ? AND jti = ?", (issuer, jti)
        )

    def jti_count(self) -> int:
        """How many ``(issuer, jti)`` entries the replay cache holds (for operators and tests)."""
        row = self._connect().execute("SELECT COUNT(*) FROM exchange_jti").fetchone()
        return int(row[0])

    # --- intents ---------------------------------------------------------------------

    def put_intent(self, intent: Intent, *, now: int, staged: bool = False) -> None:
        """Record a session's intent, replacing its earlier one, in one transaction.

        Expired intents of every repository are deleted in the same transaction,
        and of this repository's live ones only the :data:`MAX_INTENTS` that
        expire last are kept, at most :data:`MAX_INTENTS_PER_TOKEN` per token.

        Args:
            intent: The intent; ``paths`` at most :data:`MAX_INTENT_PATHS`.
            now: Unix seconds.
            staged: Record the paths the session has staged (table
                ``staged_paths``, same rules) instead of a declared intent; an
                intent with no paths then deletes the session's row.

        Raises:
            ValueError: If ``intent`` names more than :data:`MAX_INTENT_PATHS`
                paths or a path that is not a string (a programming error).
            sqlite3.Error: If the database fails; nothing is changed.
        """
        if len(intent.paths) > MAX_INTENT_PATHS or not all(
            isinstance(p, str) for p in intent.paths
        ):
            raise ValueError("an intent names at most 256 path strings")
        sql = _INTENT_SQL[staged]
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(sql["expire"], (now,))
            if staged and not intent.paths:
                db.execute(sql["forget"], (intent.repo, intent.session, intent.token_id))
                db.execute("COMMIT")
                return
            db.execute(
                sql["put"],
                (
                    intent.repo,
                    intent.session,
                    intent.token_id,
                    intent.agent,
                    json.dumps(list(intent.paths)),
                    intent.expires_at,
                ),
            )
            # One token's sessions keep at most MAX_INTENTS_PER_TOKEN intents, so a
            # single agent cannot fill the table every peer lookup reads.
            db.execute(
                sql["per_token"],
                (intent.repo, intent.token_id, intent.repo, intent.token_id,
                 MAX_INTENTS_PER_TOKEN),
            )
            db.execute(sql["per_repo"], (intent.repo, intent.repo, MAX_INTENTS))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def intents(self, repo: str, *, now: int, staged: bool = False) -> list[Intent]:
        """Live intents about ``repo`` (at most :data:`MAX_INTENTS`), by session.

        A row that does not read back as an intent (paths not a JSON list of
        strings, or too many) is skipped.

        Args:
            repo: The repository's identity, as in :attr:`Intent.repo`.
            now: Unix seconds; intents expiring at or before it are left out.
            staged: Read sessions' staged paths instead of declared intents.

        Returns:
            Intents ordered by session id, then token id.
        """
        live = _INTENT_SQL[staged]["live"]
        rows = self._connect().execute(live, (repo, now, MAX_INTENTS)).fetchall()
        out: list[Intent] = []
        for session, token_id, agent, raw, expires_at in rows:
            try:
                paths = json.loads(raw)
            except (TypeError, ValueError):
                continue
            if (
                not isinstance(paths, list)
                or len(paths) > MAX_INTENT_PATHS
                or not all(isinstance(p, str) for p in paths)
            ):
                continue
            out.append(
                Intent(repo, str(session), str(token_id), str(agent), tuple(paths), int(expires_at))
            )
        return out

    def log_head(self) -> tuple[Any, Any, Any, Any] | None:
        """The stored chain head ``(seq, hash, head bytes, sig)``, untrusted; ``None`` if none."""
        row = (
            self._connect()
            .execute("SELECT seq, hash, head, sig FROM call_log_head WHERE id = 1")
            .fetchone()
        )
        return None if row is None else (row[0], row[1], row[2], row[3])

    def log_rows(
        self,
        *,
        agent: str | None = None,
        since: int | None = None,
        batch: int = 512,
    ) -> Iterator[LogRow]:
        """Stored call-log rows in sequence order, read in batches (untrusted).

        Args:
            agent: Only rows whose agent column equals this.
            since: Only rows whose time column is at or after this (unix seconds).
            batch: Rows fetched per query.

        Yields:
            :class:`LogRow` in ascending ``seq``.
        """
        where = ["seq > ?"]
        params: list[Any] = []
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        if since is not None:
            where.append("time >= ?")
            params.append(since)
        query = (
            "SELECT seq, time, agent, entry, sig FROM call_log WHERE "  # noqa: S608 - fixed
            + " AND ".join(where)
            + " ORDER BY seq LIMIT ?"
        )
        after: Any = -(2**63)
        while True:
            rows = self._connect().execute(query, (after, *params, batch)).fetchall()
            for r in rows:
                yield LogRow(r[0], r[1], r[2], r[3], r[4])
            if len(rows) < batch:
                return
            after = rows[-1][0]


def open_store(home: str | os.PathLike[str]) -> SQLiteStore:
    """Open (creating if needed) the state store of a chit home."""
    return SQLiteStore(Path(home) / "state.db")
