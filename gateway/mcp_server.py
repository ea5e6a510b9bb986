"""The MCP edge: the official SDK's low-level server in front of the engine.

The edge holds no authority: it re-presents the agent's token on every request,
asks the engine for the offer on ``tools/list`` and for the result on
``tools/call``, and translates the engine's typed answers into MCP results and
errors (docs/errors.md). No exception text ever reaches the client. Over stdio
it follows the engine's change feed and sends ``tools/list_changed`` when the
token's offer changed (docs/deployment.md, "The change feed"). A call that
waits for an approval is answered in the client's protocol era
(:mod:`gateway.approvals`, docs/approvals.md §8).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import sys
import uuid
from collections.abc import Sequence
from typing import Any, Protocol, cast

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engine.service import CallAnswer, Called, OfferAnswer, Offered, Refused, Reporter, reporting
from gateway import approvals, instructions, progress, telemetry
from gateway._stopping import StdinLines, claimed_stdin, stop_signals
from gateway.feed import FeedFollower, OfferState, offer_state

__all__ = [
    "ENGINE_UNAVAILABLE",
    "INSTRUCTIONS",
    "EngineClient",
    "build_server",
    "call_result",
    "invoke_args",
    "listing_result",
    "offered",
    "serve_stdio",
]

logger = logging.getLogger("chit.gateway")

INVALID_PARAMS = -32602
TOKEN_REFUSED = -32001
NOTIFY_TIMEOUT = 5.0  # seconds one list_changed may take to write to the client
STDIO_LISTENS = 16  # subscriptions/listen streams one stdio connection keeps open at once

INSTRUCTIONS = """\
chit is a capability gateway: you work on a git repository through the tools your \
token unlocks, and only inside its scope.
- Call `effective_scope` first: it tells you your agent name, your lane \
(agent/<name>), your operations, the path globs you may touch and when your token expires.
- Find your way with `list_files` (files and folders you may read, paged) and \
`search_text` (lines matching text or an RE2 pattern); `read_file` takes start_line and \
end_line for large files. Call `project_context` for the paths you plan to edit before \
editing, when it is offered.
- `write_file`, `delete_file` and `move_file` stage changes in this session only; nothing \
lands until `commit`, which records one commit on your own lane agent/<name>, and `discard` \
drops them. main is never written. The staged change is kept across reconnects: `status` \
names your session, which a new connection with the same token can resume.
- If `issue_sub_token` is offered, it gives a helper agent a strictly narrower token \
(its own lane agent/<helper>); asking for more than you hold is refused.
- A refused call returns isError with JSON {"error": CODE, "message": ...}; codes are stable \
(for example path_outside_scope, path_forbidden, invalid_argument, not_found, conflict). \
engine_frozen means the operator made the engine read-only: only read tools work until it \
is lifted; list tools again then. approval_required means the call waits for an operator's \
approval (nothing was changed): tell the user what `waits` says, and call the tool again \
with the same arguments once it is approved. \
Calling a tool you were not offered is an unknown-tool error listing the tools you have.
"""


class EngineClient(Protocol):
    """What the edge needs from an engine (in-process or remote)."""

    def offer(self, token: str, *, repo: str | None = None) -> OfferAnswer:
        """See :meth:`engine.service.Engine.offer`."""

    def invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        session: str,
        offered_catalog_hash: str | None = None,
        repo: str | None = None,
        approval: str | None = None,
    ) -> CallAnswer:
        """See :meth:`engine.service.Engine.invoke`."""

    def wait_change(self, after: int, timeout: float) -> int:
        """See :meth:`engine.service.Engine.wait_change`."""

    def warning(self, token: str, *, repo: str | None = None) -> str | None:
        """See :meth:`engine.service.Engine.warning`."""


ENGINE_UNAVAILABLE = Refused("internal_error", "engine unavailable")
"""The answer when the engine could not be asked at all."""
EXPIRY_CHECK_SECONDS = 30.0  # how often a connection's followed approvals are checked on the clock


def invoke_args(approval: str | None) -> dict[str, Any]:
    """The keyword ``approval=`` for ``invoke``, only when a client echoed one."""
    return {} if approval is None else {"approval": approval}


def offered(answer: OfferAnswer) -> Offered:
    """The offer, or the ``tools/list`` error for a refused token (every transport).

    Args:
        answer: What :meth:`engine.service.Engine.offer` returned.

    Returns:
        ``answer``, an :class:`~engine.service.Offered`.

    Raises:
        MCPError: JSON-RPC -32001 with the refusal as ``data`` if the token was refused.
    """
    if isinstance(answer, Refused):
        raise MCPError(TOKEN_REFUSED, f"token refused: {answer.code}", answer.error)
    return answer


def listing_result(answer: OfferAnswer) -> types.ListToolsResult:
    """Translate the engine's offer into the ``tools/list`` result (every transport).

    Args:
        answer: What :meth:`engine.service.Engine.offer` returned.

    Returns:
        The tools offered, with their schemas and annotations.

    Raises:
        MCPError: JSON-RPC -32001 with the refusal as ``data`` if the token was refused.
    """
    tools = [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=t.input_schema,
            output_schema=t.output_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=t.read_only, destructive_hint=t.destructive
            ),
        )
        for t in offered(answer).tools
    ]
    return types.ListToolsResult(tools=tools)


def call_result(name: str, answer: CallAnswer) -> types.CallToolResult:
    """Translate the engine's answer to a call into the ``tools/call`` result (every transport).

    Args:
        name: The tool name the client sent (echoed, truncated, in the unknown-tool error).
        answer: What :meth:`engine.service.Engine.invoke` returned.

    Returns:
        The result, or a refusal as ``isError: true`` with JSON ``{"error": CODE, ...}``.

    Raises:
        MCPError: JSON-RPC -32602 with ``{"error": "tool_not_offered", "offered": [...]}``.
    """
    if isinstance(answer, Called):
        result = answer.result
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, sort_keys=True))],
            structured_content=result,
            is_error=False,
        )
    error = answer.error
    if answer.code == "tool_not_offered":
        raise MCPError(INVALID_PARAMS, f"Unknown tool: {name[:100]}", error)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(error, sort_keys=True))],
        is_error=True,
    )


INLINE_TOOLS: frozenset[str] = frozenset(
    {"read_file", "write_file", "status", "effective_scope", "list_conflicts"}
)
"""Tools an embedded engine answers on the connection's event loop, not a worker thread.

