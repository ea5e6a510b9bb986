""":class:`HttpEdge`: the streamable HTTP edge as one ASGI app in front of one engine.

It wires the SDK's session manager behind the gate (``gate``), the MCP handlers
(``handlers``), the offer watch (``watch``, woken by the engine's change feed)
and the RFC 9728 protected-resource metadata, all behind DNS-rebinding
protection (``guard``); docs/http.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from gateway.feed import FeedFollower
from gateway.http_edge.connections import Connections
from gateway.http_edge.engine_calls import EngineCalls
from gateway.http_edge.gate import Gate
from gateway.http_edge.guard import HostOriginGuard
from gateway.http_edge.handlers import Handlers
from gateway.http_edge.settings import (
    HttpSettings,
    allowed_names,
    authority,
    check_authorization_server,
    url_host,
)
from gateway.http_edge.watch import OfferWatch
from gateway.mcp_server import EngineClient

__all__ = ["MAX_SESSIONS", "MCP_PATH", "METADATA_PATH", "HttpEdge"]

MCP_PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"
MAX_SESSIONS = 4096  # open 2025-11-25 sessions (the engine keeps at most this many too)


class HttpEdge:
    """The streamable HTTP edge: an ASGI app in front of one engine.

    Args:
        engine: Anything with ``offer``, ``invoke`` and ``wait_change``
            (:class:`EngineClient`): the embedded engine or a remote one.
        settings: Where it listens and how it watches offers.
        port: The port actually bound (``settings.port`` may be 0).

    Raises:
        ConfigurationError: If ``settings.public_url`` is not an origin, or
            ``settings.authorization_server`` not an issuer URL chit accepts.
    """

    def __init__(self, engine: EngineClient, settings: HttpSettings, *, port: int) -> None:
        check_authorization_server(settings)
        self._settings = settings
        calls = EngineCalls(engine)
        self._connections = Connections()
        hosts, origins = allowed_names(settings, port)
        base = (settings.public_url or f"http://{authority(url_host(settings), port)}")
        self.resource = base.rstrip("/") + MCP_PATH
        self.metadata_url = base.rstrip("/") + METADATA_PATH + MCP_PATH
        self.server = Handlers(calls, self._connections).build_server()
        self._manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=sorted(hosts),
                allowed_origins=sorted(origins),
            ),
            session_idle_timeout=settings.session_idle_timeout,
            max_sessions=MAX_SESSIONS,
        )
        self._watch = OfferWatch(
            calls, self._connections, interval=settings.watch_interval,
            session_idle_timeout=settings.session_idle_timeout, feed=FeedFollower(engine),
        )
        gate = Gate(calls, self._connections, self._manager, self.metadata_url)
        starlette = Starlette(
            routes=[
                Route(MCP_PATH, endpoint=gate),  # an ASGI app, not a request handler
                Route(METADATA_PATH, endpoint=self._metadata, methods=["GET"]),
                Route(METADATA_PATH + MCP_PATH, endpoint=self._metadata, methods=["GET"]),
            ],
            middleware=[Middleware(HostOriginGuard, hosts=hosts, origins=origins)],
            lifespan=self._lifespan,
        )
        self.app: ASGIApp = starlette

    def __repr__(self) -> str:
        return f"HttpEdge({self.resource})"

    def metadata(self) -> dict[str, Any]:
        """The RFC 9728 protected-resource metadata document."""
        doc: dict[str, Any] = {
            "resource": self.resource,
            "bearer_methods_supported": ["header"],
            "resource_name": "chit",
        }
        if self._settings.authorization_server:
            doc["authorization_servers"] = [self._settings.authorization_server]
        return doc

    async def check_offers(self) -> int:
        """Ask the engine for every connected token's offer; notify where it changed.

        Returns:
            How many connections were notified.
        """
        return await self._watch.check_offers()

    async def _metadata(self, _request: Request) -> Response:
        return JSONResponse(self.metadata(), headers={"Cache-Control": "no-store"})

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self._manager.run(), anyio.create_task_group() as tg:
            tg.start_soon(self._watch.run)
            try:
                yield
            finally:
                for listen in list(self._connections.listens.values()):
                    listen.handler.close()  # each stream ends with its result
                tg.cancel_scope.cancel()
