"""The engine, called from the HTTP edge's event loop: in worker threads, never raising.

All connections together run at most :data:`ENGINE_THREADS` engine calls at
once; an engine that raises (a remote one unreachable in a way it did not catch)
answers ``internal_error``, so no connection ends over it (docs/http.md).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio
import anyio.to_thread

from engine.service import CallAnswer, OfferAnswer
from gateway.http_edge.connections import OfferState, offer_state
from gateway.mcp_server import ENGINE_UNAVAILABLE, EngineClient

__all__ = ["ENGINE_THREADS", "EngineCalls"]

logger = logging.getLogger("chit.gateway")

ENGINE_THREADS = 8  # engine calls in flight at once, all connections together


class EngineCalls:
    """``offer``, ``invoke`` and offer states of one engine, awaitable.

    Args:
        engine: The embedded engine or a remote one.
    """

    def __init__(self, engine: EngineClient) -> None:
        self._engine = engine
        self._limiter = anyio.CapacityLimiter(ENGINE_THREADS)

    def __repr__(self) -> str:
        return "EngineCalls()"

    async def offer(self, token: str) -> OfferAnswer:
        """The engine's offer to ``token``; ``internal_error`` if it could not answer."""
        try:
            return await anyio.to_thread.run_sync(self._engine.offer, token, limiter=self._limiter)
        except Exception:
            logger.exception("edge failed to reach the engine")
            return ENGINE_UNAVAILABLE

    async def invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        session: str,
        offered_catalog_hash: str | None,
    ) -> CallAnswer:
        """The engine's answer to one call; ``internal_error`` if it could not answer."""
        call = functools.partial(
            self._engine.invoke,
            token,
            tool,
            arguments,
            session=session,
            offered_catalog_hash=offered_catalog_hash,
        )
        try:
            return await anyio.to_thread.run_sync(call, limiter=self._limiter)
        except Exception:
            logger.exception("edge failed to reach the engine")
            return ENGINE_UNAVAILABLE

    async def states(self, tokens: list[str]) -> dict[str, OfferState | None]:
        """The offer state of each token, asked one after another in one worker thread."""
        return await anyio.to_thread.run_sync(self._states, tokens, limiter=self._limiter)

    def _states(self, tokens: list[str]) -> dict[str, OfferState | None]:
        states: dict[str, OfferState | None] = {}
        for token in tokens:
            try:
                states[token] = offer_state(self._engine.offer(token))
            except Exception:
                logger.exception("edge failed to reach the engine")
                states[token] = None
        return states
