"""The MCP edge: the official SDK's low-level server in front of the engine.

The edge holds no authority: it re-presents the agent's token on every request,
asks the engine for the offer on ``tools/list`` and for the result on
``tools/call``, and translates the engine's typed answers into MCP results and
errors (docs/errors.md). No exception text ever reaches the client.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from engine.service import CallAnswer, Called, OfferAnswer, Offered, Refused

__all__ = [
    "ENGINE_UNAVAILABLE",
    "INSTRUCTIONS",
    "EngineClient",
    "build_server",
    "call_result",
    "listing_result",
    "offered",
    "serve_stdio",
]

logger = logging.getLogger("chit.gateway")

INVALID_PARAMS = -32602
TOKEN_REFUSED = -32001

INSTRUCTIONS = """\
chit is a capability gateway: you work on a git repository through the tools your \
token unlocks, and only inside its scope.
- Call `effective_scope` first: it tells you your agent name, your lane \
(agent/<name>), your operations, the path globs you may touch and when your token expires.
- Call `project_context` for the paths you plan to edit before editing, when it is offered.
- `write_file`, `delete_file` and `move_file` stage changes in this session only; nothing \
lands until `commit`, which records one commit on your own lane agent/<name>. main is never \
written.
- If `issue_sub_token` is offered, it gives a helper agent a strictly narrower token \
(its own lane agent/<helper>); asking for more than you hold is refused.
- A refused call returns isError with JSON {"error": CODE, "message": ...}; codes are stable \
(for example path_outside_scope, path_forbidden, invalid_argument, not_found, conflict). \
engine_frozen means the operator made the engine read-only: only read tools work until it \
is lifted; list tools again then. \
Calling a tool you were not offered is an unknown-tool error listing the tools you have.
"""


class EngineClient(Protocol):
    """What the edge needs from an engine (in-process or remote)."""

    def offer(self, token: str) -> OfferAnswer:
        """See :meth:`engine.service.Engine.offer`."""

    def invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        session: str,
        offered_catalog_hash: str | None = None,
    ) -> CallAnswer:
        """See :meth:`engine.service.Engine.invoke`."""


ENGINE_UNAVAILABLE = Refused("internal_error", "engine unavailable")
"""The answer when the engine could not be asked at all."""


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
    """Per-connection state: the token, a session id, the last listed catalog hash."""

    def __init__(
        self, engine: EngineClient, token: str, *, inline: frozenset[str] = frozenset()
    ) -> None:
        self._engine = engine
        self._token = token
        self._inline = inline
        self.session_id = uuid.uuid4().hex
        self.listed_hash: str | None = None
        # One connection gets a few engine workers, not the runtime's 40: queued
        # calls wait here instead of each holding a thread and its git handle.
        self._limiter = anyio.CapacityLimiter(4)

    def __repr__(self) -> str:
        return f"_Edge(session={self.session_id})"

    async def list_tools(
        self, _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        answer = await anyio.to_thread.run_sync(
            self._engine.offer, self._token, limiter=self._limiter
        )
        offer = offered(answer)
        result = listing_result(offer)
        self.listed_hash = offer.catalog_hash
        return result

    async def call_tool(
        self, _ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            if params.name in self._inline:
                answer = self._call(params.name, params.arguments)
            else:
                answer = await anyio.to_thread.run_sync(
                    self._call, params.name, params.arguments, limiter=self._limiter
                )
        except Exception:
            logger.exception("edge failed to reach the engine")
            answer = ENGINE_UNAVAILABLE
        return call_result(params.name, answer)

    def _call(self, name: str, arguments: dict[str, Any] | None) -> CallAnswer:
        return self._engine.invoke(
            self._token,
            name,
            arguments,
            session=self.session_id,
            offered_catalog_hash=self.listed_hash,
        )


def build_server(engine: EngineClient, token: str) -> Server[Any]:
    """Build the MCP server for one connection holding ``token``.

    Args:
        engine: The engine (in-process :class:`engine.service.Engine` or a client).
        token: The agent's token text; re-presented to the engine on every call.

    Returns:
        A low-level ``mcp`` server with ``tools/list`` and ``tools/call``; an
        in-process engine answers the :data:`INLINE_TOOLS` on its event loop.
    """
    # An embedded engine's module is loaded already; a separate engine's never is.
    interface = sys.modules.get("engine.service.interface")
    embedded = interface is not None and isinstance(engine, interface.Engine)
    edge = _Edge(engine, token, inline=INLINE_TOOLS if embedded else frozenset())
    from gateway import __version__

    return Server(
        "chit",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=edge.list_tools,
        on_call_tool=edge.call_tool,
    )


def serve_stdio(engine: EngineClient, token: str) -> None:
    """Serve MCP over stdio until the client closes the connection."""
    server = build_server(engine, token)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
