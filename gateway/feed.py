"""The engine's change feed, followed from an edge's event loop.

A daemon thread waits on the engine's ``wait_change`` (the embedded engine's
state store, or ``POST /v1/changes`` of a separate engine); each time the feed
moves, the edge asks the engine again for the offers of the tokens it serves and
sends ``tools/list_changed`` to the connections whose offer changed
(docs/deployment.md, "The change feed"). The thread never holds up the
process's exit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel

from engine.service import LIMITS, OfferAnswer, Offered

__all__ = ["ChangeSource", "FeedFollower", "OfferState", "offer_state"]

logger = logging.getLogger("chit.gateway")

OfferState = tuple[str, str]
"""An offer's state as an edge compares it: ``("ok", catalog hash)`` or ``("refused", code)``."""


def offer_state(answer: OfferAnswer) -> OfferState | None:
    """The comparable state of an offer; ``None`` if the engine could not tell."""
    if isinstance(answer, Offered):
        return ("ok", answer.catalog_hash)
    return None if answer.code == "internal_error" else ("refused", answer.code)


class ChangeSource(Protocol):
    """What follows the feed needs of an engine (embedded or remote)."""

    def wait_change(self, after: int, timeout: float) -> int:
        """See :meth:`engine.service.Engine.wait_change`."""


class FeedFollower:
    """Runs a callback each time the engine's change feed moves.

    Args:
        engine: The engine whose feed is followed.
        wait: Seconds one wait lasts at most (the engine caps it at
            ``LIMITS.change_wait_seconds``).
    """

    def __init__(self, engine: ChangeSource, *, wait: float = LIMITS.change_wait_seconds) -> None:
        self._engine = engine
        self._wait = wait
        self._failing = False

    def __repr__(self) -> str:
        return f"FeedFollower(waits {self._wait} s)"

    async def run(self, on_move: Callable[[], Awaitable[None]]) -> None:
        """Await ``on_move()`` after each move of the feed, until cancelled.

        Where the feed stands when this starts is not a move. A failing
        ``on_move`` is logged, and the next move calls it again; a failing wait
        counts as no move.
        """
        position = await self.next_position(-1)
        while True:
            moved = await self.next_position(position)
            if moved == position:
                continue
            # A position below the last one means another store: a move too.
            position = moved
            try:
                await on_move()
            except Exception:
                logger.exception("re-checking offers after a change failed")

    async def next_position(self, after: int) -> int:
        """Wait, in a daemon thread, until the feed passes ``after`` or one wait ends.

        Args:
            after: The last position seen (``-1``: answer at once).

        Returns:
            The feed's position, or ``after`` if it did not move or the wait
            failed (then after a pause of ``LIMITS.change_retry_seconds``).
        """
        done = anyio.Event()
        answer: list[int] = []
        token = anyio.lowlevel.current_token()

        def wait() -> None:
            try:
                answer.append(self._engine.wait_change(after, self._wait))
                self._failing = False
            except Exception:
                if not self._failing:  # said once per outage
                    logger.warning("the change feed cannot be read; retrying", exc_info=True)
                self._failing = True
                time.sleep(LIMITS.change_retry_seconds)
            finally:
                # The event loop may have ended meanwhile (the connection closed).
                with contextlib.suppress(RuntimeError):
                    anyio.from_thread.run_sync(done.set, token=token)

        # A daemon thread, not the runtime's worker pool: a wait in progress
        # must never keep the process alive after its connection has closed.
        threading.Thread(target=wait, name="chit-feed", daemon=True).start()
        await done.wait()
        return answer[0] if answer else after
