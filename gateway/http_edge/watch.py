"""Per-principal ``notifications/tools/list_changed`` for ``chit mcp --http``.

Each time the engine's change feed moves, and every ``watch_interval`` seconds
as a fallback, the edge asks the engine for each connected token's offer again
and notifies only the connections (a session, or a ``subscriptions/listen``
stream) whose offer changed: the token or a parent revoked, a freeze, a policy
change, a retired key (docs/http.md). On the same beat it sends
``notifications/elicitation/complete`` for the approvals a session waits for
that were decided or expired (docs/approvals.md, "MCP clients").
"""

from __future__ import annotations

import logging

import anyio

from engine.service import CallAnswer
from gateway.feed import FeedFollower
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
        interval: Seconds between two checks on the clock.
        session_idle_timeout: The SDK's idle timeout for sessions, in seconds.
        feed: Also check each time this engine's change feed moves.
    """

    def __init__(
        self,
        engine: EngineCalls,
        connections: Connections,
        *,
        interval: float,
        session_idle_timeout: float,
        feed: FeedFollower | None = None,
    ) -> None:
        self._engine = engine
        self._connections = connections
        self._interval = interval
        self._idle_limit = session_idle_timeout + _IDLE_GRACE
        self._feed = feed
        self._checking = anyio.Lock()  # one check at a time: the feed's and the clock's

    def __repr__(self) -> str:
        return f"OfferWatch(every {self._interval} s)"

    async def run(self) -> None:
        """Check on each move of the feed and every interval until cancelled.

        A failed check is retried on the next move or interval.
        """
        async with anyio.create_task_group() as tg:
            if self._feed is not None:
                tg.start_soon(self._feed.run, self._on_change)
            while True:
                await anyio.sleep(self._interval)
                await self._check(ask=False)

    async def _on_change(self) -> None:
        await self._check(ask=True)

    async def _check(self, *, ask: bool) -> None:
        try:
            self._connections.forget_idle(self._idle_limit)
            await self.check_offers()
            await self.check_waits(ask=ask)
        except Exception:
            logger.exception("the offer check failed; retrying on the next change or interval")

    async def check_waits(self, *, ask: bool = True) -> int:
        """Tell each session of the approvals it waits for that were decided or expired.

        Args:
            ask: Ask the engine (``status`` in each waiting session, with its
                token): the feed moved. ``False``: only the clock settles.

        Returns:
            How many ``notifications/elicitation/complete`` were sent (or tried).
        """
        sent = 0
        for session in [s for s in self._connections.sessions.values() if s.waits]:

            async def status(session: BoundSession = session) -> CallAnswer:
                return await self._engine.invoke(
                    session.token, "status", {}, session=session.engine_session,
                    offered_catalog_hash=session.listed_hash, repo=session.repo,
                )

            sent += len(await session.waits.check(status, session.complete, ask=ask))
        return sent

    async def check_offers(self) -> int:
        """Ask the engine for every connected token's offer; notify where it changed.

        Returns:
            How many connections were notified.
        """
        async with self._checking:
            return await self._check_offers()

    async def _check_offers(self) -> int:
        watched = self._connections.watched()
        if not watched:
            return 0
        states = await self._engine.states(list({(w.token, w.repo) for w in watched}))
        changed = []
        for w in watched:
            state = states.get((w.token, w.repo))
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
