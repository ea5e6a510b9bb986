"""MCP over streamable HTTP (``chit mcp --http HOST:PORT``), on the official SDK.

One process serves many agents, each request carrying its own chit token as an
``Authorization: Bearer chit_...`` header. The SDK's
:class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager` speaks
both protocol eras on ``/mcp``: the 2025-11-25 session protocol (``initialize``,
``Mcp-Session-Id``, a GET stream for server notifications) and the stateless
2026-07-28 protocol (one self-contained POST per request, ``subscriptions/listen``
for change notifications). In front of it, this module adds what chit needs
(docs/http.md):

- DNS-rebinding protection, always on: a ``Host`` outside the allowed set gets
  421, an ``Origin`` outside it 403, before anything else is read.
- A bearer token on every ``/mcp`` request. Without one, 401 with
  ``WWW-Authenticate: Bearer resource_metadata="..."`` naming the RFC 9728
  protected-resource metadata served under ``/.well-known/oauth-protected-resource``.
  The edge only parses the token (to learn its unverified identity); the engine
  verifies it on every call, and nothing the engine answers is cached as a decision.
- Session binding: a 2025-11-25 session is opened only by a token the engine
  accepts, and is bound to that token's identity (token id and agent). Its id
  alone grants nothing: a request on it with another identity's token gets 403
  with the JSON-RPC error ``data = {"error": "session_token_mismatch", ...}``.
  Each session has its own engine session (its own staged change); in the
  stateless era the engine session belongs to the token's identity.
- ``tools/list`` is computed per request from the presented token, and its
  results carry ``ttlMs: 0, cacheScope: private`` so no client cache shares or
  keeps them.
- Per-principal ``notifications/tools/list_changed``: the edge remembers, per
  connection (a session, or a ``subscriptions/listen`` stream), the catalog it
  last offered, and every ``watch_interval`` seconds asks the engine for each
  connected token's offer again; only connections whose offer changed (the token
  or a parent revoked, a freeze, a policy change, a retired key) are notified.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.errors import ChitError, ConfigurationError
from engine.service import OfferAnswer, Offered, Refused
from gateway import _oauth
from gateway.mcp_server import (
    ENGINE_UNAVAILABLE,
    INSTRUCTIONS,
    TOKEN_REFUSED,
    EngineClient,
    call_result,
    listing_result,
    offered,
)

__all__ = [
    "MCP_PATH",
    "SESSION_TOKEN_MISMATCH_STATUS",
    "HttpEdge",
    "HttpSettings",
    "parse_listen_address",
    "serve_http",
]

logger = logging.getLogger("chit.gateway")

MCP_PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"
SESSION_HEADER = "mcp-session-id"
SESSION_TOKEN_MISMATCH_STATUS = 403
MAX_LISTENS = 1024  # concurrent subscriptions/listen streams, all tokens together
MAX_STATELESS = 4096  # token identities with stateless-era state kept (least recent dropped)
MAX_SESSIONS = 4096  # open 2025-11-25 sessions (the engine keeps at most this many too)
MAX_SESSIONS_PER_IDENTITY = 64  # of them, opened by one token identity
ENGINE_THREADS = 8  # engine calls in flight at once, all connections together
NOTIFY_TIMEOUT = 5.0  # seconds one list_changed may take to hand to a connection's stream
_IDLE_GRACE = 5.0  # seconds past the SDK's idle timeout before the edge forgets a session
_REQUEST_KEY = "chit.request"  # where the gate leaves a request's credentials in the ASGI scope

# An offer's state as the edge compares it: ("ok", catalog hash) or ("refused", code).
OfferState = tuple[str, str]


@dataclass(frozen=True)
class HttpSettings:
    """How ``chit mcp --http`` listens.

    Attributes:
        host: The address to bind: a loopback address (``127.0.0.1``, ``::1``) or
            ``localhost`` unless ``allow_non_loopback``.
        port: The TCP port; 0 picks a free one (printed at start).
        allow_non_loopback: Bind a non-loopback address. Plain HTTP carries every
            bearer token in clear: TLS termination belongs in front (docs/http.md).
        allowed_hosts: ``Host`` values accepted besides the bound address's
            (``name:port``), for a reverse proxy or a LAN name.
        public_url: The origin agents reach the edge at when a proxy is in front
            (``https://chit.example.com``); names the resource in the metadata
            and in ``WWW-Authenticate``, and its host is allowed.
        watch_interval: Seconds between two checks of every connected token's offer.
        session_idle_timeout: Seconds a 2025-11-25 session may stay idle before
            the SDK closes it.
        authorization_server: The issuer identifier of the authorization server
            that issues chit tokens for this resource: a ``chit engine serve``
            with token exchange (``POST /token``, docs/exchange.md) or whatever
            fronts it. When set, the RFC 9728 metadata lists it under
            ``authorization_servers`` (RFC 9728 section 2). It must be ``https``,
            or ``http`` with a loopback host, with no user information, query or
            fragment (:func:`gateway._oauth.check_issuer_url`); :class:`HttpEdge`
            refuses anything else with ``ConfigurationError``.
    """

    host: str = "127.0.0.1"
    port: int = 0
    allow_non_loopback: bool = False
    allowed_hosts: tuple[str, ...] = ()
    public_url: str | None = None
    watch_interval: float = 2.0
    session_idle_timeout: float = 1800.0
    authorization_server: str | None = None


def parse_listen_address(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6) for ``--http``.

    Raises:
        ValueError: If it is not of that form or the port is not 0-65535.
    """
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("--http takes HOST:PORT, for example 127.0.0.1:8765 or [::1]:8765")
    return host, int(port)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Principal:
    """Who a token claims to be (unverified): its identity block's id and agent."""

    token_id: str
    agent: str


@dataclass(eq=False)
class _State:
    """What the edge keeps for one engine session: its id and the catalog last listed."""

    engine_session: str = field(default_factory=lambda: uuid.uuid4().hex)
    listed_hash: str | None = None


@dataclass(eq=False)
class _Session(_State):
    """A 2025-11-25 session: bound to the identity that opened it."""

    principal: Principal = Principal("", "")
    token: str = field(default="", repr=False)  # the last one presented (same identity)
    baseline: OfferState | None = None  # the offer last shown or announced
    peer: ServerSession | None = field(default=None, repr=False)
    inflight: int = 0
    idle_since: float = field(default_factory=time.monotonic)

    async def notify(self) -> None:
        if self.peer is None:  # nothing heard on the session since it opened
            return
        try:
            await self.peer.send_tool_list_changed()
        except Exception:  # the session may have ended between the check and now
            logger.debug("tools/list_changed not delivered to a closed session")


@dataclass(eq=False)
class _Listen:
    """A 2026-07-28 ``subscriptions/listen`` stream and the token that opened it."""

    token: str = field(repr=False)
    baseline: OfferState | None
    bus: InMemorySubscriptionBus
    handler: ListenHandler

    async def notify(self) -> None:
        await self.bus.publish(ToolsListChanged())


@dataclass(eq=False)
class _Request:
    """One request's credentials, left in the ASGI scope for the MCP handlers."""

    token: str = field(repr=False)
    principal: Principal
    state: _State


def _offer_state(answer: OfferAnswer) -> OfferState | None:
    """The comparable state of an offer; ``None`` if the engine could not tell."""
    if isinstance(answer, Offered):
        return ("ok", answer.catalog_hash)
    return None if answer.code == "internal_error" else ("refused", answer.code)


def _principal(token: str) -> Principal:
    """The token's unverified identity; raises ChitError if it does not parse."""
    from engine.admin import operator

    info = operator.inspect_token(token)
    return Principal(str(info["id"]), str(info.get("agent") or ""))


def _jsonrpc_error(status: int, code: int, message: str, data: Any = None,
                   headers: dict[str, str] | None = None) -> Response:
    """A JSON-RPC error body (id null: the client pairs it with its request) at ``status``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": error}, status_code=status, headers=headers
    )


class _HttpServer(Server[Any]):
    """The low-level server, advertising ``tools.listChanged`` at the handshake too."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class _HostOriginGuard:
    """DNS-rebinding protection for every route: foreign ``Host`` 421, foreign ``Origin`` 403.

    A request without ``Origin`` (any non-browser client) passes; one with an
    ``Origin`` must name an allowed host. Runs before authentication, so a
    rebinding page learns nothing, not even whether a token would be accepted.
    """

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str], origins: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            hosts, origins = headers.getlist("host"), headers.getlist("origin")
            # Exact matches, as the SDK's own check behind this one compares them;
            # a repeated header is refused (a proxy and the SDK might read another copy).
            if len(hosts) != 1 or hosts[0] not in self._hosts:
                logger.warning("refused a request for a foreign Host (DNS rebinding?)")
                await Response("Invalid Host header", status_code=421)(scope, receive, send)
                return
            if len(origins) > 1 or (origins and origins[0] not in self._origins):
                logger.warning("refused a request from a foreign Origin")
                await Response("Invalid Origin header", status_code=403)(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _Asgi:
    """Hand Starlette a bound coroutine as a raw ASGI endpoint (not a request handler)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


class HttpEdge:
    """The streamable HTTP edge: an ASGI app in front of one engine.

    Args:
        engine: Anything with ``offer`` and ``invoke`` (:class:`EngineClient`):
            the embedded engine or a remote one.
        settings: Where it listens and how it watches offers.
        port: The port actually bound (``settings.port`` may be 0).

    Raises:
        ConfigurationError: If ``settings.public_url`` is not an origin, or
            ``settings.authorization_server`` not an issuer URL chit accepts.
    """

    def __init__(self, engine: EngineClient, settings: HttpSettings, *, port: int) -> None:
        _check_authorization_server(settings)
        self._engine = engine
        self._settings = settings
        self._limiter = anyio.CapacityLimiter(ENGINE_THREADS)
        self._sessions: dict[str, _Session] = {}
        self._stateless: OrderedDict[Principal, _State] = OrderedDict()
        self._listens: dict[int, _Listen] = {}
        hosts, origins = self._allowed(settings, port)
        base = (settings.public_url or f"http://{_authority(self._url_host(settings), port)}")
        self.resource = base.rstrip("/") + MCP_PATH
        self.metadata_url = base.rstrip("/") + METADATA_PATH + MCP_PATH
        self.server = self._build_server()
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
        starlette = Starlette(
            routes=[
                Route(MCP_PATH, endpoint=_Asgi(self._mcp)),
                Route(METADATA_PATH, endpoint=self._metadata, methods=["GET"]),
                Route(METADATA_PATH + MCP_PATH, endpoint=self._metadata, methods=["GET"]),
            ],
            middleware=[Middleware(_HostOriginGuard, hosts=hosts, origins=origins)],
            lifespan=self._lifespan,
        )
        self.app: ASGIApp = starlette

    def __repr__(self) -> str:
        return f"HttpEdge({self.resource})"

    # --- configuration ------------------------------------------------------

    @staticmethod
    def _url_host(settings: HttpSettings) -> str:
        return "127.0.0.1" if settings.host == "localhost" else settings.host

    @staticmethod
    def _allowed(settings: HttpSettings, port: int) -> tuple[frozenset[str], frozenset[str]]:
        hosts = {_authority(settings.host, port)}
        if _oauth.is_loopback(settings.host):
            hosts |= {f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"}
        hosts |= set(settings.allowed_hosts)
        origins = {f"http://{h}" for h in hosts}
        if settings.public_url:
            # The same rule as the engine's --public-url: https, or http on a
            # loopback host only (bearer tokens cross it); an origin, no fragment.
            try:
                checked = _oauth.check_issuer_url(
                    settings.public_url, option="--public-url", origin_only=True)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from None
            public = urlsplit(checked)
            hosts.add(public.netloc)
            origins.add(f"{public.scheme}://{public.netloc}")
        return frozenset(h.lower() for h in hosts), frozenset(o.lower() for o in origins)

    def _build_server(self) -> Server[Any]:
        from gateway import __version__

        server = _HttpServer(
            "chit",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self._listen,
            # chit's input schemas declare no x-mcp-header parameters, so there is
            # nothing to check Mcp-Param-* headers against; without this the SDK
            # would run tools/list (an engine offer) before every 2026 tools/call.
            get_tool_input_schema=lambda _name: None,
            # The listing depends on the token and can change any moment.
            cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
        )
        server.middleware.append(self._note_peer)
        return server

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self._manager.run(), anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            try:
                yield
            finally:
                for listen in list(self._listens.values()):
                    listen.handler.close()  # each stream ends with its result
                tg.cancel_scope.cancel()

    # --- HTTP: metadata, authentication, session binding ---------------------

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

    async def _metadata(self, _request: Request) -> Response:
        return JSONResponse(self.metadata(), headers={"Cache-Control": "no-store"})

    def _unauthorized(self, code: str, message: str, *, presented: bool) -> Response:
        """401 with the RFC 6750 challenge and the chit refusal as a JSON-RPC error."""
        challenge = f'Bearer resource_metadata="{self.metadata_url}"'
        if presented:  # RFC 6750 §3.1: no error attribute when no token was sent
            challenge = f'Bearer error="invalid_token", resource_metadata="{self.metadata_url}"'
        return _jsonrpc_error(
            401, TOKEN_REFUSED, f"token refused: {code}", {"error": code, "message": message},
            headers={"WWW-Authenticate": challenge},
        )

    async def _mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        credentials = headers.getlist("authorization")
        scheme, _, token = (credentials[0] if len(credentials) == 1 else "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            response = self._unauthorized(
                "token_malformed", "send the chit token as Authorization: Bearer chit_...",
                presented=False,
            )
            await response(scope, receive, send)
            return
        try:
            principal = _principal(token)
        except ChitError as exc:
            await self._unauthorized(exc.code, exc.message, presented=True)(scope, receive, send)
            return
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # The 2026-07-28 era (the SDK routes on this header the same way):
            # no session; the engine session belongs to the token's identity.
            state = self._stateless.get(principal)
            if state is None:
                # State is kept only for an identity the engine accepts: tokens
                # forged with made-up keys must not push out other agents' state.
                if await self._refused(token, scope, receive, send) is not None:
                    return
                state = self._stateless_state(principal)
            else:
                self._stateless.move_to_end(principal)
            scope[_REQUEST_KEY] = _Request(token, principal, state)
            await self._manager.handle_request(scope, receive, send)
            return
        session_id = headers.get(SESSION_HEADER)
        if session_id is None:
            await self._open(scope, receive, send, token, principal)
            return
        session = self._sessions.get(session_id)
        if session is None:
            await _jsonrpc_error(404, -32600, "Session not found")(scope, receive, send)
            return
        if session.principal != principal:
            # A session id alone grants nothing: it stays with the identity that opened it.
            logger.warning("session_token_mismatch: a session of agent %r was presented "
                           "with another token", session.principal.agent)
            await _jsonrpc_error(
                SESSION_TOKEN_MISMATCH_STATUS, TOKEN_REFUSED, "session_token_mismatch",
                {"error": "session_token_mismatch",
                 "message": "this session belongs to another token"},
            )(scope, receive, send)
            return
        if token != session.token:
            # Same claimed identity, other text: the identity is only parsed here, so
            # the engine must accept this token before it may act on the session (a
            # forged tag would otherwise close the session or take over its watch).
            if await self._refused(token, scope, receive, send) is not None:
                return
            session.token = token
        scope[_REQUEST_KEY] = _Request(token, principal, session)
        session.inflight += 1
        try:
            status = await self._forward(scope, receive, send)
        finally:
            session.inflight -= 1
            session.idle_since = time.monotonic()
        if status == 404 or (scope["method"] == "DELETE" and status is not None and status < 300):
            self._sessions.pop(session_id, None)

    async def _open(
        self, scope: Scope, receive: Receive, send: Send, token: str, principal: Principal
    ) -> None:
        """A request without a session id: opens a session if the engine accepts the token."""
        if scope["method"] != "POST":  # the SDK answers (no session id, no stream)
            await self._manager.handle_request(scope, receive, send)
            return
        answer = await self._offer(token)
        if isinstance(answer, Refused):
            await self._refusal(answer)(scope, receive, send)
            return
        held = sum(1 for open_ in self._sessions.values() if open_.principal == principal)
        if held >= MAX_SESSIONS_PER_IDENTITY:
            # One token must not use up the edge's sessions for every other agent.
            message = (f"this token already holds {held} open sessions; close one (DELETE) "
                       "or let one expire")
            await _jsonrpc_error(429, TOKEN_REFUSED, "limit_exceeded", {
                "error": "limit_exceeded", "message": message,
                "limit": MAX_SESSIONS_PER_IDENTITY})(scope, receive, send)
            return
        session = _Session(principal=principal, token=token, baseline=_offer_state(answer))
        scope[_REQUEST_KEY] = _Request(token, principal, session)

        def opened(session_id: str) -> None:
            if session_id not in self._sessions:
                self._sessions[session_id] = session

        await self._forward(scope, receive, send, on_session=opened)

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send,
        on_session: Callable[[str], None] | None = None,
    ) -> int | None:
        """Pass a request to the SDK; return its status (``on_session`` sees a new session id)."""
        status: int | None = None

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                session_id = Headers(raw=message.get("headers", [])).get(SESSION_HEADER)
                if on_session is not None and session_id and status < 400:
                    on_session(session_id)  # bound before the client can learn the id
            await send(message)

        await self._manager.handle_request(scope, receive, watch)
        return status

    async def _refused(
        self, token: str, scope: Scope, receive: Receive, send: Send
    ) -> Refused | None:
        """Ask the engine for ``token``'s offer; if refused, answer the request and return why."""
        answer = await self._offer(token)
        if not isinstance(answer, Refused):
            return None
        await self._refusal(answer)(scope, receive, send)
        return answer

    def _refusal(self, answer: Refused) -> Response:
        """401 for a token the engine refused, 503 if the engine could not answer."""
        if answer.code == "internal_error":
            return _jsonrpc_error(503, TOKEN_REFUSED, "engine unavailable", answer.error)
        return self._unauthorized(answer.code, answer.message, presented=True)

    def _stateless_state(self, principal: Principal) -> _State:
        state = self._stateless.get(principal)
        if state is None:
            state = self._stateless[principal] = _State()
            while len(self._stateless) > MAX_STATELESS:
                self._stateless.popitem(last=False)
        else:
            self._stateless.move_to_end(principal)
        return state

    # --- MCP handlers --------------------------------------------------------

    @staticmethod
    def _request(ctx: Any) -> _Request:
        scope = getattr(ctx.request, "scope", None)
        request = scope.get(_REQUEST_KEY) if isinstance(scope, dict) else None
        if not isinstance(request, _Request):  # every /mcp request passes the gate
            raise MCPError(types.INTERNAL_ERROR, "no credentials on this request")
        return request

    async def _offer(self, token: str) -> OfferAnswer:
        try:
            return await anyio.to_thread.run_sync(self._engine.offer, token, limiter=self._limiter)
        except Exception:
            logger.exception("edge failed to reach the engine")
            return ENGINE_UNAVAILABLE

    async def _note_peer(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        """Keep each session's latest server session: the channel for its notifications."""
        scope = getattr(ctx.request, "scope", None)
        request = scope.get(_REQUEST_KEY) if isinstance(scope, dict) else None
        if isinstance(request, _Request) and isinstance(request.state, _Session):
            request.state.peer = ctx.session
        return await call_next(ctx)

    async def _list_tools(
        self, ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        request = self._request(ctx)
        offer = offered(await self._offer(request.token))
        result = listing_result(offer)
        request.state.listed_hash = offer.catalog_hash
        if isinstance(request.state, _Session):
            request.state.baseline = ("ok", offer.catalog_hash)
        return result

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        request = self._request(ctx)
        call = functools.partial(
            self._engine.invoke,
            request.token,
            params.name,
            params.arguments,
            session=request.state.engine_session,
            offered_catalog_hash=request.state.listed_hash,
        )
        try:
            answer = await anyio.to_thread.run_sync(call, limiter=self._limiter)
        except Exception:
            logger.exception("edge failed to reach the engine")
            answer = ENGINE_UNAVAILABLE
        return call_result(params.name, answer)

    async def _listen(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one ``subscriptions/listen`` stream; it hears only its own token's changes."""
        request = self._request(ctx)
        answer = await self._offer(request.token)
        offered(answer)  # a refused token opens no stream (JSON-RPC -32001)
        if len(self._listens) >= MAX_LISTENS:
            raise MCPError(types.INTERNAL_ERROR, "Subscription limit reached")
        listed = request.state.listed_hash
        baseline = ("ok", listed) if listed else _offer_state(answer)
        bus = InMemorySubscriptionBus()
        listen = _Listen(request.token, baseline, bus, ListenHandler(bus, max_subscriptions=1))
        key = id(listen)
        self._listens[key] = listen
        try:
            return await listen.handler(ctx, params)
        finally:
            self._listens.pop(key, None)

    # --- per-principal tools/list_changed -----------------------------------

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(self._settings.watch_interval)
            try:
                self._forget_idle()
                await self.check_offers()
            except Exception:
                logger.exception("the offer check failed; retrying next interval")

    def _forget_idle(self) -> None:
        limit = self._settings.session_idle_timeout + _IDLE_GRACE
        now = time.monotonic()
        for session_id, session in list(self._sessions.items()):
            if session.inflight == 0 and now - session.idle_since > limit:
                del self._sessions[session_id]

    async def check_offers(self) -> int:
        """Ask the engine for every connected token's offer; notify where it changed.

        Returns:
            How many connections were notified.
        """
        watched: list[_Session | _Listen] = [*self._sessions.values(), *self._listens.values()]
        if not watched:
            return 0
        tokens = list({w.token for w in watched})
        states = await anyio.to_thread.run_sync(self._states, tokens, limiter=self._limiter)
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
                tg.start_soon(self._deliver, w)
        return len(changed)

    @staticmethod
    async def _deliver(watched: _Session | _Listen) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT):
            await watched.notify()

    def _states(self, tokens: list[str]) -> dict[str, OfferState | None]:
        states: dict[str, OfferState | None] = {}
        for token in tokens:
            try:
                states[token] = _offer_state(self._engine.offer(token))
            except Exception:
                logger.exception("edge failed to reach the engine")
                states[token] = None
        return states


def _check_authorization_server(settings: HttpSettings) -> None:
    """Refuse an ``authorization_server`` that is not an issuer URL (ConfigurationError)."""
    if settings.authorization_server is None:
        return
    try:
        _oauth.check_issuer_url(settings.authorization_server, option="--authorization-server")
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def _bind(settings: HttpSettings) -> socket.socket:
    host = HttpEdge._url_host(settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, settings.port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve_http(engine: EngineClient, settings: HttpSettings) -> None:
    """Serve MCP over streamable HTTP until interrupted (SIGINT or SIGTERM).

    Prints ``chit: MCP over streamable HTTP at URL`` to stderr once the socket
    listens.

    Raises:
        ConfigurationError: A non-loopback address without ``allow_non_loopback``,
            a bad ``public_url`` or a bad ``authorization_server``.
        OSError: The address cannot be bound.
    """
    import uvicorn

    if not _oauth.is_loopback(settings.host):
        if not settings.allow_non_loopback:
            raise ConfigurationError(
                f"refusing to serve on non-loopback {settings.host}: bearer tokens would "
                "cross the network in clear; put a TLS-terminating proxy in front and pass "
                "--unsafe-non-loopback (docs/http.md)"
            )
        logger.warning("serving plain HTTP on non-loopback %s: only behind a TLS proxy",
                       settings.host)
    if settings.watch_interval <= 0:
        raise ConfigurationError("the watch interval must be positive")
    _check_authorization_server(settings)  # before binding: a bad URL never listens
    sock = _bind(settings)
    try:
        edge = HttpEdge(engine, settings, port=sock.getsockname()[1])
        config = uvicorn.Config(
            edge.app,
            lifespan="on",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=3,
            ws="none",
        )
        print(f"chit: MCP over streamable HTTP at {edge.resource}", file=sys.stderr, flush=True)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
