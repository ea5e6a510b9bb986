"""Holding a 2026-07-28 retry while its approval is still pending.

A client retries an input-required result with its ``requestState``; the
official Python client does so every 50 to 250 ms, ten times. A retry whose
approval is still pending is held until the engine's change feed moves (an
operator's decision moves it) or :data:`HOLD_SECONDS` pass, and the engine is
asked once more: an approval given meanwhile lands within that one retry, and a
waiting client costs the engine a call every few seconds rather than every few
milliseconds. At most :data:`MAX_HOLDS` retries are held at once per edge
process; past that a retry is answered at once (docs/approvals.md, "MCP
clients").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from engine.service import CallAnswer
from gateway.approvals.answers import approval_of
from gateway.feed import ChangeSource, FeedFollower

__all__ = ["HOLD_SECONDS", "MAX_HOLDS", "Hold"]

HOLD_SECONDS = 5.0  # how long one retry of a pending approval is held at most
MAX_HOLDS = 64  # retries held at once by one edge process


class Hold:
    """Holds retries of pending approvals, a bounded number at a time.

    Args:
        engine: The engine whose change feed wakes a held retry.
        seconds: How long one retry is held at most.
        limit: How many are held at once.
    """

    def __init__(
        self, engine: ChangeSource, *, seconds: float = HOLD_SECONDS, limit: int = MAX_HOLDS
    ) -> None:
        self._engine = engine
        self._seconds = seconds
        self._limit = limit
        self._held = 0

    def __repr__(self) -> str:
        return f"Hold({self._held} of {self._limit})"

    async def again(
        self, answer: CallAnswer, echoed: str | None, ask: Callable[[], Awaitable[CallAnswer]]
    ) -> CallAnswer:
        """The answer to a retry: held and asked again if its approval is still pending.

        Args:
            answer: The engine's answer to the retry.
            echoed: The approval id the retry echoed (``None``: not a retry).
            ask: Asks the engine the same call again.

        Returns:
            ``answer``, unless it is ``approval_required`` for the echoed id
            and a hold is free: then the engine's answer after the feed moved
            or :data:`HOLD_SECONDS` passed.
        """
        approval = approval_of(answer)
        if echoed is None or approval is None or approval.get("id") != echoed:
            return answer
        if self._held >= self._limit:
            return answer
        self._held += 1
        try:
            feed = FeedFollower(self._engine, wait=self._seconds)
            with anyio.move_on_after(self._seconds):
                start = await feed.next_position(-1)
                while await feed.next_position(start) == start:
                    pass
            return await ask()
        finally:
            self._held -= 1
