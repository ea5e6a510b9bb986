"""Freeze on a live MCP session, and ``chit mcp --read-only``, over real stdio."""

from __future__ import annotations

from typing import Any

import anyio
from mcp import Client

from engine.catalog.declarations import TOOLS
from engine.tools.table import handler_for
from gateway.demo import stdio_server_params
from tests.conftest import World
from tests.gateway.mcp_client import payload

READ_ONLY = {t.name for t in TOOLS if t.read_only and handler_for(t.name) is not None}


def test_freeze_on_a_live_mcp_session(world: World) -> None:
    """Threat: a connected agent keeps writing after the operator froze the engines.

    ``chit freeze on`` runs in another process while the client stays connected:
    writes listed before then fail with engine_frozen, reads still work, and
    tools/list shows only read-only tools. ``chit freeze off`` lifts it.
    """
    token = world.mint(ops="read,write,commit,sub-token:issue", paths="src/**", delegable=True)
    cli = world.cli()

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(stdio_server_params(world.home, world.repo, token)) as client:
            out["before"] = {t.name for t in (await client.list_tools()).tools}
            staged = await client.call_tool("write_file", {"path": "src/a.py", "content": "A\n"})
            out["staged"] = staged.is_error
            frozen = await anyio.run_process([*cli, "freeze", "on", "--reason", "incident"])
            out["freeze_rc"] = frozen.returncode
            calls = {
                "write_file": {"path": "src/b.py", "content": "B\n"},
                "commit": {"message": "during the freeze"},
                "issue_sub_token": {"agent": "alice.h", "ops": ["read"], "paths": ["src/**"],
                                    "ttl_seconds": 60},
                "delete_file": {"path": "src/app.py", "force": True},
            }
            out["refused"] = {}
            for name, args in calls.items():
                result = await client.call_tool(name, args)
                out["refused"][name] = (result.is_error, payload(result)["error"])
            read = await client.call_tool("read_file", {"path": "src/a.py"})
            out["read"] = (read.is_error, payload(read).get("content"))
            out["scope_tools"] = payload(await client.call_tool("effective_scope", {}))["tools"]
            listed = (await client.list_tools()).tools
            out["during"] = {t.name: t.annotations.read_only_hint for t in listed}
            thawed = await anyio.run_process([*cli, "freeze", "off"])
            out["thaw_rc"] = thawed.returncode
            # This session listed the frozen catalog: writes ask it to list again.
            stale = await client.call_tool("commit", {"message": "after"})
            out["stale"] = payload(stale)["error"]
            out["after"] = {t.name for t in (await client.list_tools()).tools}
            out["commit"] = payload(await client.call_tool("commit", {"message": "after"}))
        return out

    out = anyio.run(run)
    assert out["freeze_rc"] == 0 and out["thaw_rc"] == 0
    assert not out["staged"]
    assert {"write_file", "commit", "issue_sub_token"} <= out["before"]
    assert out["refused"] == {name: (True, "engine_frozen") for name in out["refused"]}
    assert out["read"] == (False, "A\n")
    assert set(out["during"]) == READ_ONLY == set(out["scope_tools"])
    assert all(out["during"].values())
    assert out["stale"] == "catalog_changed"
    assert out["after"] == out["before"]
    assert out["commit"]["lane"] == "agent/alice"
    assert "refs/heads/agent/alice" in world.refs()


def test_mcp_read_only_edge(world: World) -> None:
    """``chit mcp --read-only``: only read-only tools, writes fail with engine_frozen."""
    token = world.mint(ops="read,write,commit", paths="src/**")
    params = stdio_server_params(world.home, world.repo, token)
    params.args.append("--read-only")

    async def run() -> tuple[set[str], Any, Any]:
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            write = await client.call_tool("write_file", {"path": "src/a.py", "content": "x"})
            read = await client.call_tool("read_file", {"path": "src/app.py"})
            return names, (write.is_error, payload(write)["error"]), read.is_error

    names, write, read_error = anyio.run(run)
    assert names == READ_ONLY
    assert write == (True, "engine_frozen")
    assert read_error is False
