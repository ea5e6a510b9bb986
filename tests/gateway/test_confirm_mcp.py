"""Confirmation over real MCP sessions: stdio and streamable HTTP, both protocol eras.

The official client lists tools, meets ``confirmation_required`` with its
preview (and nothing staged or landed), confirms, and calls tools the policy
does not list as before. Over stdio each case runs with the embedded engine
and against ``chit engine serve`` (the ``edge`` fixture); over HTTP with a
real ``chit mcp --http`` on loopback (docs/tools.md, "Confirmation").
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import World
from tests.gateway.http_client import http_client, running_edge
from tests.gateway.mcp_client import Edge, Heard, payload

MODERN = "2026-07-28"
ERAS = ["legacy", MODERN]
CONFIRM = '\n[confirm]\ntools = ["delete_file", "commit"]\n'


def write_policy(world: World, text: str) -> None:
    path = world.home / "policy.toml"
    fresh = path.with_suffix(".new")
    fresh.write_text(text, encoding="utf-8")
    os.replace(fresh, path)


def ask_confirm(world: World) -> None:
    write_policy(world, (world.home / "policy.toml").read_text(encoding="utf-8") + CONFIRM)


async def confirm_session(client: Client) -> dict[str, Any]:
    """What an agent meets under ``[confirm] tools = ["delete_file", "commit"]``."""
    seen: dict[str, Any] = {}
    tools = {t.name: t for t in (await client.list_tools()).tools}
    seen["asking"] = {n for n, t in tools.items() if "confirm" in t.input_schema["properties"]}
    seen["schema"] = tools["delete_file"].input_schema["properties"]["confirm"]
    wrote = await client.call_tool("write_file", {"path": "src/new.py", "content": "NEW = 1\n"})
    seen["wrote"] = (wrote.is_error, payload(wrote))
    deleted = await client.call_tool("delete_file", {"path": "src/app.py"})
    seen["delete"] = (deleted.is_error, payload(deleted))
    seen["after_delete"] = payload(await client.call_tool("status", {}))["staged"]
    committed = await client.call_tool("commit", {"message": "Add new.py\n\nWhy."})
    seen["commit"] = (committed.is_error, payload(committed))
    seen["after_commit"] = payload(await client.call_tool("status", {}))
    odd = await client.call_tool("write_file", {"path": "src/x.py", "content": "", "confirm": True})
    seen["unlisted_confirm"] = (odd.is_error, payload(odd))
    done = await client.call_tool("delete_file", {"path": "src/app.py", "confirm": True})
    seen["confirmed_delete"] = (done.is_error, payload(done))
    landed = await client.call_tool("commit", {"message": "Add new.py\n\nWhy.", "confirm": True})
    seen["confirmed_commit"] = (landed.is_error, payload(landed))
    return seen


def check_confirm_session(world: World, seen: dict[str, Any]) -> None:
    assert seen["asking"] == {"delete_file", "commit"}
    assert seen["schema"]["type"] == "boolean" and seen["schema"]["default"] is False
    assert seen["wrote"] == (False, seen["wrote"][1]) and seen["wrote"][1]["change"] == "added"
    is_error, refused = seen["delete"]
    assert is_error and refused["error"] == "confirmation_required"
    assert refused["preview"] == {
        "tool": "delete_file", "path": "src/app.py", "exists": True, "size": 25
    }
    assert seen["after_delete"] == [{"path": "src/new.py", "change": "added"}]
    is_error, refused = seen["commit"]
    assert is_error and refused["error"] == "confirmation_required"
    assert refused["preview"] == {
        "tool": "commit", "lane": "agent/alice", "subject": "Add new.py",
        "staged": [{"path": "src/new.py", "change": "added"}], "hidden": 0,
    }
    # Nothing landed while asking: no lane yet, the staged change as it was.
    assert seen["after_commit"]["lane_exists"] is False
    assert seen["after_commit"]["staged"] == [{"path": "src/new.py", "change": "added"}]
    is_error, refused = seen["unlisted_confirm"]
    assert is_error and refused["error"] == "invalid_argument"
    assert refused["fields"] == ["confirm"]
    is_error, deleted = seen["confirmed_delete"]
    assert not is_error and deleted["change"] == "deleted"
    is_error, landed = seen["confirmed_commit"]
    assert not is_error and landed["lane"] == "agent/alice" and landed["files"] == 2
    assert world.refs()["refs/heads/agent/alice"] == landed["commit"]
    assert world.refs()["refs/heads/main"] == world.main_id


async def plain_session(client: Client) -> dict[str, Any]:
    """The same calls under a policy without ``[confirm]``."""
    tools = (await client.list_tools()).tools
    asking = {t.name for t in tools if "confirm" in t.input_schema["properties"]}
    await client.call_tool("write_file", {"path": "src/new.py", "content": "NEW = 1\n"})
    deleted = await client.call_tool("delete_file", {"path": "src/app.py"})
    extra = await client.call_tool("delete_file", {"path": "src/data.bin", "confirm": True})
    landed = await client.call_tool("commit", {"message": "Add new.py"})
    return {"asking": asking, "delete": (deleted.is_error, payload(deleted)),
            "extra": payload(extra), "commit": (landed.is_error, payload(landed))}


def check_plain_session(world: World, seen: dict[str, Any]) -> None:
    assert seen["asking"] == set()
    assert seen["delete"][0] is False and seen["delete"][1]["change"] == "deleted"
    assert seen["extra"]["error"] == "invalid_argument" and seen["extra"]["fields"] == ["confirm"]
    assert seen["commit"][0] is False
    assert world.refs()["refs/heads/agent/alice"] == seen["commit"][1]["commit"]


def stdio(edge: Edge, token: str, mode: str, body: Any) -> Any:
    async def go() -> Any:
        async with Client(edge.params(token), mode=mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
            return await body(client)

    return anyio.run(go)


def http(world: World, token: str, mode: str, body: Any) -> Any:
    async def go(url: str) -> Any:
        async with http_client(url, token, mode=mode) as (client, _):
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
            return await body(client)

    with running_edge(world) as edge:
        return anyio.run(go, edge.url)


@pytest.mark.parametrize("mode", ERAS)
def test_stdio_confirmation_required_then_confirmed(world: World, edge: Edge, mode: str) -> None:
    """Threat: a destructive call made by a slip; the gateway, not the client, asks."""
    ask_confirm(world)
    check_confirm_session(world, stdio(edge, world.mint(), mode, confirm_session))


@pytest.mark.parametrize("mode", ERAS)
def test_http_confirmation_required_then_confirmed(world: World, mode: str) -> None:
    """Threat: a destructive call made by a slip; the gateway, not the client, asks."""
    ask_confirm(world)
    check_confirm_session(world, http(world, world.mint(), mode, confirm_session))


@pytest.mark.parametrize("mode", ERAS)
def test_stdio_not_needed_when_the_policy_does_not_list_the_tool(
    world: World, edge: Edge, mode: str
) -> None:
    check_plain_session(world, stdio(edge, world.mint(), mode, plain_session))


@pytest.mark.parametrize("mode", ERAS)
def test_http_not_needed_when_the_policy_does_not_list_the_tool(world: World, mode: str) -> None:
    check_plain_session(world, http(world, world.mint(), mode, plain_session))


def test_adding_confirm_reaches_the_live_session(world: World, edge: Edge) -> None:
    """A policy edit that adds ``[confirm]``: told through the change feed, and it holds.

    The client that keeps its old listing cannot write under it
    (``catalog_changed``); listing again shows ``confirm`` and the call asks.
    """
    token = world.mint()
    heard = Heard()

    async def go() -> Any:
        async with Client(edge.params(token), mode="legacy", message_handler=heard) as client:
            before = (await client.list_tools()).tools
            ask_confirm(world)
            told = await heard.reaches(1)
            stale = payload(await client.call_tool("delete_file", {"path": "src/app.py"}))
            after = (await client.list_tools()).tools
            asked = payload(await client.call_tool("delete_file", {"path": "src/app.py"}))
            return before, told, stale, after, asked

    before, told, stale, after, asked = anyio.run(go)
    assert not any("confirm" in t.input_schema["properties"] for t in before)
    assert told == 1
    assert stale["error"] == "catalog_changed"
    assert {t.name for t in after if "confirm" in t.input_schema["properties"]} == {
        "delete_file", "commit"
    }
    assert asked["error"] == "confirmation_required"
