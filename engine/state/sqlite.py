"""The state store on SQLite: ``<home>/state.db``, WAL mode, shared by every process of a home.

Every engine process and CLI command of a home opens the same file, so what one
records (a revocation, the freeze, an intent) the others see on their next call.
Each operation is one short transaction; call-log appends and replay-cache claims
run under ``BEGIN IMMEDIATE`` (docs/audit.md §8; docs/exchange.md, "Replay
protection"). The contract: :class:`~engine.state.store.Store`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from engine.limits import LIMITS
from engine.state.sqlite_schema import INTENT_SQL, SCHEMA
from engine.state.store import (
    MAX_JTI_KEEP_UNTIL,
    Delegation,
    FreezeState,
    Intent,
    LogBatch,
    LogCheckpoint,
    LogRow,
    LogTree,
)

__all__ = ["SQLiteStore", "open_store"]


class SQLiteStore:
    """:class:`~engine.state.store.Store` on SQLite in WAL mode.

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
            db.executescript(SCHEMA)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    def _connect(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(
                self._path, timeout=LIMITS.sqlite_busy_timeout_seconds, isolation_level=None
            )
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

    def append_log(
        self, compose: Callable[[LogTree | None], LogBatch | None]
    ) -> LogTree | None:
        """Append a batch of call-log entries (and maybe a checkpoint), serialised on the head.

        Inside one ``BEGIN IMMEDIATE`` transaction (the database's write lock, so
        no two appends interleave, from any process) this reads the tree head,
        asks ``compose(head)`` for the batch (``None``: nothing to write), inserts
        its entries and checkpoint and moves the head. The next entry always
        continues from the *head*, never from the last row: rows deleted behind
        the head's back stay a visible gap; the store repairs nothing. ``compose``
        may read :meth:`log_rows` and :meth:`log_head` (same transaction), as it
        must when there is no head yet but entries of the first form exist.

        Args:
            compose: Makes the batch from the stored head (``None`` if none).

        Returns:
            The tree head after the transaction.

        Raises:
            sqlite3.Error: If the database fails, or a sequence number is taken
                (a row inserted behind the engine's back); nothing is written.
            ValueError: If the batch's entries do not number on from the head
                (a programming error); nothing is written.
        """
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            tree = self._read_tree(db)
            batch = compose(tree)
            if batch is None:
                db.execute("ROLLBACK")
                return tree
            first = tree.size + 1 if tree is not None else None
            for i, item in enumerate(batch.entries):
                if first is not None and item.seq != first + i:
                    raise ValueError("call-log entries must number on from the tree head")
            db.executemany(
                "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (?, ?, ?, ?, x'')",
                [(e.seq, e.time, e.agent, e.entry) for e in batch.entries],
            )
            t = batch.tree
            db.execute(
                "INSERT OR REPLACE INTO call_log_tree"
                " (id, origin, size, last, frontier, signed, signed_at)"
                " VALUES (1, ?, ?, ?, ?, ?, ?)",
                (t.origin, t.size, t.last, t.frontier, t.signed, t.signed_at),
            )
            if batch.checkpoint is not None:
                c = batch.checkpoint
                db.execute(
                    "INSERT INTO call_log_checkpoint (size, time, note) VALUES (?, ?, ?)",
                    (c.size, c.time, c.note),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return batch.tree

    @staticmethod
    def _read_tree(db: sqlite3.Connection) -> LogTree | None:
        row = db.execute(
            "SELECT origin, size, last, frontier, signed, signed_at FROM call_log_tree"
            " WHERE id = 1"
        ).fetchone()
        if row is None:
            return None
        origin, size, last, frontier, signed, signed_at = row
        if not (
            isinstance(origin, str)
            and type(size) is int
            and isinstance(last, bytes)
            and isinstance(frontier, bytes)
            and type(signed) is int
            and type(signed_at) is int
        ):
            raise sqlite3.DatabaseError("the call log's tree head is malformed")
        return LogTree(origin, size, last, frontier, signed, signed_at)

    def log_tree(self) -> LogTree | None:
        """The stored tree head, untrusted; ``None`` before the first entry of this form.

        Raises:
            sqlite3.DatabaseError: If the row's columns have the wrong types.
        """
        return self._read_tree(self._connect())

    def log_checkpoints(self) -> Iterator[LogCheckpoint]:
        """Stored checkpoints in ascending ``size``, untrusted (their notes are unverified)."""
        rows = self._connect().execute(
            "SELECT size, time, note FROM call_log_checkpoint ORDER BY size"
        )
        for size, when, note in rows:
            yield LogCheckpoint(size, when, note)

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
        and of this repository's live ones only the ``LIMITS.intents_per_repository`` that
        expire last are kept, at most ``LIMITS.intents_per_token`` per token.

        Args:
            intent: The intent; ``paths`` at most ``LIMITS.intent_paths``.
            now: Unix seconds.
            staged: Record the paths the session has staged (table
                ``staged_paths``, same rules) instead of a declared intent; an
                intent with no paths then deletes the session's row.

        Raises:
            ValueError: If ``intent`` names more than ``LIMITS.intent_paths``
                paths or a path that is not a string (a programming error).
            sqlite3.Error: If the database fails; nothing is changed.
        """
        if len(intent.paths) > LIMITS.intent_paths or not all(
            isinstance(p, str) for p in intent.paths
        ):
            raise ValueError("an intent names at most 256 path strings")
        sql = INTENT_SQL[staged]
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
            # One token's sessions keep at most LIMITS.intents_per_token intents, so a
            # single agent cannot fill the table every peer lookup reads.
            db.execute(
                sql["per_token"],
                (intent.repo, intent.token_id, intent.repo, intent.token_id,
                 LIMITS.intents_per_token),
            )
            db.execute(sql["per_repo"], (intent.repo, intent.repo, LIMITS.intents_per_repository))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def intents(self, repo: str, *, now: int, staged: bool = False) -> list[Intent]:
        """Live intents about ``repo`` (at most ``LIMITS.intents_per_repository``), by session.

        A row that does not read back as an intent (paths not a JSON list of
        strings, or too many) is skipped.

        Args:
            repo: The repository's identity, as in :attr:`Intent.repo`.
            now: Unix seconds; intents expiring at or before it are left out.
            staged: Read sessions' staged paths instead of declared intents.

        Returns:
            Intents ordered by session id, then token id.
        """
        live = INTENT_SQL[staged]["live"]
        rows = self._connect().execute(live, (repo, now, LIMITS.intents_per_repository)).fetchall()
        out: list[Intent] = []
        for session, token_id, agent, raw, expires_at in rows:
            try:
                paths = json.loads(raw)
            except (TypeError, ValueError):
                continue
            if (
                not isinstance(paths, list)
                or len(paths) > LIMITS.intent_paths
                or not all(isinstance(p, str) for p in paths)
            ):
                continue
            out.append(
                Intent(repo, str(session), str(token_id), str(agent), tuple(paths), int(expires_at))
            )
        return out

    def log_head(self) -> tuple[Any, Any, Any, Any] | None:
        """The ``chit-call-log/1`` chain head ``(seq, hash, head bytes, sig)``, untrusted.

        Kept for logs written before checkpoints: the head of their last signed
        entry; ``None`` if the log never had one.
        """
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
            yield from map(LogRow._make, rows)
            if len(rows) < batch:
                return
            after = rows[-1][0]


def open_store(home: str | os.PathLike[str]) -> SQLiteStore:
    """Open (creating if needed) the state store of a chit home."""
    return SQLiteStore(Path(home) / "state.db")
