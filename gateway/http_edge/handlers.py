"""The MCP handlers of ``chit mcp --http``: tools/list, tools/call, subscriptions/listen.

Each request carries the credentials the gate left in its ASGI scope; the
listing is computed per request from the presented token and marked
``ttlMs: 0, cacheScope: private``, so no client cache shares or keeps it
(docs/http.md).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError

from engine.service import CallAnswer, Reporter
from gateway import approvals, instructions, progress, telemetry
from gateway.http_edge.approval_page import ApprovalBook
from gateway.http_edge.connections import (
    BoundSession,
    Connections,
    Credentials,
    Listen,
    Principal,
    credentials_of,
    offer_state,
)
from gateway.http_edge.engine_calls import EngineCalls
from gateway.mcp_server import INSTRUCTIONS, call_result, listing_result, offered

__all__ = ["MAX_LISTENS", "Handlers"]

MAX_LISTENS = 1024  # concurrent subscriptions/listen streams, all tokens together


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


class Handlers:
    """The MCP handlers over one engine and the edge's connections.

    Args:
        engine: The engine's calls.
        connections: The edge's connections (listen streams join them here).
        on_listed: Awaited after a 2026-07-28 ``tools/list``, before it is
            answered, with the identity, the repository and the catalog hash it
            was shown (a worker tells the other workers).
        state_keys: The keys that seal ``requestState`` (newest first), shared
            by every edge process of a home; ``None``: this process's own.
        page_url: The URL of an approval's page (``GET /approvals/<id>``), or
            ``None`` for no URL elicitation.
        book: Where the approvals relayed are remembered for their pages.
        hold: Holds 2026-07-28 retries of a pending approval (``None``: never).
    """

    def __init__(
        self,
        engine: EngineCalls,
        connections: Connections,
        on_listed: Callable[[Principal, str | None, str], Awaitable[None]] | None = None,
        *,
        state_keys: Sequence[bytes] | None = None,
        page_url: Callable[[str], str | None] | None = None,
        book: ApprovalBook | None = None,
        hold: approvals.Hold | None = None,
    ) -> None:
        self._engine = engine
        self._connections = connections
        self._on_listed = on_listed
        self._state_keys = state_keys
        self._page_url = page_url or (lambda _id: None)
        self.book = book if book is not None else ApprovalBook()
        self._hold = hold

    def __repr__(self) -> str:
        return "Handlers()"

    def build_server(self) -> Server[Any]:
        """The low-level MCP server with these handlers."""
        from gateway import __version__

        server = _HttpServer(
            "chit",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_subscriptions_listen=self.listen,
            # chit's input schemas declare no x-mcp-header parameters, so there is
            # nothing to check Mcp-Param-* headers against; without this the SDK
            # would run tools/list (an engine offer) before every 2026 tools/call.
            get_tool_input_schema=lambda _name: None,
            # The listing depends on the token and can change any moment.
            cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
        )
        server.middleware.append(self.note_peer)
        instructions.install(server, self._asking, self._engine.warning)
        telemetry.install(server, "tcp")
        approvals.install_boundary(
            server, approvals.state_security(self._state_keys, self.principal))
        return server

    def principal(self, ctx: Any) -> str:
        """The identity a sealed ``requestState`` is bound to: the token's, in the repository.

        Raises:
            MCPError: If the request has no credentials (the state is refused).
        """
        request = self._request(ctx)
        return approvals.principal_of(request.principal.token_id, request.repo)

    @staticmethod
    def _asking(ctx: Any) -> tuple[str, str | None] | None:
        """The token and repository of a request, for the instructions' vital-sign line."""
        found = credentials_of(ctx)
        return None if found is None else (found.token, found.repo)

    @staticmethod
    def _request(ctx: Any) -> Credentials:
        found = credentials_of(ctx)
        if found is None:  # every /mcp request passes the gate
            raise MCPError(types.INTERNAL_ERROR, "no credentials on this request")
        return found

    async def note_peer(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        """Keep each session's latest server session: the channel for its notifications."""
        request = credentials_of(ctx)
        if request is not None and isinstance(request.state, BoundSession):
            request.state.peer = ctx.session
        return await call_next(ctx)

    async def list_tools(
        self, ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """``tools/list``: the offer to this request's token."""
        request = self._request(ctx)
        offer = offered(await self._engine.offer(request.token, request.repo))
        result = listing_result(offer)
        request.state.listed_hash = offer.catalog_hash
        if isinstance(request.state, BoundSession):
            request.state.baseline = ("ok", offer.catalog_hash)
        elif self._on_listed is not None:
            await self._on_listed(request.principal, request.repo, offer.catalog_hash)
        return result

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """``tools/call``: one engine call in the request's engine session.

        A call that waits for an approval is answered in the client's era
        (:func:`gateway.approvals.era_answer`); a 2025-11-25 session sent a
        URL elicitation follows the approval for ``elicitation/complete``.
        """
        request = self._request(ctx)
        echoed = approvals.approval_from_state(params)

        async def ask(hear: Reporter | None = None) -> CallAnswer:
            return await self._engine.invoke(
                request.token,
                params.name,
                params.arguments,
                session=request.engine_session,
                offered_catalog_hash=request.state.listed_hash,
                repo=request.repo,
                approval=echoed,
                hear=hear,
            )

        async with progress.following(ctx) as hear:
            asking = functools.partial(ask, hear)
            answer = await asking()
            if self._hold is not None:
                answer = await self._hold.again(answer, echoed, asking)
        telemetry.note_call(request.token, request.state.listed_hash, answer)
        hints = approvals.approval_of(answer)
        if hints is not None:
            self.book.note(hints)

        def elicited(approval: dict[str, Any]) -> None:
            if isinstance(request.state, BoundSession):
                request.state.peer = ctx.session
                request.state.waits.add(approval)

        waiting = approvals.era_answer(ctx, answer, url=self._page_url, elicited=elicited)
        return waiting if waiting is not None else call_result(params.name, answer)

    async def listen(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one ``subscriptions/listen`` stream; it hears only its own token's changes."""
        request = self._request(ctx)
        answer = await self._engine.offer(request.token, request.repo)
        offered(answer)  # a refused token opens no stream (JSON-RPC -32001)
        listens = self._connections.listens
        if len(listens) >= MAX_LISTENS:
            raise MCPError(types.INTERNAL_ERROR, "Subscription limit reached")
        listed = request.state.listed_hash
        baseline = ("ok", listed) if listed else offer_state(answer)
        bus = InMemorySubscriptionBus()
        listen = Listen(request.token, baseline, bus, ListenHandler(bus, max_subscriptions=1),
                        repo=request.repo)
        key = id(listen)
        listens[key] = listen
        try:
            return await listen.handler(ctx, params)
        finally:
            listens.pop(key, None)
