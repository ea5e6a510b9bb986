"""The semantic tools over real MCP stdio sessions (the official client).

Overlapping intents need two live sessions of one engine: two ``chit mcp
--engine unix:...`` edges in front of one ``chit engine serve`` (intents are kept
in the engine's memory, docs/semantic.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.conftest import World
from tests.gateway.mcp_client import Edge, engine_server, payload, remote_edge_params


def test_symbol_tools_over_stdio(world: World, edge: Edge) -> None:
    token = world.mint(ops="read", paths="src/**")

    async def body(client: Client) -> Any:
        found = payload(await client.call_tool("search_symbols", {"query": "main"}))
        context = payload(await client.call_tool("symbol_context", {"symbol": "main"}))
        return found, context

    found, context = edge.run(token, body)
    assert found["symbols"][0] == {"symbol": "main", "kind": "function",
                                   "path": "src/app.py", "line": 1}
    assert context["signature"] == "def main()" and "return 1" in context["code"]


def test_overlapping_intents_between_two_live_sessions(world: World, tmp_path: Path) -> None:
    """Two agents' live MCP sessions: the second sees the first's intent, agent and path only."""
    alice = world.mint(agent="alice", ops="read,write", paths="src/**")
    bob = world.mint(agent="bob", ops="read", paths="src/**")
    outsider = world.mint(agent="carol", ops="read", paths="docs/**")
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()

    async def run(url: str) -> tuple[Any, Any, Any]:
        async with Client(remote_edge_params(url, edge_home, alice)) as a:
            first = payload(await a.call_tool("project_context", {"paths": ["src/app.py"]}))
            await a.call_tool("write_file", {"path": "src/app.py",
                                             "content": "def main():\n    return 2\n"})
            async with Client(remote_edge_params(url, edge_home, bob)) as b:
                second = payload(await b.call_tool("project_context", {"paths": ["src"]}))
            async with Client(remote_edge_params(url, edge_home, outsider)) as c:
                third = payload(await c.call_tool("project_context", {"paths": ["docs"]}))
        return first, second, third

    with engine_server(world.home, world.repo) as server:
        first, second, third = anyio.run(run, server.url)
    assert first["peers"] == []
    assert second["peers"] == [{"agent": "alice", "paths": ["src/app.py"]}]
    assert "return 2" not in json.dumps(second)
    assert third["peers"] == []  # alice works outside carol's scope: nothing named
