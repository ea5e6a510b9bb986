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

from engine.service import CallAnswer, OfferAnswer, Reporter, reporting
from gateway.http_edge.connections import OfferState, offer_state
from gateway.mcp_server import ENGINE_UNAVAILABLE, EngineClient, invoke_args

__all__ = ["ENGINE_THREADS", "EngineCalls", "Watched"]

logger = logging.getLogger("chit.gateway")

ENGINE_THREADS = 8  # engine calls in flight at once, all connections together

Watched = tuple[str, str | None]
"""A token and the repository it is used on, whose offer the edge watches."""


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

    async def offer(self, token: str, repo: str | None) -> OfferAnswer:
        """The engine's offer to ``token`` on ``repo`` (``internal_error`` if it cannot answer)."""
        offer = functools.partial(self._engine.offer, token, repo=repo)
        try:
            return await anyio.to_thread.run_sync(offer, limiter=self._limiter)
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
        repo: str | None,
        approval: str | None = None,
        hear: Reporter | None = None,
    ) -> CallAnswer:
        """The engine's answer to one call; ``internal_error`` if it could not answer.

        ``approval`` is the approval id a client echoed in its ``requestState``;
        ``hear`` hears an embedded engine's progress (gateway/progress.py).
        """
        call = functools.partial(
            self._invoke,
            hear,
            token,
            tool,
            arguments,
            session=session,
            offered_catalog_hash=offered_catalog_hash,
            repo=repo,
            **invoke_args(approval),
        )
        try:
            return await anyio.to_thread.run_sync(call, limiter=self._limiter)
        except Exception:
            logger.exception("edge failed to reach the engine")
            return ENGINE_UNAVAILABLE

    def _invoke(self, hear: Reporter | None, *args: Any, **kwargs: Any) -> CallAnswer:
        if hear is None:
            return self._engine.invoke(*args, **kwargs)
        with reporting(hear):
            return self._engine.invoke(*args, **kwargs)

    def warning(self, token: str, repo: str | None) -> str | None:
        """The engine's vital-sign line for the instructions (blocking: call it in a thread)."""
        return self._engine.warning(token, repo=repo)

    async def states(self, keys: list[Watched]) -> dict[Watched, OfferState | None]:
        """The offer state of each ``(token, repo)``, asked one after another in one thread."""
        return await anyio.to_thread.run_sync(self._states, keys, limiter=self._limiter)

    def _states(self, keys: list[Watched]) -> dict[Watched, OfferState | None]:
        states: dict[Watched, OfferState | None] = {}
        for token, repo in keys:
            try:
                states[token, repo] = offer_state(self._engine.offer(token, repo=repo))
            except Exception:
                logger.exception("edge failed to reach the engine")
                states[token, repo] = None
        return states