Each does bounded work (one blob, one staged change, the session's state), so
running it in place costs the connection less than the hand-off to a thread
(docs/benchmarks.md, *Edges*); every other call, and every call to a separate
engine, runs on a worker thread, so a slow one never stalls the connection.
"""


class _Edge:
    """Per-connection state: the token, the repository, a session id, the last listed catalog hash.

    It also follows the engine's change feed (:meth:`watch`) and tells the
    client when the token's offer is no longer the one it was shown: on the
    session (2025-11-25) or on its ``subscriptions/listen`` streams (2026-07-28);
    and when an approval it sent as a URL elicitation is decided
    (``notifications/elicitation/complete``, :mod:`gateway.approvals`).
    """

    def __init__(
        self,
        engine: EngineClient,
        token: str,
        *,
        inline: frozenset[str] = frozenset(),
        session: str | None = None,
        repo: str | None = None,
        approval_url: str | None = None,
    ) -> None:
        self._engine = engine
        self._token = token
        self._repo = repo
        self._inline = inline
        self._approval_url = approval_url  # the [approvals] url template, with {id}
        self.waits = approvals.Waits()  # approvals sent as URL elicitations, until decided
        self._hold = approvals.Hold(engine)  # 2026-07-28 retries of a pending approval
        self._principal: str | None = None
        # A resumed session's id, else a new random one (the engine decides
        # whether this token may use it: session_token_mismatch otherwise).
        self.session_id = session or uuid.uuid4().hex
        self.listed_hash: str | None = None
        self.shown: OfferState | None = None  # the offer (or refusal) last shown to the client
        self._peer: ServerSession | None = None  # the 2025-11-25 session, once it listed
        self._bus = InMemorySubscriptionBus()
        self._listens = ListenHandler(self._bus, max_subscriptions=STDIO_LISTENS)
        # One connection gets a few engine workers, not the runtime's 40: queued
        # calls wait here instead of each holding a thread and its git handle.
        self._limiter = anyio.CapacityLimiter(4)

    def __repr__(self) -> str:
        return f"_Edge(session={self.session_id})"

    async def _offer(self) -> OfferAnswer:
        offer = functools.partial(self._engine.offer, self._token, repo=self._repo)
        return await anyio.to_thread.run_sync(offer, limiter=self._limiter)

    async def list_tools(
        self, ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # Handlers run once the handshake is done: from now on the session
            # may hear notifications/tools/list_changed.
            self._peer = ctx.session
        answer = await self._offer()
        self.shown = offer_state(answer) or self.shown
        offer = offered(answer)
        result = listing_result(offer)
        self.listed_hash = offer.catalog_hash
        return result

    async def listen(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one 2026-07-28 ``subscriptions/listen`` stream of this connection."""
        answer = await self._offer()
        offered(answer)  # a refused token opens no stream (JSON-RPC -32001)
        if self.shown is None:
            self.shown = offer_state(answer)
        return await self._listens(ctx, params)

    def principal(self, _ctx: Any) -> str:
        """The identity a sealed ``requestState`` is bound to: this token in this repository.

        The token's SHA-256, not its parsed id: an edge of a separate engine
        parses no token (docs/engine-api.md, "The edge: what it holds").
        """
        if self._principal is None:
            digest = hashlib.sha256(self._token.encode("utf-8", "surrogatepass")).hexdigest()
            self._principal = approvals.principal_of(f"sha256:{digest}", self._repo)
        return self._principal

    def approval_page(self, approval_id: str) -> str | None:
        """Where a person sees an approval: the ``[approvals] url`` template, filled in."""
        if self._approval_url is None:
            return None
        return self._approval_url.replace("{id}", approval_id)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        approval = approvals.approval_from_state(params)

        async def ask(hear: Reporter | None = None) -> CallAnswer:
            try:
                if params.name in self._inline:
                    return self._call(params.name, params.arguments, approval)
                return await anyio.to_thread.run_sync(
                    self._call, params.name, params.arguments, approval, hear,
                    limiter=self._limiter,
                )
            except Exception:
                logger.exception("edge failed to reach the engine")
                return ENGINE_UNAVAILABLE

        async with progress.following(ctx) as hear:
            asking = functools.partial(ask, hear)
            answer = await self._hold.again(await asking(), approval, asking)
        telemetry.note_call(self._token, self.listed_hash, answer)

        def elicited(hints: dict[str, Any]) -> None:
            self._peer = ctx.session  # the channel for notifications/elicitation/complete
            self.waits.add(hints)

        waiting = approvals.era_answer(ctx, answer, url=self.approval_page, elicited=elicited)
        return waiting if waiting is not None else call_result(params.name, answer)

    def _call(
        self, name: str, arguments: dict[str, Any] | None, approval: str | None = None,
        hear: Reporter | None = None,
    ) -> CallAnswer:
        if hear is not None:  # an embedded engine's work reports to it; a remote one's cannot
            with reporting(hear):
                return self._call(name, arguments, approval)
        return self._engine.invoke(
            self._token,
            name,
            arguments,
            session=self.session_id,
            offered_catalog_hash=self.listed_hash,
            repo=self._repo,
            **invoke_args(approval),
        )

    async def watch(self) -> None:
        """Follow the engine's change feed until cancelled (the client disconnected).

        On each move it checks the token's offer and the approvals this
        connection waits for; every :data:`EXPIRY_CHECK_SECONDS` it also lets
        the clock settle approvals past their time.
        """
        async with anyio.create_task_group() as tg:
            tg.start_soon(FeedFollower(self._engine).run, self.on_change)
            while True:
                await anyio.sleep(EXPIRY_CHECK_SECONDS)
                await self.check_waits(ask=False)

    async def on_change(self) -> None:
        """The feed moved: check the offer, then the approvals waited for."""
        await self.check_offer()
        await self.check_waits()

    async def check_waits(self, *, ask: bool = True) -> list[str]:
        """Send ``notifications/elicitation/complete`` for each approval decided or expired.

        Args:
            ask: Ask the engine (``status`` in this session); ``False``: the clock only.

        Returns:
            The approval ids settled.
        """
        if not self.waits:
            return []

        async def status() -> CallAnswer:
            return await anyio.to_thread.run_sync(self._call, "status", {},
                                                  limiter=self._limiter)

        async def notify(approval_id: str) -> None:
            if self._peer is not None:
                await self._peer.send_elicit_complete(approval_id)

        return await self.waits.check(status, notify, ask=ask)

    async def check_offer(self) -> bool:
        """Ask for the token's offer again; tell the client if it is not the one shown.

        Returns:
            Whether the client was told. Nothing is sent before the client was
            shown an offer, nor when the engine cannot answer.
        """
        if self.shown is None:
            return False
        try:
            state = offer_state(await self._offer())
        except Exception:
            logger.exception("edge failed to reach the engine")
            return False
        if state is None or state == self.shown:
            return False
        self.shown = state
        await self._bus.publish(ToolsListChanged())
        if self._peer is not None:
            # A client that stopped reading must not hold the feed up.
            with anyio.move_on_after(NOTIFY_TIMEOUT):
                try:
                    await self._peer.send_tool_list_changed()
                except Exception:  # the client may have gone between the check and now
                    logger.debug("tools/list_changed not delivered to a closed session")
        return True


def build_server(
    engine: EngineClient,
    token: str,
    *,
    repo: str | None = None,
    session: str | None = None,
    state_keys: Sequence[bytes] | None = None,
    approval_url: str | None = None,
) -> Server[Any]:
    """Build the MCP server for one connection holding ``token``.

    Args:
        engine: The engine (in-process :class:`engine.service.Engine` or a client).
        token: The agent's token text; re-presented to the engine on every call.
        repo: The repository the connection works on (``None``: the engine's
            only one).
        session: The engine session to resume (already checked with
            :func:`engine.service.validate_session_id`); ``None``: a new one.
        state_keys: The keys that seal ``requestState`` (newest first, from
            ``engine.admin.request_state_keys``); ``None``: a key of this
            process only.
        approval_url: The ``[approvals] url`` template (``{id}``) a
            2025-11-25 client that declared URL elicitation is sent to;
            ``None``: such a client gets the plain refusal.

    Returns:
        A low-level ``mcp`` server with ``tools/list``, ``tools/call`` and
        ``subscriptions/listen``; an in-process engine answers the
        :data:`INLINE_TOOLS` on its event loop. (:func:`serve_stdio` also
        follows the change feed for it.)
    """
    return _build(engine, token, repo, session, state_keys, approval_url)[0]


def _build(
    engine: EngineClient,
    token: str,
    repo: str | None = None,
    session: str | None = None,
    state_keys: Sequence[bytes] | None = None,
    approval_url: str | None = None,
) -> tuple[Server[Any], _Edge]:
    # An embedded engine's module is loaded already; a separate engine's never is.
    interface = sys.modules.get("engine.service.interface")
    embedded = interface is not None and isinstance(engine, interface.Engine)
    edge = _Edge(engine, token, inline=INLINE_TOOLS if embedded else frozenset(), repo=repo,
                 session=session, approval_url=approval_url)
    from gateway import __version__

    server: Server[Any] = Server(
        "chit",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=edge.list_tools,
        on_call_tool=edge.call_tool,
        on_subscriptions_listen=edge.listen,
    )
    approvals.install_boundary(server, approvals.state_security(state_keys, edge.principal))
    instructions.install(server, lambda _ctx: (token, repo),
                         lambda tok, name: engine.warning(tok, repo=name))
    telemetry.install(server, "pipe")
    return server, edge


def serve_stdio(
    engine: EngineClient,
    token: str,
    *,
    repo: str | None = None,
    session: str | None = None,
    state_keys: Sequence[bytes] | None = None,
    approval_url: str | None = None,
) -> None:
    """Serve MCP over stdio until the client closes the connection, or a stop signal.

    ``SIGTERM`` or ``SIGINT`` (Ctrl-C) ends the input as the client's EOF
    would: the connection ends the usual way and this returns, so the caller
    closes the engine (docs/deployment.md, "Stopping").

    ``repo`` names the repository the connection works on (``chit mcp
    --engine URL --repo-name NAME``); ``None``: the engine's only one.

    Beside the connection, a task follows the engine's change feed and sends
    ``notifications/tools/list_changed`` when the token's offer changes
    (``initialize`` advertises ``tools.listChanged``). It ends with the
    connection; a wait still in progress is left to a daemon thread.

    Args:
        engine: The engine (in-process or a client of a separate one).
        token: The agent's token text.
        repo: The repository (``None``: the engine's only one).
        session: The engine session to resume (``chit mcp --session``), or
            ``None`` for a new one.
        state_keys: The keys that seal ``requestState`` (see :func:`build_server`).
        approval_url: The ``[approvals] url`` template (see :func:`build_server`).
    """
    server, edge = _build(engine, token, repo, session, state_keys, approval_url)
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))

    async def main() -> None:
        with claimed_stdin() as stdin:
            lines = StdinLines(stdin)
            loop = asyncio.get_running_loop()

            def stop(_sig: int, _frame: object) -> None:
                loop.call_soon_threadsafe(lines.stop)

            with stop_signals(stop):
                async with (stdio_server(stdin=cast(Any, lines)) as (read, write),
                            anyio.create_task_group() as tg):
                    tg.start_soon(edge.watch)
                    await server.run(read, write, options)
                    tg.cancel_scope.cancel()

    anyio.run(main)
