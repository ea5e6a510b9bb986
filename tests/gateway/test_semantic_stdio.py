"""The semantic tools over real MCP stdio sessions (the official client).

Overlapping intents: two live sessions of one engine (two ``chit mcp --engine
unix:...`` edges in front of one ``chit engine serve``), and two sessions of two
engine processes (two ``chit mcp --repo``, each embedding its own engine):
intents live in the engine's state store, shared by the processes of one chit
home (docs/semantic.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import starlette
from mcp import Client

from engine import admin
from engine.admin.seed import create_repository, files_from_directory
from engine.git.repository import Repository
from engine.limits import LIMITS
from engine.semantic.persist import DB_NAME
from gateway.demo import stdio_server_params
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
                second = payload(await b.call_tool(
                    "project_context", {"paths": ["src/app.py", "src/api/v1.py"]}))
            async with Client(remote_edge_params(url, edge_home, outsider)) as c:
                third = payload(await c.call_tool("project_context", {"paths": ["docs"]}))
        return first, second, third

    with engine_server(world.home, world.repo) as server:
        first, second, third = anyio.run(run, server.url)
    assert first["peers"] == []
    assert second["peers"] == [{"agent": "alice", "paths": ["src/app.py"]}]
    assert "return 2" not in json.dumps(second)
    assert third["peers"] == []  # alice works outside carol's scope: nothing named


def test_intents_cross_engine_processes(world: World) -> None:
    """Two ``chit mcp --repo`` processes (two engines): the second sees the first's intent.

    Bob's engine never served a call of alice's: what it shows comes from the
    shared state store. Only the overlapping paths are named.
    """
    alice = world.mint(agent="alice", ops="read", paths="src/**")
    bob = world.mint(agent="bob", ops="read", paths="src/**")
    carol = world.mint(agent="carol", ops="read", paths="src/api/**")

    async def run() -> tuple[Any, Any, Any, Any]:
        async with Client(stdio_server_params(world.home, world.repo, alice)) as a:
            first = payload(await a.call_tool("project_context", {"paths": ["src/app.py"]}))
            async with Client(stdio_server_params(world.home, world.repo, bob)) as b:
                second = payload(await b.call_tool(
                    "project_context", {"paths": ["src/app.py", "src/api/v1.py"]}))
                # Alice's engine, in turn, sees bob's intent (also from the store).
                third = payload(await a.call_tool("project_context", {"paths": ["src/app.py"]}))
            async with Client(stdio_server_params(world.home, world.repo, carol)) as c:
                fourth = payload(await c.call_tool("project_context", {"paths": ["src/api"]}))
        return first, second, third, fourth

    first, second, third, fourth = anyio.run(run)
    assert first["peers"] == []
    assert second["peers"] == [{"agent": "alice", "paths": ["src/app.py"]}]
    assert third["peers"] == [{"agent": "bob", "paths": ["src/app.py"]}]
    # Carol works on src/api: bob's intent there is shown, his other path and
    # alice's (outside her folder) are not.
    assert fourth["peers"] == [{"agent": "bob", "paths": ["src/api/v1.py"]}]


def test_staged_paths_reach_peers_of_other_engine_processes(world: World) -> None:
    """Alice only writes (no semantic tool); bob, in another ``chit mcp``, sees her path.

    Her engine publishes the session's staged paths (never content) to the shared
    state store on every write; after her commit they are gone.
    """
    alice = world.mint(agent="alice", ops="read,write,commit", paths="src/**")
    bob = world.mint(agent="bob", ops="read", paths="src/**")
    secret = "def main():\n    return 'staged-only-42'\n"

    async def run() -> tuple[Any, Any]:
        async with Client(stdio_server_params(world.home, world.repo, alice)) as a:
            await a.list_tools()
            await a.call_tool("write_file", {"path": "src/app.py", "content": secret})
            async with Client(stdio_server_params(world.home, world.repo, bob)) as b:
                before = payload(await b.call_tool("project_context", {"paths": ["src"]}))
                await a.call_tool("commit", {"message": "main returns a string"})
                after = payload(await b.call_tool("project_context", {"paths": ["src"]}))
        return before, after

    before, after = anyio.run(run)
    assert before["peers"] == [{"agent": "alice", "paths": ["src/app.py"]}]
    assert "staged-only-42" not in json.dumps(before)
    assert after["peers"] == []


def test_a_tree_large_enough_for_the_worker_pool_over_stdio(tmp_path: Path) -> None:
    """``chit mcp`` parses a cold tree in its worker processes; the protocol stays clean.

    The workers share the edge's standard streams (a fork server's children): a
    byte from them on stdout would break the client. Then a second ``chit mcp``
    on the same repository starts warm from the persisted index.
    """
    files = files_from_directory(Path(starlette.__file__).parent, "src/starlette")
    assert len(files) >= LIMITS.pool_min_files
    home, repo = tmp_path / "home", tmp_path / "repo"
    create_repository(repo, files)
    admin.init_home(home)
    token = str(admin.mint_token(home, agent="a", operations=["read"], paths=["src/**"],
                                 ttl_seconds=900)["token"])

    async def run() -> list[Any]:
        found = []
        for _ in range(2):  # two edge processes, one after the other
            async with Client(stdio_server_params(home, repo, token)) as client:
                found.append(payload(await client.call_tool(
                    "search_symbols", {"query": "Router", "limit": 1}))["symbols"])
        return found

    first, second = anyio.run(run)
    assert first == second
    assert first[0]["symbol"] == "Router" and first[0]["path"] == "src/starlette/routing.py"
    assert (Path(Repository(repo).chit_dir) / DB_NAME).stat().st_size > 0
