"""Per-principal ``notifications/tools/list_changed`` for ``chit mcp --http``.

Every ``watch_interval`` seconds the edge asks the engine for each connected
token's offer again and notifies only the connections (a session, or a
``subscriptions/listen`` stream) whose offer changed: the token or a parent
revoked, a freeze, a policy change, a retired key (docs/http.md).
"""

from __future__ import annotations

import logging

import anyio

from gateway.http_edge.connections import BoundSession, Connections, Listen
from gateway.http_edge.engine_calls import EngineCalls

__all__ = ["NOTIFY_TIMEOUT", "OfferWatch"]

logger = logging.getLogger("chit.gateway")

NOTIFY_TIMEOUT = 5.0  # seconds one list_changed may take to hand to a connection's stream
_IDLE_GRACE = 5.0  # seconds past the SDK's idle timeout before the edge forgets a session


class OfferWatch:
    """Watches the offers of every connected token.

    Args:
        engine: The engine's calls.
        connections: The edge's connections.
        interval: Seconds between two checks.
        session_idle_timeout: The SDK's idle timeout for sessions, in seconds.
    """

    def __init__(
        self,
        engine: EngineCalls,
        connections: Connections,
        *,
        interval: float,
        session_idle_timeout: float,
    ) -> None:
        self._engine = engine
        self._connections = connections
        self._interval = interval
        self._idle_limit = session_idle_timeout + _IDLE_GRACE

    def __repr__(self) -> str:
        return f"OfferWatch(every {self._interval} s)"

    async def run(self) -> None:
        """Check every interval until cancelled; a failed check is retried the next."""
        while True:
            await anyio.sleep(self._interval)
            try:
                self._connections.forget_idle(self._idle_limit)
                await self.check_offers()
            except Exception:
                logger.exception("the offer check failed; retrying next interval")

    async def check_offers(self) -> int:
        """Ask the engine for every connected token's offer; notify where it changed.

        Returns:
            How many connections were notified.
        """
        watched = self._connections.watched()
        if not watched:
            return 0
        states = await self._engine.states(list({w.token for w in watched}))
        changed = []
        for w in watched:
            state = states.get(w.token)
            if state is not None and state != w.baseline:
                w.baseline = state
                changed.append(w)
        # Each in its own task, bounded: a client that stopped reading its
        # stream must not hold up the others' notifications.
        async with anyio.create_task_group() as tg:
            for w in changed:
                tg.start_soon(_deliver, w)
        return len(changed)


async def _deliver(watched: BoundSession | Listen) -> None:
    with anyio.move_on_after(NOTIFY_TIMEOUT):
        await watched.notify()
