"""``notifications/progress`` for a ``tools/call`` while it runs (docs/tools.md, "Progress").

Only for a client that sent a progress token (``_meta.progressToken``). Two
sources, one monotone count: what an embedded engine reports of its work
(files indexed of how many, files searched), sent at most every
:data:`TICK_SECONDS`; and, while the engine says nothing, a heartbeat every
:data:`HEARTBEAT_SECONDS` from the first second on (a separate engine's calls
have only this). Engine counts follow the heartbeats sent before them, so the
value never goes down.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from engine.service import Reporter

__all__ = ["HEARTBEAT_SECONDS", "TICK_SECONDS", "following"]

logger = logging.getLogger("chit.gateway")

TICK_SECONDS = 0.25  # at most four notifications a second
HEARTBEAT_SECONDS = 1.0  # while the engine reports nothing: one a second, from the first


def _progress_token(ctx: Any) -> object | None:
    meta = getattr(ctx, "meta", None)
    if isinstance(meta, dict):
        return meta.get("progress_token", meta.get("progressToken"))
    return None


class _CallProgress:
    """The progress of one call: the engine's newest report, and what was sent."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._heard: tuple[int, int | None, str] | None = None
        self._sent = 0.0

    def __repr__(self) -> str:
        return f"_CallProgress(sent={self._sent})"

    def hear(self, done: int, total: int | None, message: str) -> None:
        """The engine's report (any thread): only the newest is kept."""
        with self._lock:
            self._heard = (done, total, message)

    async def _send(self, value: float, total: float | None, message: str) -> None:
        self._sent = value
        try:
            await self._ctx.session.report_progress(value, total, message)
        except Exception:  # a client gone mid-call: the call still answers
            logger.debug("progress not delivered", exc_info=True)

    async def run(self) -> None:
        """Send progress until cancelled (the call answered)."""
        started = time.monotonic()
        next_beat = started + HEARTBEAT_SECONDS
        offset: float | None = None
        last: tuple[int, int | None, str] | None = None
        while True:
            await anyio.sleep(TICK_SECONDS)
            with self._lock:
                heard = self._heard
            if heard is not None:
                if heard == last:
                    continue
                last = heard
                if offset is None:
                    offset = self._sent  # engine counts continue from the heartbeats
                done, total, message = heard
                value = offset + done
                if value > self._sent:
                    await self._send(value, None if total is None else offset + total, message)
            elif time.monotonic() >= next_beat:
                elapsed = int(time.monotonic() - started)
                await self._send(self._sent + 1, None, f"working ({elapsed} s)")
                next_beat += HEARTBEAT_SECONDS


@contextlib.asynccontextmanager
async def following(ctx: Any) -> AsyncIterator[Reporter | None]:
    """Send progress for the request of ``ctx`` while the block runs.

    Args:
        ctx: The SDK's request context of a ``tools/call``.

    Yields:
        The listener to hand the engine (``engine.service.reporting``), or
        ``None`` when the client sent no progress token: nothing is sent then.
    """
    if _progress_token(ctx) is None:
        yield None
        return
    call = _CallProgress(ctx)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.run)
        try:
            yield call.hear
        finally:
            tg.cancel_scope.cancel()
