"""What ``chit mcp --http`` keeps per connection, and who a token claims to be.

A 2025-11-25 session is bound to the identity that opened it and to the
repository of the path it was opened at; in the stateless 2026-07-28 era the
engine session belongs to the token's identity in that repository, under an id
derived from it (the same in every worker of the edge); a
``subscriptions/listen`` stream remembers the offer it last saw (docs/http.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from gateway.approvals import Waits
from gateway.feed import OfferState, offer_state

__all__ = [
    "MAX_STATELESS",
    "REPO_KEY",
    "REQUEST_KEY",
    "BoundSession",
    "Connections",
    "Credentials",
    "EngineSession",
    "Listen",
    "OfferState",
    "Principal",
    "claimed_principal",
    "credentials_of",
    "offer_state",
    "stateless_session",
]

logger = logging.getLogger("chit.gateway")

MAX_STATELESS = 4096  # token identities with stateless-era state kept (least recent dropped)
REQUEST_KEY = "chit.request"  # where the gate leaves a request's credentials in the ASGI scope
REPO_KEY = "chit.repo"  # the repository a request's path names (None: /mcp, the only one)


@dataclass(frozen=True)
class Principal:
    """Who a token claims to be (unverified): its identity block's id and agent."""

    token_id: str
    agent: str


def claimed_principal(token: str) -> Principal:
    """The token's unverified identity.

    Raises:
        ChitError: If the token does not parse.
    """
    from engine.admin import inspect_token

    info = inspect_token(token)
    return Principal(str(info["id"]), str(info.get("agent") or ""))


def stateless_session(principal: Principal) -> str:
    """The engine session id of ``principal`` in the 2026-07-28 era: ``identity.<token id>``.

    Every worker of an edge (and every edge) names an identity's session alike,
    so the identity has one staged change wherever its requests land. Knowing
    the id grants nothing: the engine binds a session to the identity that
    opened it (``session_token_mismatch`` for any other).
    """
    return f"identity.{principal.token_id}"


@dataclass(eq=False)
class EngineSession:
    """What the edge keeps for one engine session: its id and the catalog last listed."""

    engine_session: str = field(default_factory=lambda: uuid.uuid4().hex)
    listed_hash: str | None = None


@dataclass(eq=False)
class BoundSession(EngineSession):
    """A 2025-11-25 session: bound to the identity that opened it."""

    principal: Principal = Principal("", "")
    repo: str | None = None  # the repository of the path it was opened at; it stays there
    token: str = field(default="", repr=False)  # the last one presented (same identity)
    baseline: OfferState | None = None  # the offer last shown or announced
    peer: ServerSession | None = field(default=None, repr=False)
    inflight: int = 0
    idle_since: float = field(default_factory=time.monotonic)
    waits: Waits = field(default_factory=Waits)  # approvals sent as URL elicitations

    async def complete(self, approval_id: str) -> None:
        """Send ``notifications/elicitation/complete`` for ``approval_id`` on the session."""
        if self.peer is not None:
            await self.peer.send_elicit_complete(approval_id)

    async def notify(self) -> None:
        """Send ``notifications/tools/list_changed`` on the session, if it is still open."""
        if self.peer is None:  # nothing heard on the session since it opened
            return
        try:
            await self.peer.send_tool_list_changed()
        except Exception:  # the session may have ended between the check and now
            logger.debug("tools/list_changed not delivered to a closed session")


@dataclass(eq=False)
class Listen:
    """A 2026-07-28 ``subscriptions/listen`` stream and the token that opened it."""

    token: str = field(repr=False)
    baseline: OfferState | None
    bus: InMemorySubscriptionBus
    handler: ListenHandler
    repo: str | None = None

    async def notify(self) -> None:
        """Publish ``ToolsListChanged`` on the stream."""
        await self.bus.publish(ToolsListChanged())


@dataclass(eq=False)
class Credentials:
    """One request's credentials, left in the ASGI scope for the MCP handlers.

    ``resume`` is the engine session a 2026-07-28 request names in its
    ``Chit-Session`` header (docs/http.md, "Resuming a session"); it overrides
    the identity's own for that request only.
    """

    token: str = field(repr=False)
    principal: Principal
    state: EngineSession
    repo: str | None = None
    resume: str | None = None

    @property
    def engine_session(self) -> str:
        """The engine session this request's calls run in."""
        return self.resume or self.state.engine_session


def credentials_of(ctx: Any) -> Credentials | None:
    """The credentials the gate left on the request of an MCP handler's ``ctx``, if any."""
    scope = getattr(ctx.request, "scope", None)
    found = scope.get(REQUEST_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Credentials) else None


class Connections:
    """The edge's connections: open sessions, stateless identities, listen streams."""

    def __init__(self) -> None:
        self.sessions: dict[str, BoundSession] = {}
        self.stateless: OrderedDict[tuple[Principal, str | None], EngineSession] = OrderedDict()
        self.listens: dict[int, Listen] = {}
        self.opening: dict[Principal, int] = {}  # sessions being opened, not yet recorded

    def __repr__(self) -> str:
        return f"Connections({len(self.sessions)} sessions, {len(self.listens)} listens)"

    def stateless_state(self, principal: Principal, repo: str | None) -> EngineSession:
        """The stateless-era state of ``principal`` in ``repo``, made if new (least recent dropped).

        The engine keeps each repository's sessions apart, so one identity's
        session id is the same in every repository.
        """
        key = (principal, repo)
        state = self.stateless.get(key)
        if state is None:
            state = self.stateless[key] = EngineSession(stateless_session(principal))
            while len(self.stateless) > MAX_STATELESS:
                self.stateless.popitem(last=False)
        else:
            self.stateless.move_to_end(key)
        return state

    def held(self, principal: Principal) -> int:
        """Sessions ``principal`` holds: open ones plus those still being opened."""
        open_ = sum(1 for session in self.sessions.values() if session.principal == principal)
        return open_ + self.opening.get(principal, 0)

    def soonest_expiry(self, principal: Principal, idle_timeout: float) -> float | None:
        """Seconds until the first of ``principal``'s idle sessions here expires, if any.

        A session with a request in flight (an open GET stream included) does
        not expire; ``None`` when every one of them has one, or there is none.
        """
        now = time.monotonic()
        left = [session.idle_since + idle_timeout - now for session in self.sessions.values()
                if session.principal == principal and session.inflight == 0]
        return max(0.0, min(left)) if left else None

    def reserve(self, principal: Principal) -> None:
        """Count a session ``principal`` is opening until :meth:`release`."""
        self.opening[principal] = self.opening.get(principal, 0) + 1

    def release(self, principal: Principal) -> None:
        """End a :meth:`reserve` (the session is recorded in ``sessions`` by now, or failed)."""
        left = self.opening.get(principal, 0) - 1
        if left > 0:
            self.opening[principal] = left
        else:
            self.opening.pop(principal, None)

    def forget_idle(self, limit: float) -> None:
        """Forget sessions with no call in flight, idle for more than ``limit`` seconds."""
        now = time.monotonic()
        for session_id, session in list(self.sessions.items()):
            if session.inflight == 0 and now - session.idle_since > limit:
                del self.sessions[session_id]

    def watched(self) -> list[BoundSession | Listen]:
        """Every connection that hears ``tools/list_changed``."""
        return [*self.sessions.values(), *self.listens.values()]
