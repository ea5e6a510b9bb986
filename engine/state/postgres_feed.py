"""The change feed's watcher on PostgreSQL: one dedicated connection that ``LISTEN``s.

Announcements commit a row in ``changes`` and ``NOTIFY chit_changes``. The
watcher keeps one connection of its own (not from the pool) listening on that
channel; after each (re)connect, and after each batch of notifications, it
reads the newest position from the table. A notification is only a wake-up:
any role that can connect may ``NOTIFY`` any channel, so its payload is never
trusted as a position. When the connection drops, the feed's base class logs it
and reconnects after ``LIMITS.change_retry_seconds`` (docs/deployment.md,
"The change feed").
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from engine.errors import StoreError
from engine.limits import LIMITS
from engine.state._postgres import Connection
from engine.state.feed import ChangeFeed

__all__ = ["CHANNEL", "ListeningFeed"]

CHANNEL = "chit_changes"
"""The ``NOTIFY`` channel announcements are sent on."""
_LATEST = "SELECT COALESCE(MAX(id), 0) FROM changes"


class ListeningFeed(ChangeFeed):
    """A feed that learns of new positions from ``NOTIFY`` on a dedicated connection.

    Args:
        latest: Reads the store's newest position through its pool.
        connect: Opens the listening connection (autocommit).
        location: The store's URL without a password, for messages.
    """

    def __init__(
        self, latest: Callable[[], int], connect: Callable[[], Connection], location: str
    ) -> None:
        super().__init__(latest)
        self._connect = connect
        self._location = location

    def _run(self) -> None:
        try:
            self._listen()
        except psycopg.Error as exc:
            code = exc.sqlstate or type(exc).__name__
            raise StoreError(f"the state store {self._location} failed ({code})") from exc

    def _listen(self) -> None:
        with self._connect() as conn:
            conn.execute("LISTEN " + CHANNEL)
            self._catch_up(conn)  # what was announced while no one listened
            checked = time.monotonic()
            while not self._stop.is_set():
                woken = False
                for _note in conn.notifies(timeout=LIMITS.change_poll_seconds, stop_after=1):
                    woken = True
                # Now and then even without a notification: a connection that died
                # quietly fails here, and the feed reconnects.
                if woken or time.monotonic() - checked >= LIMITS.change_wait_seconds:
                    self._catch_up(conn)
                    checked = time.monotonic()

    def _catch_up(self, conn: Connection) -> None:
        row = conn.execute(_LATEST).fetchone()
        self.moved(int(row[0]) if row is not None else 0)
