"""``tools/list_changed`` pushed by the engine's change feed, over real MCP transports.

Every change is made by another process (the ``chit`` CLI, or an edit of
``policy.toml``) while the official client stays connected: over stdio with the
embedded engine and with ``chit mcp --engine`` in front of ``chit engine serve``
(the ``edge`` fixture), and over streamable HTTP with a watch interval so long
that only the feed can deliver. Notifications are collected with the client's
message handler and awaited with a generous bound; nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError

from engine import admin
from engine.catalog.declarations import TOOLS
from engine.tools.table import handler_for
from tests.conftest import World
from tests.gateway.http_client import http_client, running_edge, start, stop
from tests.gateway.mcp_client import HEARD_BOUND as BOUND
from tests.gateway.mcp_client import Edge, Heard, engine_server, payload

READ_ONLY = {t.name for t in TOOLS if t.read_only and handler_for(t.name) is not None}
QUIET = 1.5  # seconds (several feed polls) a connection is watched for a notification


def _token_id(token: str) -> str:
    return str(admin.inspect_token(token)["id"])


async def _cli(world: World, *argv: str) -> None:
    done = await anyio.run_process([*world.cli(), *argv], check=False)
    assert done.returncode == 0, done.stderr.decode()


def _run_legacy(edge: Edge, token: str, heard: Heard, body: Callable[[Client], Any]) -> Any:
    """Run ``body`` on a 2025-11-25 stdio session; ``heard`` counts its notifications."""

    async def go() -> Any:
        async with Client(edge.params(token), mode="legacy", message_handler=heard) as client:
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed
            return await body(client)

    return anyio.run(go)


# --- stdio, embedded and against chit engine serve -------------------------------------


def test_a_revocation_reaches_the_live_session(world: World, edge: Edge) -> None:
    """Threat: an agent keeps acting on a catalog after its token was revoked elsewhere.

    ``chit revoke`` in another process: the session is told at once, and its next
    call is refused.
    """
    token = world.mint(agent="alice")
    heard = Heard()

    async def body(client: Client) -> Any:
        await client.list_tools()
        await _cli(world, "revoke", _token_id(token))
        count = await heard.reaches(1)
        refused = payload(await client.call_tool("effective_scope", {}))
        with pytest.raises(MCPError) as relist:
            await client.list_tools()
        return count, refused, relist.value.error

    count, refused, relist = _run_legacy(edge, token, heard, body)
    assert count == 1
    assert refused["error"] == "token_revoked"
    assert relist.code == -32001 and relist.data["error"] == "token_revoked"


def test_a_freeze_and_a_thaw_reach_the_live_session(world: World, edge: Edge) -> None:
    """``chit freeze on`` (another process): told, and the next listing is read-only."""
    token = world.mint(ops="read,write,commit")
    heard = Heard()

    async def body(client: Client) -> Any:
        before = {t.name for t in (await client.list_tools()).tools}
        await _cli(world, "freeze", "on", "--reason", "incident")
        frozen = await heard.reaches(1)
        during = {t.name for t in (await client.list_tools()).tools}
        await _cli(world, "freeze", "off")
        thawed = await heard.reaches(2)
        after = {t.name for t in (await client.list_tools()).tools}
        return before, frozen, during, thawed, after

    before, frozen, during, thawed, after = _run_legacy(edge, token, heard, body)
    assert "write_file" in before
    assert frozen == 1
    assert during == READ_ONLY & before
    assert thawed == 2
    assert after == before


def test_a_policy_edit_reaches_the_live_session(world: World, edge: Edge) -> None:
    """Threat: agents keep listing tools the organisation's policy now refuses.

    ``policy.toml`` is replaced by one that refuses every call (it is invalid,
    so the engine fails closed): the session is told and its listing is
    refused; a fixed policy tells it again and the listing is back.
    """
    token = world.mint()
    policy_file = world.home / "policy.toml"
    good = policy_file.read_text(encoding="utf-8")
    heard = Heard()

    def replace(text: str) -> None:
        fresh = policy_file.with_suffix(".new")
        fresh.write_text(text, encoding="utf-8")
        os.replace(fresh, policy_file)

    async def body(client: Client) -> Any:
        before = {t.name for t in (await client.list_tools()).tools}
        replace("[limits]\nfile_bytes = -1\n")
        denied = await heard.reaches(1)
        with pytest.raises(MCPError) as relist:
            await client.list_tools()
        replace(good)
        restored = await heard.reaches(2)
        after = {t.name for t in (await client.list_tools()).tools}
        return before, denied, relist.value.error, restored, after

    before, denied, relist, restored, after = _run_legacy(edge, token, heard, body)
    assert denied == 1
    assert relist.code == -32001 and relist.data["error"] == "policy_denied"
    assert restored == 2
    assert after == before and "write_file" in after


def test_a_change_to_another_token_sends_nothing(world: World, edge: Edge) -> None:
    """Notifications are per principal: revoking bob tells bob's session, not alice's."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    heard_a, heard_b = Heard(), Heard()

    async def go() -> tuple[int, int, int]:
        async with (
            Client(edge.params(alice), mode="legacy", message_handler=heard_a) as a,
            Client(edge.params(bob), mode="legacy", message_handler=heard_b) as b,
        ):
            await a.list_tools()
            await b.list_tools()
            await _cli(world, "revoke", _token_id(bob))
            bob_told = await heard_b.reaches(1)  # the feed moved and edges re-checked
            await anyio.sleep(QUIET)
            alice_quiet = heard_a.count
            await _cli(world, "revoke", _token_id(alice))  # alice's edge is listening
            return bob_told, alice_quiet, await heard_a.reaches(1)

    bob_told, alice_quiet, alice_told = anyio.run(go)
    assert bob_told == 1
    assert alice_quiet == 0
    assert alice_told == 1


