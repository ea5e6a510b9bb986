"""The state store on SQLite: ``<home>/state.db``, WAL mode, shared by every process of a home.

Every engine process and CLI command of a home opens the same file, so what one
records (a revocation, the freeze, an intent) the others see on their next call.
Each operation is one short transaction; call-log appends, replay-cache claims
and rate windows run under ``BEGIN IMMEDIATE`` (docs/audit.md §8;
docs/exchange.md, "Replay protection"). The schema is versioned and migrated
forward when the store opens (docs/deployment.md, "Schema versions"). The
contract: :class:`~engine.state.store.Store`; its parts: ``sqlite_log``,
``sqlite_intents``, ``sqlite_shared``, ``sqlite_durable``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.errors import SchemaError, StoreError
from engine.limits import LIMITS
from engine.state._common import freeze_of
from engine.state._sqlite import guard_errors
from engine.state.sqlite_approvals import SQLiteApprovals
from engine.state.sqlite_durable import SQLiteDurable
from engine.state.sqlite_intents import SQLiteIntents
from engine.state.sqlite_log import SQLiteCallLog
from engine.state.sqlite_presence import SQLitePresence
from engine.state.sqlite_schema import MIGRATIONS
from engine.state.store import (
    MAX_JTI_KEEP_UNTIL,
    SCHEMA_VERSION,
    Delegation,
    FreezeState,
    check_jti,
)

__all__ = ["SQLiteStore", "open_store"]

_HEX = frozenset("0123456789abcdef")


@guard_errors
class SQLiteStore(SQLiteCallLog, SQLiteIntents, SQLiteDurable, SQLiteApprovals, SQLitePresence):
    """:class:`~engine.state.store.Store` on SQLite in WAL mode.

    Args:
        path: The database file (created 0600 if missing).
        migrate: Bring the schema to :data:`SCHEMA_VERSION` (the default);
            ``False`` only reads the version (``chit state migrate --check``).

    Raises:
        SchemaError: If the file records a schema newer than this chit knows.
        StoreError: If the database cannot be opened or migrated.
    """

    def __init__(self, path: str | os.PathLike[str], *, migrate: bool = True) -> None:
        super().__init__(Path(path))
        try:
            if not self._path.exists():
                fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                os.close(fd)
            elif not stat.S_ISREG(os.stat(self._path).st_mode):
                raise StoreError(
                    f"cannot open the state store {self.location} (not a regular file)"
                )
            self._version = self._migrate() if migrate else self._checked(self._connect())
        except sqlite3.Error as exc:
            name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
            raise StoreError(f"cannot open the state store {self.location} ({name})") from exc
        except OSError as exc:
            raise StoreError(
                f"cannot open the state store {self.location} ({exc.strerror})"
            ) from exc

    def __repr__(self) -> str:
        return f"SQLiteStore({self.location!r})"

    # --- the schema ------------------------------------------------------------------

    @staticmethod
    def _read_version(db: sqlite3.Connection) -> int:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "chit_schema" in tables:
            row = db.execute("SELECT version FROM chit_schema WHERE id = 1").fetchone()
            if row is not None and type(row[0]) is int:
                return int(row[0])
        # Stores made before versions were recorded hold version 1's tables.
        return 1 if "revocations" in tables else 0

    def _checked(self, db: sqlite3.Connection) -> int:
        """The stored version; refuse one newer than this chit knows."""
        version = self._read_version(db)
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"the state store {self.location} has schema version {version}; this chit "
                f"knows versions up to {SCHEMA_VERSION}: upgrade chit"
            )
        return version

    def _migrate(self) -> int:
        with self._write() as db:
            version = self._checked(db)
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    db.execute(statement)
            if version < SCHEMA_VERSION:
                db.execute(
                    "INSERT OR REPLACE INTO chit_schema (id, version) VALUES (1, ?)",
                    (SCHEMA_VERSION,),
                )
        return SCHEMA_VERSION

    def schema_version(self) -> int:
        """The version of the schema the store holds."""
        return self._version

    def record_owner(self, owner: str) -> str:
        """Record whose the store is, unless it already says (the first engine's record stays)."""
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO chit_owner (id, owner) VALUES (1, ?)", (owner,))
            row = db.execute(
                "SELECT owner FROM chit_owner WHERE id = 1 AND length(CAST(owner AS BLOB)) <= ?",
                (LIMITS.identity_record_bytes,)).fetchone()
        return owner if row is None else str(row[0])

    def recorded_owner(self) -> str | None:
        """Whose the store says it is (untrusted JSON text), or ``None`` if it never said."""
        row = self._connect().execute(
            "SELECT owner FROM chit_owner WHERE id = 1 AND length(CAST(owner AS BLOB)) <= ?",
            (LIMITS.identity_record_bytes,)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        """Stop the change feed's watcher and close this thread's connection; idempotent."""
        self._feed.close()
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            db.close()

    # --- revocations and delegations ----------------------------------------------

    def revoke(self, block_id: str, *, now: int, reason: str = "") -> bool:
        """Revoke ``block_id`` (32 hex digits) and announce it on the change feed.

        Raises:
            ValueError: If ``block_id`` is not 32 lowercase hex digits.
        """
        if len(block_id) != 32 or not set(block_id) <= _HEX:
            raise ValueError("a token or block id is 32 lowercase hex digits")
        with self._write() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO revocations (id, revoked_at, reason) VALUES (?, ?, ?)",
                (block_id, now, reason),
            )
            added = cursor.rowcount == 1
            position = self._announce(db, "revocation", now) if added else None
        if position is not None:
            self._feed.moved(position)
        return added

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

    def call_state(self, block_ids: Iterable[str]) -> tuple[bool, FreezeState]:
        """Whether any of the block ids is revoked, and the engine's mode, in one statement."""
        ids = list(block_ids)
        marks = ",".join("?" * len(ids)) or "NULL"
        row = self._connect().execute(
            "SELECT EXISTS (SELECT 1 FROM revocations WHERE id IN ("  # noqa: S608 - only '?'
            + marks
            + ")), m.frozen, m.reason, m.changed_at FROM (SELECT 1) LEFT JOIN engine_mode m"
            " ON m.id = 1",
            ids,
        ).fetchone()
        mode = freeze_of(row[1:])
        return bool(row[0]), mode

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
        return freeze_of(row)

    def set_freeze(self, frozen: bool, *, now: int, reason: str = "") -> FreezeState:
        """Freeze (``True``) or unfreeze every engine that uses this store, and announce it.

        Args:
            frozen: The new mode.
            now: Unix seconds.
            reason: The operator's note, kept with the mode.

        Returns:
            The new state.
        """
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO engine_mode (id, frozen, reason, changed_at)"
                " VALUES (1, ?, ?, ?)",
                (int(frozen), reason, now),
            )
            position = self._announce(db, "freeze", now)
        self._feed.moved(position)
        return FreezeState(frozen, reason, now)

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
            StoreError: If the database fails; nothing is recorded.
        """
        check_jti(issuer, jti)
        keep = min(int(keep_until), MAX_JTI_KEEP_UNTIL)
        with self._write() as db:
            db.execute("DELETE FROM exchange_jti WHERE keep_until < ?", (now,))
            cursor = db.execute(
                "INSERT OR IGNORE INTO exchange_jti (issuer, jti, used_at, keep_until)"
                " VALUES (?, ?, ?, ?)",
                (issuer, jti, now, keep),
            )
            return cursor.rowcount == 1

    def release_jti(self, issuer: str, jti: str) -> None:
        """Forget ``(issuer, jti)``: its exchange failed after the claim and minted nothing.

        Only the process that claimed the entry calls this, and only when it
        returns no token; until then every other exchange of the JWT was refused.

        Raises:
            StoreError: If the database fails (the entry stays: fail closed).
        """
        self._connect().execute(
            "DELETE FROM exchange_jti WHERE issuer = ? AND jti = ?", (issuer, jti)
        )

    def jti_count(self) -> int:
        """How many ``(issuer, jti)`` entries the replay cache holds (for operators and tests)."""
        row = self._connect().execute("SELECT COUNT(*) FROM exchange_jti").fetchone()
        return int(row[0])


def open_store(home: str | os.PathLike[str]) -> SQLiteStore:
    """Open (creating if needed) the SQLite state store of a chit home, ``<home>/state.db``."""
    return SQLiteStore(Path(home) / "state.db")
