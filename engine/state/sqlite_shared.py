"""What engines sharing one SQLite store coordinate on: rate windows, the change feed, sessions.

Rate windows are counted in one ``BEGIN IMMEDIATE`` transaction per call, so N
engine processes admit together what the policy allows (docs/policy.md, "Rate
limits"). The change feed is a table of rising positions that every engine
polls (docs/deployment.md, "The change feed"). Engine workers record which of
them serves each session (docs/deployment.md, "Workers").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from engine.limits import LIMITS
from engine.state._sqlite import SQLiteBase, guard_errors
from engine.state.feed import ChangeFeed, PollingFeed
from engine.state.store import CHANGE_KINDS, RateWindow

__all__ = ["SQLiteShared"]


@guard_errors
class SQLiteShared(SQLiteBase):
    """The coordination part of :class:`~engine.state.sqlite.SQLiteStore`."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._feed: ChangeFeed = PollingFeed(self.latest_change)

    # --- rate limits -------------------------------------------------------------

    def admit_rate(self, windows: Sequence[RateWindow], *, now: float) -> tuple[int, float] | None:
        """Count one call in every window, or in none if one is full (one transaction).

        Calls older than their window are deleted in the same transaction (every
        window's, so an agent that stopped calling leaves nothing behind).

        Returns:
            ``None`` if admitted, else ``(i, oldest)`` for the first full window.
        """
        with self._write() as db:
            db.execute("DELETE FROM rate_events WHERE expires <= ?", (now,))
            for i, window in enumerate(windows):
                count, oldest = db.execute(
                    "SELECT COUNT(*), MIN(at) FROM rate_events WHERE key = ? AND at > ?",
                    (window.key, now - window.per_seconds),
                ).fetchone()
                if count >= window.calls:
                    return (i, float(oldest))
            db.executemany(
                "INSERT INTO rate_events (key, at, expires) VALUES (?, ?, ?)",
                [(w.key, now, now + w.per_seconds) for w in windows],
            )
        return None

    # --- the change feed ---------------------------------------------------------

    def announce(self, kind: str, *, now: int) -> int:
        """Record a change (one of :data:`CHANGE_KINDS`); returns its position."""
        if kind not in CHANGE_KINDS:
            raise ValueError(f"unknown change kind {kind!r}")
        with self._write() as db:
            position = self._announce(db, kind, now)
        self._feed.moved(position)
        return position

    @staticmethod
    def _announce(db: sqlite3.Connection, kind: str, now: int) -> int:
        """Insert the change row inside the caller's write transaction."""
        cursor = db.execute("INSERT INTO changes (kind, at) VALUES (?, ?)", (kind, now))
        position = int(cursor.lastrowid or 0)
        db.execute("DELETE FROM changes WHERE id <= ?", (position - LIMITS.changes_kept,))
        return position

    def latest_change(self) -> int:
        """The newest change's position (0: none yet)."""
        row = self._connect().execute("SELECT MAX(id) FROM changes").fetchone()
        return int(row[0] or 0)

    def wait_change(self, after: int, timeout: float) -> int:
        """Block until the feed passes ``after`` or ``timeout`` seconds pass (polling)."""
        return self._feed.wait(after, timeout)

    # --- sessions of engine workers ----------------------------------------------

    def place_session(self, session: str, owner: str, *, now: int) -> str:
        """Record ``owner`` for ``session`` unless one is; return the owner on record."""
        db = self._connect()
        db.execute(
            "INSERT OR IGNORE INTO engine_sessions (session, owner, placed_at) VALUES (?, ?, ?)",
            (session, owner, now),
        )
        row = db.execute(
            "SELECT owner FROM engine_sessions WHERE session = ?", (session,)
        ).fetchone()
        return str(row[0]) if row is not None else owner

    def move_session(self, session: str, old: str, new: str, *, now: int) -> bool:
        """Move ``session`` from ``old`` to ``new`` if ``old`` is still on record."""
        cursor = self._connect().execute(
            "UPDATE engine_sessions SET owner = ?, placed_at = ? WHERE session = ? AND owner = ?",
            (new, now, session, old),
        )
        return cursor.rowcount == 1

    def release_sessions(self, owner: str, sessions: Sequence[str] | None = None) -> int:
        """Forget ``sessions`` (default: all) placed with ``owner``; how many went."""
        db = self._connect()
        if sessions is None:
            return int(db.execute("DELETE FROM engine_sessions WHERE owner = ?",
                                  (owner,)).rowcount)
        gone = 0
        for session in sessions:
            gone += db.execute("DELETE FROM engine_sessions WHERE owner = ? AND session = ?",
                               (owner, session)).rowcount
        return gone

    # --- locks -----------------------------------------------------------------------

    def lane_lock(self, name: str) -> AbstractContextManager[None] | None:
        """None: engines on one SQLite file share a host, and its lane locks are files."""
        del name
        return None
