"""What engines sharing one PostgreSQL store coordinate on: rates, the change feed, sessions, lanes.

Rate windows are counted in one transaction per call holding an advisory lock
per window, so every engine on every host admits together what the policy
allows (docs/policy.md, "Rate limits"). The change feed is a table of rising
positions committed in order under an advisory lock and announced with
``NOTIFY`` (docs/deployment.md, "The change feed"). Engine workers record which
of them serves each session; lanes are locked across hosts with session-level
advisory locks (docs/deployment.md, "Lanes with many writers").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager

import psycopg

from engine.limits import LIMITS
from engine.state._postgres import Connection, PostgresBase, advisory_key, guard_errors
from engine.state.feed import ChangeFeed
from engine.state.postgres_feed import CHANNEL, ListeningFeed
from engine.state.store import CHANGE_KINDS, RateWindow
from engine.state.url import StateURL

__all__ = ["CHANGES_LOCK", "PostgresShared"]

logger = logging.getLogger("chit.state")

# Counts the call in every window, or in none if one is full: expired calls are
# deleted (those another transaction is deleting are left to it), and the first
# full window, in the caller's order, is answered with its oldest counted call.
# A call counts while it is in its window and has not expired (the rows this
# statement deletes are still in its snapshot).
_ADMIT = """
WITH now AS (SELECT %s::float8 AS at),
gone AS (
    DELETE FROM rate_events WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM rate_events, now WHERE expires <= now.at
        FOR UPDATE OF rate_events SKIP LOCKED))
),
asked AS (
    SELECT i, key, calls, per
    FROM unnest(%s::text[], %s::bigint[], %s::float8[]) WITH ORDINALITY AS w(key, calls, per, i)
),
counted AS (
    SELECT asked.i, asked.calls, COUNT(r.at) AS used, MIN(r.at) AS oldest
    FROM asked CROSS JOIN now
    LEFT JOIN rate_events r ON r.key = asked.key AND r.at > now.at - asked.per
        AND r.expires > now.at
    GROUP BY asked.i, asked.calls
),
full_window AS (
    SELECT i - 1 AS i, COALESCE(oldest, (SELECT at FROM now)) AS oldest
    FROM counted WHERE used >= calls ORDER BY i LIMIT 1
),
counts AS (
    INSERT INTO rate_events (key, at, expires)
    SELECT asked.key, now.at, now.at + asked.per FROM asked, now
    WHERE NOT EXISTS (SELECT 1 FROM full_window)
)
SELECT i, oldest FROM full_window
"""

CHANGES_LOCK = advisory_key("chit", "change feed")
"""The advisory lock an announcement holds, so positions commit in the order they are taken."""


@guard_errors
class PostgresShared(PostgresBase):
    """The coordination part of :class:`~engine.state.postgres.PostgresStore`."""

    def __init__(self, url: StateURL) -> None:
        super().__init__(url)
        self._feed: ChangeFeed = ListeningFeed(
            self.latest_change, lambda: self._connect_direct("chit changes"), self.location
        )

    # --- rate limits -------------------------------------------------------------

    def admit_rate(self, windows: Sequence[RateWindow], *, now: float) -> tuple[int, float] | None:
        """Count one call in every window, or in none if one is full (one transaction).

        The transaction first takes an advisory lock per window (in key order,
        so two calls never wait on each other in a circle; sent with its
        ``BEGIN``), then one statement counts the call in every window or in
        none, and deletes calls that have left their window (every window's;
        rows another transaction is deleting are left to it): three round
        trips in all.

        Returns:
            ``None`` if admitted, else ``(i, oldest)`` for the first full window.
        """
        keys = sorted({advisory_key("rate", w.key) for w in windows})
        # One lock statement per key, in key order (int() keeps the text fixed).
        locks = "; ".join(f"SELECT pg_advisory_xact_lock({int(key)})" for key in keys)
        values = (
            float(now),
            [w.key for w in windows],
            [w.calls for w in windows],
            [float(w.per_seconds) for w in windows],
        )
        with self._tx_begun(locks) as (conn, _row):
            # A statement after the locks: its snapshot holds every call counted
            # by the transactions that held them before.
            row = conn.execute(_ADMIT, values).fetchone()
        if row is None:
            return None
        return (int(row[0]), float(row[1]))

    # --- the change feed ---------------------------------------------------------

    def announce(self, kind: str, *, now: int) -> int:
        """Record a change (one of :data:`CHANGE_KINDS`) and notify every listener.

        Returns:
            Its position.

        Raises:
            ValueError: If ``kind`` is not one of :data:`CHANGE_KINDS`.
        """
        if kind not in CHANGE_KINDS:
            raise ValueError(f"unknown change kind {kind!r}")
        with self._tx() as conn:
            position = self._announce(conn, kind, now)
        self._feed.moved(position)
        return position

    @staticmethod
    def _announce(conn: Connection, kind: str, now: int) -> int:
        """Insert the change row inside the caller's transaction, under the feed's lock.

        The lock is held until the transaction ends, so positions become
        visible in the order they were taken: a reader that sees position n
        has seen every change before it. ``NOTIFY`` is delivered at commit.
        """
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (CHANGES_LOCK,))
        row = conn.execute("INSERT INTO changes (kind, at) VALUES (%s, %s) RETURNING id",
                           (kind, now)).fetchone()
        position = int(row[0]) if row is not None else 0
        conn.execute("DELETE FROM changes WHERE id <= %s", (position - LIMITS.changes_kept,))
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(position)))
        return position

    def latest_change(self) -> int:
        """The newest change's position (0: none yet)."""
        with self._conn() as conn:
            row = conn.execute("SELECT COALESCE(MAX(id), 0) FROM changes").fetchone()
        return int(row[0]) if row is not None else 0

    def wait_change(self, after: int, timeout: float) -> int:
        """Block until the feed passes ``after`` or ``timeout`` seconds pass (``LISTEN``)."""
        return self._feed.wait(after, timeout)

    # --- sessions of engine workers ----------------------------------------------

    def place_session(self, session: str, owner: str, *, now: int) -> str:
        """Record ``owner`` for ``session`` unless one is; return the owner on record."""
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO engine_sessions (session, owner, placed_at) VALUES (%s, %s, %s)"
                " ON CONFLICT (session) DO NOTHING",
                (session, owner, now),
            )
            row = conn.execute("SELECT owner FROM engine_sessions WHERE session = %s",
                               (session,)).fetchone()
        return str(row[0]) if row is not None else owner

    def move_session(self, session: str, old: str, new: str, *, now: int) -> bool:
        """Move ``session`` from ``old`` to ``new`` if ``old`` is still on record."""
        with self._conn() as conn:
            cursor = conn.execute(
                "UPDATE engine_sessions SET owner = %s, placed_at = %s"
                " WHERE session = %s AND owner = %s",
                (new, now, session, old),
            )
            return cursor.rowcount == 1

    def release_sessions(self, owner: str, sessions: Sequence[str] | None = None) -> int:
        """Forget ``sessions`` (default: all) placed with ``owner``; how many went."""
        with self._conn() as conn:
            if sessions is None:
                cursor = conn.execute("DELETE FROM engine_sessions WHERE owner = %s", (owner,))
            else:
                cursor = conn.execute(
                    "DELETE FROM engine_sessions WHERE owner = %s AND session = ANY(%s)",
                    (owner, list(sessions)),
                )
            return max(0, cursor.rowcount)

    # --- locks -----------------------------------------------------------------------

    def lane_lock(self, name: str) -> AbstractContextManager[None] | None:
        """A lock on ``name`` held across every engine on this store, for a ``with`` block.

        A session-level ``pg_advisory_lock`` on :func:`advisory_key` ``("lane",
        name)``, on a connection taken from the pool for the block and unlocked
        when it ends. If anything goes wrong while locking or unlocking, the
        connection is closed instead of returned, which ends its session and so
        the lock. Waiting is bounded by ``LIMITS.postgres_statement_seconds``.

        Raises:
            StoreError: On entering, if the lock cannot be taken in time or the
                store fails.
        """
        return self._lane_lock(name)

    @contextlib.contextmanager
    def _lane_lock(self, name: str) -> Iterator[None]:
        key = advisory_key("lane", name)
        try:
            pool = self._pooled()
            conn = self._checkout(pool)
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        try:
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            except BaseException as exc:
                conn.close()  # a lock granted as the wait was abandoned dies with it
                if isinstance(exc, psycopg.Error):
                    raise self._failed(exc) from exc
                raise
            try:
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error as exc:
                    conn.close()  # the session ends, and its lock with it
                    logger.warning("a lane lock was released by closing its connection (%s)",
                                   exc.sqlstate or type(exc).__name__)
        finally:
            pool.putconn(conn)