def test_the_2026_era_hears_it_on_a_listen_stream(world: World, edge: Edge) -> None:
    """2026-07-28 over stdio: change notifications ride ``subscriptions/listen`` only."""
    token = world.mint()
    events: list[Any] = []

    async def go() -> Any:
        async with Client(edge.params(token)) as client:
            assert client.protocol_version == "2026-07-28"
            before = {t.name for t in (await client.list_tools()).tools}
            async with client.listen(tools_list_changed=True) as sub:
                await _cli(world, "freeze", "on", "--reason", "incident")
                with anyio.move_on_after(BOUND):
                    async for event in sub:
                        events.append(event)
                        break
            during = {t.name for t in (await client.list_tools()).tools}
            return before, during

    before, during = anyio.run(go)
    assert [type(e) for e in events] == [ToolsListChanged]
    assert during == READ_ONLY & before


# --- what the stdio edge does around the notifications -----------------------------------


def test_the_stdio_edge_exits_when_its_client_leaves(world: World, edge: Edge) -> None:
    """A wait on the feed in progress must not keep the edge alive after stdin closes.

    The edge is driven over raw JSON-RPC lines so that its own exit status is
    seen (the official client would signal a process that lingers).
    """
    token = world.mint()
    params = edge.params(token)
    process = subprocess.Popen(
        [params.command, *params.args], env=params.env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    try:
        for request in requests:
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
        answers = [json.loads(process.stdout.readline()) for _ in range(2)]
        process.stdin.close()  # the client leaves while the edge waits on the feed
        code = process.wait(timeout=20)  # less than one feed wait (30 s): no hang
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        process.stdout.close()
    assert answers[0]["result"]["capabilities"]["tools"]["listChanged"] is True
    assert "write_file" in {t["name"] for t in answers[1]["result"]["tools"]}
    assert code == 0


def test_the_feed_outlives_an_engine_outage(world: World, tmp_path: Path) -> None:
    """Threat: an engine restart silently ending change notifications (or the session)."""
    import shutil
    import tempfile

    from tests.gateway.mcp_client import remote_edge_params

    short = Path(tempfile.mkdtemp(prefix="chit-f-"))
    sock = short / "e.sock"
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    token = world.mint()
    heard = Heard()

    async def go() -> Any:
        params = remote_edge_params(f"unix:{sock}", edge_home, token)
        with engine_server(world.home, world.repo, socket_path=sock) as server:
            async with Client(params, mode="legacy", message_handler=heard) as client:
                await client.list_tools()
                server.process.kill()  # no clean shutdown
                server.process.wait(10)
                await anyio.sleep(QUIET)  # the edge's waits fail meanwhile
                with engine_server(world.home, world.repo, socket_path=sock):
                    await client.list_tools()
                    await _cli(world, "revoke", _token_id(token))
                    count = await heard.reaches(1)
                    refused = payload(await client.call_tool("effective_scope", {}))
        return count, refused

    try:
        count, refused = anyio.run(go)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert count == 1
    assert refused["error"] == "token_revoked"


# --- streamable HTTP: the feed, not the interval ------------------------------------------


def test_an_http_session_hears_it_from_the_feed(world: World) -> None:
    """``--watch-interval 3600``: only the change feed can deliver within the test."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    heard_a, heard_b = Heard(), Heard()

    async def body(url: str) -> Any:
        async with (
            http_client(url, alice, message_handler=heard_a) as (a, _),
            http_client(url, bob, message_handler=heard_b) as (b, _),
        ):
            await a.list_tools()
            await b.list_tools()
            await _cli(world, "revoke", _token_id(alice))
            count = await heard_a.reaches(1)
            refused = payload(await a.call_tool("effective_scope", {}))
            return count, refused, heard_b.count

    with running_edge(world, watch_interval=3600) as edge:
        count, refused, bob_heard = anyio.run(body, edge.url)
    assert count == 1
    assert refused["error"] == "token_revoked"
    assert bob_heard == 0


def test_an_http_listen_stream_hears_it_from_a_separate_engines_feed(
    world: World, tmp_path: Path
) -> None:
    """``chit mcp --engine URL --http``: the feed comes through ``POST /v1/changes``."""
    token = world.mint()
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    events: list[Any] = []

    async def body(url: str) -> Any:
        async with http_client(url, token, mode="2026-07-28") as (client, _):
            before = {t.name for t in (await client.list_tools()).tools}
            async with client.listen(tools_list_changed=True) as sub:
                await _cli(world, "freeze", "on", "--reason", "incident")
                with anyio.move_on_after(BOUND):
                    async for event in sub:
                        events.append(event)
                        break
            return before, {t.name for t in (await client.list_tools()).tools}

    with engine_server(world.home, world.repo) as server:
        edge = start([sys.executable, "-m", "gateway.cli", "--home", str(edge_home), "mcp",
                      "--engine", server.url, "--http", "127.0.0.1:0",
                      "--watch-interval", "3600"])
        try:
            before, during = anyio.run(body, edge.url)
        finally:
            stop(edge)
    assert [type(e) for e in events] == [ToolsListChanged]
    assert during == READ_ONLY & before
