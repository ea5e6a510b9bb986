"""The change feed's waiting side: a position that moves, and callers waiting for it to.

A store announces changes (revocation, freeze, keys, policy) as rows with rising
positions. :class:`ChangeFeed` holds the newest position this process knows and
wakes every caller of :meth:`ChangeFeed.wait` when it moves; a subclass runs the
thread that learns of new positions: :class:`PollingFeed` asks the store every
``LIMITS.change_poll_seconds`` (SQLite), the PostgreSQL store listens for
``NOTIFY`` (docs/deployment.md, "The change feed").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from engine.limits import LIMITS

__all__ = ["ChangeFeed", "PollingFeed"]

logger = logging.getLogger("chit.state")


class ChangeFeed:
    """The newest known feed position, with waiting; thread-safe.

    Args:
        latest: Reads the store's newest position (raises on a store failure).
    """

    def __init__(self, latest: Callable[[], int]) -> None:
        self._latest = latest
        self._known = -1
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(at {self._known})"

    def _run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _start(self) -> None:
        with self._cond:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._run_guarded, name=f"chit-{type(self).__name__}", daemon=True
            )
            self._thread.start()

    def _run_guarded(self) -> None:
        while not self._stop.is_set():
            try:
                self._run()
            except Exception:
                # A store that fails now may answer later; waiters time out meanwhile.
                logger.warning("the change feed failed; retrying", exc_info=True)
                self._stop.wait(LIMITS.change_retry_seconds)

    def moved(self, position: int) -> None:
        """Record that the feed reached ``position`` and wake the waiters if it moved."""
        with self._cond:
            if position > self._known:
                self._known = position
                self._cond.notify_all()

    def refresh(self) -> int:
        """Read the store's newest position now, record it and return it."""
        position = self._latest()
        self.moved(position)
        return max(position, self._known)

    def wait(self, after: int, timeout: float) -> int:
        """Block until the position passes ``after``, or ``timeout`` seconds pass.

        Args:
            after: A position the caller saw; ``-1`` answers at once.
            timeout: Seconds, at most ``LIMITS.change_wait_seconds``.

        Returns:
            The newest position known.
        """
        self._start()
        if self._known < 0:
            self.refresh()
        deadline = time.monotonic() + min(max(0.0, timeout), LIMITS.change_wait_seconds)
        with self._cond:
            while self._known <= after and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._known

    def close(self) -> None:
        """Stop the watching thread and wake every waiter; idempotent."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * LIMITS.change_poll_seconds + 1)


class PollingFeed(ChangeFeed):
    """A feed that asks the store for its newest position every ``LIMITS.change_poll_seconds``."""

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(LIMITS.change_poll_seconds)
