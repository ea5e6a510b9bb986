"""Following the approvals a 2025-11-25 connection was sent as URL elicitations.

When an approval is decided (the engine's change feed moves on a decision) or
its time is up, the edge sends ``notifications/elicitation/complete`` with its
id, and the client may retry the call. What is still pending the edge reads
from the ``status`` tool, in the connection's own session and with its own
token: the session's pending approvals (docs/approvals.md, "MCP clients").
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from engine.service import CallAnswer, Called
from gateway.approvals.state import valid_approval_id

__all__ = ["MAX_WAITS", "NOTIFY_TIMEOUT", "Waits", "pending_in_status"]

logger = logging.getLogger("chit.gateway")

MAX_WAITS = 64  # approvals one connection follows at once (the oldest is dropped)
NOTIFY_TIMEOUT = 5.0  # seconds one elicitation/complete may take to reach the client


def pending_in_status(answer: CallAnswer) -> set[str] | None:
    """The ids of the pending approvals a ``status`` answer lists; ``None`` if it lists none.

    Args:
        answer: The engine's answer to ``status`` (``{"approvals": [{"id", ...}]}``).

    Returns:
        The ids, or ``None`` when the call was refused or the result has no
        such list (nothing can be concluded from it).
    """
    if not isinstance(answer, Called) or not isinstance(answer.result, dict):
        return None
    listed = answer.result.get("approvals")
    if not isinstance(listed, list):
        return None
    return {
        str(a["id"]) for a in listed if isinstance(a, dict) and valid_approval_id(a.get("id"))
    }


class Waits:
    """The approvals one connection was sent as URL elicitations, until each is settled.

    Args:
        limit: How many are followed at once; past it the oldest is dropped
            (its client is then not told, and retries on its own).
    """

    def __init__(self, limit: int = MAX_WAITS) -> None:
        self._limit = limit
        self._waits: OrderedDict[str, float | None] = OrderedDict()

    def __repr__(self) -> str:
        return f"Waits({len(self._waits)})"

    def __len__(self) -> int:
        return len(self._waits)

    def add(self, approval: dict[str, Any]) -> None:
        """Follow the approval of these hints (``id``, ``expires_at`` in unix seconds)."""
        expires = approval.get("expires_at")
        at = float(expires) if isinstance(expires, int | float) and not isinstance(
            expires, bool) else None
        self._waits[str(approval["id"])] = at
        self._waits.move_to_end(str(approval["id"]))
        while len(self._waits) > self._limit:
            self._waits.popitem(last=False)

    def settle(self, pending: set[str] | None, now: float | None = None) -> list[str]:
        """Stop following, and return, the approvals decided or past their time.

        Args:
            pending: The ids still pending (:func:`pending_in_status`), or
                ``None`` if unknown (then only the clock settles).
            now: Unix seconds (default: the clock).

        Returns:
            The ids settled, oldest first.
        """
        clock = time.time() if now is None else now
        done = [
            i for i, at in self._waits.items()
            if (pending is not None and i not in pending) or (at is not None and clock >= at)
        ]
        for i in done:
            del self._waits[i]
        return done

    async def check(
        self,
        status: Callable[[], Awaitable[CallAnswer]],
        notify: Callable[[str], Awaitable[None]],
        *,
        ask: bool = True,
    ) -> list[str]:
        """Settle what can be settled and tell the client of each, bounded in time.

        Args:
            status: Asks the engine for ``status`` in the connection's session.
            notify: Sends ``notifications/elicitation/complete`` for one id.
            ask: Ask the engine (the feed moved); ``False``: the clock only.

        Returns:
            The ids the client was told of (or tried to be).
        """
        if not self._waits:
            return []
        pending = None
        if ask:
            try:
                pending = pending_in_status(await status())
            except Exception:
                logger.exception("edge failed to reach the engine")
        done = self.settle(pending)
        for approval_id in done:
            with anyio.move_on_after(NOTIFY_TIMEOUT):
                try:
                    await notify(approval_id)
                except Exception:  # the client may have gone meanwhile
                    logger.debug("elicitation/complete not delivered to a closed session")
        return done
