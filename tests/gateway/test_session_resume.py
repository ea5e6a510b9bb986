"""Resuming a staged change over real transports (docs/engine-api.md, "Sessions that survive").

A real ``chit engine serve`` killed with SIGKILL and started again, real ``chit
mcp --engine URL --session ID`` and ``chit mcp --repo PATH --session ID`` stdio
edges, a real ``chit mcp --http`` edge restarted between two clients, each
driven by the official MCP client; real git and real keys.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pygit2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import World
from tests.gateway.http_client import http_client, running_edge
from tests.gateway.mcp_client import engine_server, payload, remote_edge_params

REF = "refs/chit/sessions/"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="chit-r-") as folder:  # sun_path holds 107 bytes
        yield Path(folder)


def _saved(world: World) -> set[str]:
    return {k[len(REF):] for k in world.refs() if k.startswith(REF)}


def _resuming(params: StdioServerParameters, session: str, *, env: bool = False
              ) -> StdioServerParameters:
    """``params`` with ``--session ID`` added (or ``CHIT_SESSION`` set)."""
    if env:
        return StdioServerParameters(command=params.command, args=list(params.args),
                                     env=dict(params.env or {}, CHIT_SESSION=session))
    args = list(params.args)
    at = args.index("mcp") + 1
    return StdioServerParameters(command=params.command,
                                 args=[*args[:at], "--session", session, *args[at:]],
                                 env=params.env)


def _embedded(world: World, token: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", "--home", str(world.home), "mcp", "--repo", str(world.repo)],
        env=dict(os.environ, CHIT_TOKEN=token),
    )


async def _call(client: Client, tool: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, args or {})
    return result.is_error, payload(result)


def test_a_staged_change_survives_sigkill_of_the_engine(world: World, short_dir: Path) -> None:
    """Threat model: a crash loses an agent's staged work, or hands it to another token."""
    sock = short_dir / "e.sock"
    edge_home = short_dir / "edge"
    edge_home.mkdir()
    lead = world.mint(agent="lead", ops="read,write,commit,sub-token:issue", paths="src/**",
                      delegable=True)
    out: dict[str, Any] = {}

    async def go() -> None:
        with engine_server(world.home, world.repo, socket_path=sock) as server:
            async with Client(remote_edge_params(server.url, edge_home, lead)) as client:
                await client.list_tools()
                await client.call_tool("write_file", {"path": "src/new.py", "content": "NEW\n"})
                await client.call_tool("delete_file", {"path": "src/api/v1.py"})
                out["handle"] = (await _call(client, "status"))[1]["session"]
                out["scope_handle"] = (await _call(client, "effective_scope"))[1]["session"]
                out["helper"] = (await _call(client, "issue_sub_token", {
                    "agent": "lead.helper", "ops": ["read", "write", "commit"],
                    "paths": ["src/**"], "ttl_seconds": 600}))[1]["token"]
            out["saved_before_kill"] = _saved(world)
            server.process.kill()  # SIGKILL: no clean shutdown
            server.process.wait(10)
        handle = out["handle"]
        with engine_server(world.home, world.repo, socket_path=sock) as server:
            strangers = {"bob": world.mint(agent="bob", paths="**"),
                         "lead again": world.mint(agent="lead", paths="src/**"),
                         "sub-token": out["helper"]}
            for who, token in strangers.items():
                params = _resuming(remote_edge_params(server.url, edge_home, token), handle)
                async with Client(params) as other:
                    await other.list_tools()
                    out[f"status {who}"] = await _call(other, "status")
                    out[f"write {who}"] = await _call(other, "write_file",
                                                      {"path": "src/new.py", "content": "x"})
            params = _resuming(remote_edge_params(server.url, edge_home, lead), handle, env=True)
            async with Client(params) as client:
                await client.list_tools()
                out["resumed"] = await _call(client, "status")
                out["read"] = await _call(client, "read_file", {"path": "src/new.py"})
                out["commit"] = await _call(client, "commit", {"message": "after SIGKILL"})
            out["saved_after_commit"] = _saved(world)

    anyio.run(go)
    handle = out["handle"]
    assert out["scope_handle"] == handle
    assert out["saved_before_kill"] == {handle}
    for who in ("bob", "lead again", "sub-token"):
        for what in ("status", "write"):
            is_error, body = out[f"{what} {who}"]
            assert is_error and body["error"] == "session_token_mismatch", (who, what, body)
            assert "NEW" not in str(body)
    is_error, status = out["resumed"]
    assert not is_error and status["session"] == handle
    assert status["staged"] == [{"path": "src/api/v1.py", "change": "deleted"},
                                {"path": "src/new.py", "change": "added"}]
    assert out["read"] == (False, out["read"][1]) and out["read"][1]["content"] == "NEW\n"
    is_error, landed = out["commit"]
    assert not is_error, landed
    repo = pygit2.Repository(str(world.repo))
    head = repo.references["refs/heads/agent/lead"].target
    assert str(head) == landed["commit"] and landed["trailers"]["Chit-Session"] == handle
    assert repo[head].peel(pygit2.Tree)["src/new.py"].data == b"NEW\n"
    assert out["saved_after_commit"] == set()


