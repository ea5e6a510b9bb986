"""Engine state behind a small store interface: revocations and issued delegations.

The default store is SQLite (the standard library's ``sqlite3``, WAL mode) at
``<home>/state.db``, shared by every engine process and CLI command on one host:
``chit revoke`` in one process takes effect on the next call served by another.
Each operation is one short transaction; there is no read-modify-write of a file.
A PostgreSQL store can implement :class:`Store` for several hosts.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Delegation", "SQLiteStore", "Store", "open_store"]

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
"""


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


def open_store(home: str | os.PathLike[str]) -> SQLiteStore:
    """Open (creating if needed) the state store of a chit home."""
    return SQLiteStore(Path(home) / "state.db")
