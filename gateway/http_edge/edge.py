""":class:`HttpEdge`: the streamable HTTP edge as one ASGI app in front of one engine.

It wires the SDK's session manager behind the gate (``gate``), the MCP handlers
(``handlers``), the offer watch (``watch``, woken by the engine's change feed),
the RFC 9728 protected-resource metadata and the approval pages
(``approval_page``), all behind DNS-rebinding protection (``guard``); as one of
several workers (``peers``) it also routes requests to the worker they belong
to, and has a second app for its private
socket. Each repository the engine serves is at ``/repos/NAME/mcp``, and
``/mcp`` is the engine's only one (docs/http.md, "Several repositories").
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.service import validate_repo_name
from gateway.approvals import Hold
from gateway.feed import FeedFollower
from gateway.http_edge.approval_page import APPROVALS_PATH, ApprovalBook, page_path
from gateway.http_edge.connections import REPO_KEY, Connections, Principal
from gateway.http_edge.engine_calls import EngineCalls
from gateway.http_edge.gate import Gate, repo_not_found
from gateway.http_edge.guard import HostOriginGuard
from gateway.http_edge.handlers import Handlers
from gateway.http_edge.peers import LISTED_PATH, EdgeWorkers, Router, SessionNames
from gateway.http_edge.settings import (
    HttpSettings,
    allowed_names,
    authority,
    check_authorization_server,
    url_host,
)
from gateway.http_edge.watch import OfferWatch
from gateway.mcp_server import EngineClient

__all__ = [
    "MAX_SESSIONS",
    "MCP_PATH",
    "METADATA_PATH",
    "REPO_MCP_PATH",
    "HttpEdge",
    "RepoPath",
    "resource_url",
]

MCP_PATH = "/mcp"
REPO_MCP_PATH = "/repos/{name}/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"
MAX_SESSIONS = 4096  # open 2025-11-25 sessions (the engine keeps at most this many too)
_MAX_LISTED_BYTES = 4096  # a peer's note of a listing (private sockets only)


def resource_url(settings: HttpSettings, port: int) -> str:
    """The URL of ``/mcp`` as agents reach it (``public_url`` if set)."""
    base = settings.public_url or f"http://{authority(url_host(settings), port)}"
    return base.rstrip("/") + MCP_PATH


def _valid_name(name: object) -> bool:
    try:
        validate_repo_name(name)
    except ValueError:
        return False
    return True


class RepoPath:
    """ASGI wrapper: the repository a request's path names, in its scope for the gate.

    ``/mcp`` names none (the engine's only one); ``/repos/NAME/mcp`` names
    ``NAME``, which must be a repository name (else ``404``, the answer given
    for every unknown name, before any token is read).

    Args:
        app: What serves the request (the gate, or the workers' router).
        named: This is the ``/repos/NAME/mcp`` route.
    """

    def __init__(self, app: ASGIApp, *, named: bool) -> None:
        self._app = app
        self._named = named

    def __repr__(self) -> str:
        return f"RepoPath(named={self._named})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Put the path's repository in the scope, or answer 404."""
        repo = None
        if self._named:
            repo = scope.get("path_params", {}).get("name")
            if not _valid_name(repo):  # "..", NUL, "%2F" decoded, glob characters, ...
                await repo_not_found()(scope, receive, send)
                return
        scope[REPO_KEY] = repo
        await self._app(scope, receive, send)


class HttpEdge:
    """The streamable HTTP edge: an ASGI app in front of one engine.

    Args:
        engine: Anything with ``offer``, ``invoke`` and ``wait_change``
            (:class:`EngineClient`): the embedded engine or a remote one.
        settings: Where it listens and how it watches offers.
        port: The port actually bound (``settings.port`` may be 0).
        workers: This worker among several (``chit mcp --http --workers N``):
            ``app`` then routes each request to the worker it belongs to, and
            ``private_app`` serves the worker's private socket.
        state_keys: The keys that seal ``requestState`` (newest first): the
            home's (``engine.admin.request_state_keys``) or the ones a
            supervisor shares with its workers; ``None``: this process's own.

    Raises:
        ConfigurationError: If ``settings.public_url`` is not an origin, or
            ``settings.authorization_server`` not an issuer URL chit accepts.
    """

    def __init__(
        self,
        engine: EngineClient,
        settings: HttpSettings,
        *,
        port: int,
        workers: EdgeWorkers | None = None,
        state_keys: Sequence[bytes] | None = None,
    ) -> None:
        check_authorization_server(settings)
        self._settings = settings
        calls = EngineCalls(engine)
        self._connections = Connections()
        hosts, origins = allowed_names(settings, port)
        self.resource = resource_url(settings, port)
        self.metadata_url = self.resource.removesuffix(MCP_PATH) + METADATA_PATH + MCP_PATH
        on_listed = workers.announce_listed if workers is not None else None
        self.book = ApprovalBook()
        handlers = Handlers(calls, self._connections, on_listed, state_keys=state_keys,
                            page_url=self.approval_url, book=self.book,
                            hold=Hold(engine))
        self.server = handlers.build_server()
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
        gate: ASGIApp = Gate(calls, self._connections, self._manager, self.metadata_url,
                             session_idle_timeout=settings.session_idle_timeout)
        metadata = [
            Route(METADATA_PATH, endpoint=self._metadata, methods=["GET"]),
            Route(METADATA_PATH + MCP_PATH, endpoint=self._metadata, methods=["GET"]),
            Route(METADATA_PATH + REPO_MCP_PATH, endpoint=self._metadata, methods=["GET"]),
            Route(APPROVALS_PATH, endpoint=self.book.endpoint, methods=["GET"]),
        ]
        guard = [Middleware(HostOriginGuard, hosts=hosts, origins=origins)]
        shared = gate
        self.private_app: ASGIApp | None = None
        if workers is not None:
            gate = SessionNames(gate, workers.index)
            shared = Router(gate, workers)
            self.private_app = Starlette(  # no lifespan: the shared app's runs the manager
                routes=[*_mcp_routes(gate), *metadata,
                        Route(LISTED_PATH, endpoint=self._listed, methods=["POST"])],
                middleware=guard,
            )
        starlette = Starlette(
            routes=[*_mcp_routes(shared), *metadata],  # ASGI apps at the MCP paths
            middleware=guard,
            lifespan=self._lifespan,
        )
        self.app: ASGIApp = starlette

    def __repr__(self) -> str:
        return f"HttpEdge({self.resource})"

    def approval_url(self, approval_id: str) -> str:
        """The URL of an approval's page, as agents reach the edge (``public_url`` if set)."""
        return self.resource.removesuffix(MCP_PATH) + page_path(approval_id)

    def metadata(self, repo: str | None = None) -> dict[str, Any]:
        """The RFC 9728 protected-resource metadata document (of ``/repos/REPO/mcp`` if given)."""
        resource = self.resource
        if repo is not None:
            resource = resource.removesuffix(MCP_PATH) + f"/repos/{repo}/mcp"
        doc: dict[str, Any] = {
            "resource": resource,
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

    async def _metadata(self, request: Request) -> Response:
        repo = request.path_params.get("name")
        if repo is not None and not _valid_name(repo):
            return repo_not_found()
        return JSONResponse(self.metadata(repo), headers={"Cache-Control": "no-store"})

    async def _listed(self, request: Request) -> Response:
        """Another worker's ``tools/list`` of an identity (private sockets only)."""
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > _MAX_LISTED_BYTES:
                return Response(status_code=413)
        try:
            doc = json.loads(raw)
            fields = (doc["token_id"], doc["agent"], doc["catalog_hash"])
            repo = doc.get("repo")
        except (ValueError, KeyError, TypeError, AttributeError):
            return Response(status_code=400)
        if not all(isinstance(f, str) for f in fields) or not (repo is None or _valid_name(repo)):
            return Response(status_code=400)
        token_id, agent, catalog_hash = fields
        # The worker that tells it had the engine accept the identity's token there.
        state = self._connections.stateless_state(Principal(token_id, agent), repo)
        state.listed_hash = catalog_hash
        return Response(status_code=204)

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


def _mcp_routes(app: ASGIApp) -> list[Route]:
    """``/mcp`` (the engine's only repository) and ``/repos/NAME/mcp``, both served by ``app``.

    Any other path under ``/repos/`` (``/repos/a/../b/mcp``, an encoded ``/``)
    gets the one 404 of an unknown repository.
    """
    return [
        Route(MCP_PATH, endpoint=RepoPath(app, named=False)),
        Route(REPO_MCP_PATH, endpoint=RepoPath(app, named=True)),
        Route("/repos/{rest:path}", endpoint=_NoRepository()),
    ]


class _NoRepository:
    """The raw ASGI app answering every other path under ``/repos/``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await repo_not_found()(scope, receive, send)