def test_an_embedded_stdio_edge_resumes_after_a_reconnect(world: World) -> None:
    token = world.mint()
    out: dict[str, Any] = {}

    async def go() -> None:
        async with Client(_embedded(world, token)) as client:
            await client.list_tools()
            await client.call_tool("write_file", {"path": "src/app.py", "content": "v2\n"})
            out["handle"] = (await _call(client, "effective_scope"))[1]["session"]
        async with Client(_embedded(world, token)) as fresh:  # no --session: a new session
            await fresh.list_tools()
            out["fresh"] = await _call(fresh, "status")
        async with Client(_resuming(_embedded(world, token), out["handle"])) as client:
            await client.list_tools()
            out["resumed"] = await _call(client, "status")
            out["discarded"] = await _call(client, "discard")
        out["saved"] = _saved(world)

    anyio.run(go)
    assert out["fresh"][1]["staged"] == [] and out["fresh"][1]["session"] != out["handle"]
    assert out["resumed"][1]["staged"] == [{"path": "src/app.py", "change": "modified"}]
    assert out["discarded"] == (False, {"session": out["handle"], "files": 1, "conflicts": 0})
    assert out["saved"] == set()


@pytest.mark.parametrize("bad", ["..", "../refs/heads/main", "a" * 129, "x.lock", "a:b"])
def test_a_hostile_session_flag_is_refused_before_anything_starts(
    world: World, bad: str
) -> None:
    """Threat: a session id that reaches a reference name outside refs/chit/sessions/."""
    before = world.refs()
    done = subprocess.run(
        [*world.cli(), "mcp", "--repo", str(world.repo), "--session", bad],
        env=dict(os.environ, CHIT_TOKEN=world.mint()), capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL, check=False,
    )
    assert done.returncode == 2 and "--session" in done.stderr
    assert world.refs() == before


def test_resume_over_http_with_the_chit_session_header(world: World) -> None:
    token = world.mint()
    other = world.mint()  # the same agent, another token
    out: dict[str, Any] = {}

    async def go() -> None:
        with running_edge(world) as edge:
            async with http_client(edge.url, token) as (client, _http):
                await client.list_tools()
                await client.call_tool("write_file", {"path": "src/app.py", "content": "h\n"})
                out["handle"] = (await _call(client, "status"))[1]["session"]
        handle = out["handle"]
        with running_edge(world) as edge:  # a new edge process and engine
            resume = {"Chit-Session": handle}
            for era in ("legacy", "2026-07-28"):
                async with http_client(edge.url, token, mode=era, headers=resume) as (c, _h):
                    await c.list_tools()
                    out[f"resumed {era}"] = await _call(c, "status")
                async with http_client(edge.url, other, mode=era, headers=resume) as (c, _h):
                    await c.list_tools()
                    out[f"other {era}"] = await _call(c, "status")
            async with httpx2.AsyncClient() as http:
                for bad in ("..", "a" * 129, "x.lock"):
                    answer = await http.post(edge.url, json={
                        "jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "raw", "version": "0"}}},
                        headers={"Authorization": f"Bearer {token}", "Chit-Session": bad,
                                 "Accept": "application/json, text/event-stream"})
                    out[f"bad {bad[:4]}"] = (answer.status_code, answer.json())
            async with http_client(edge.url, token, headers=resume) as (client, _http):
                await client.list_tools()
                out["commit"] = await _call(client, "commit", {"message": "over HTTP"})
        out["saved"] = _saved(world)

    anyio.run(go)
    handle = out["handle"]
    for era in ("legacy", "2026-07-28"):
        is_error, status = out[f"resumed {era}"]
        assert not is_error and status["session"] == handle, era
        assert status["staged"] == [{"path": "src/app.py", "change": "modified"}], era
        is_error, refused = out[f"other {era}"]
        assert is_error and refused["error"] == "session_token_mismatch", era
    for key in ("bad ..", "bad aaaa", "bad x.lo"):
        status_code, body = out[key]
        assert status_code == 400 and body["error"]["data"]["error"] == "invalid_argument"
    assert not out["commit"][0]
    assert out["saved"] == set()
