"""Approvals as an agent meets them over real MCP transports (the official client).

Over stdio (``chit mcp`` subprocesses) and streamable HTTP (``chit mcp --http``
on loopback), an operator decides with the real CLI in another process. The
expiry case runs the HTTP edge in this process (real uvicorn on loopback) so
that the engine's clock can be moved instead of sleeping. These clients speak
2025-11-25 without URL elicitation, so a waiting call is the ``isError``
refusal; the other answers (input-required, URL elicitation) are tested in
test_approvals_edges.py.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from engine.service import Engine
from gateway.demo import stdio_server_params
from gateway.http_edge import HttpEdge, HttpSettings
from gateway.http_edge.run import bind, uvicorn_config
from tests.conftest import World
from tests.gateway.http_client import http_client, running_edge
from tests.gateway.mcp_client import payload

POLICY = """version = 1

[[approval]]
tools = ["commit"]
paths = ["deploy/**"]
approvers = ["alice"]
ttl = 600
reason = "deployments need a release manager"
"""
WRITE = {"path": "deploy/prod.toml", "content": "replicas = 3\n"}
COMMIT = {"message": "Deploy three replicas"}


def cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.fixture
def home(world: World) -> Path:
    assert cli(world, "operators", "add", "alice").returncode == 0
    assert cli(world, "operators", "add", "carol").returncode == 0
    (world.home / "policy.toml").write_text(POLICY)
    return world.home


def _token(world: World) -> str:
    return world.mint(ops="read,write,commit", paths="**", ttl=3600)


async def _ask(client: Client) -> dict[str, Any]:
    """List, stage, commit: the commit's refusal."""
    await client.list_tools()
    assert not (await client.call_tool("write_file", WRITE)).is_error
    asked = await client.call_tool("commit", COMMIT)
    assert asked.is_error
    return payload(asked)


def test_stdio_required_then_approved_from_the_cli_then_the_retry_lands(
    world: World, home: Path
) -> None:
    token = _token(world)
    out: dict[str, Any] = {}

    async def body() -> None:
        params = stdio_server_params(home, world.repo, token)
        async with Client(params, mode="legacy") as client:
            asked = await _ask(client)
            out["asked"] = asked
            approval = asked["approval"]["id"]
            status = payload(await client.call_tool("status", {}))
            out["status"] = status["approvals"]
            out["again"] = payload(await client.call_tool("commit", COMMIT))
            out["unlisted"] = await anyio.to_thread.run_sync(
                lambda: cli(world, "approve", approval, "--as", "carol"))
            out["approved"] = await anyio.to_thread.run_sync(
                lambda: cli(world, "approve", approval, "--as", "alice", "--note", "go"))
            landed = await client.call_tool("commit", COMMIT)
            out["landed"] = (landed.is_error, payload(landed))

    anyio.run(body)
    asked = out["asked"]
    assert asked["error"] == "approval_required"
    assert asked["approval"]["paths"] == ["deploy/prod.toml"]
    assert asked["approval"]["approvers"] == ["alice"]
    assert asked["waits"] == f"chit approve {asked['approval']['id']}"
    assert out["status"] == [{"id": asked["approval"]["id"], "tool": "commit",
                              "expires_at": asked["approval"]["expires_at"]}]
    assert out["again"]["approval"]["id"] == asked["approval"]["id"]
    assert out["unlisted"].returncode == 3  # refused
    assert "refused (not_an_approver)" in out["unlisted"].stderr
    assert out["approved"].returncode == 0, out["approved"].stderr
    is_error, landed = out["landed"]
    assert not is_error, landed
    assert world.refs()["refs/heads/agent/alice"] == landed["commit"]


def test_stdio_denied_with_the_note(world: World, home: Path) -> None:
    token = _token(world)
    out: dict[str, Any] = {}

    async def body() -> None:
        params = stdio_server_params(home, world.repo, token)
        async with Client(params, mode="legacy") as client:
            approval = (await _ask(client))["approval"]["id"]
            await anyio.to_thread.run_sync(
                lambda: cli(world, "deny", approval, "--as", "alice", "--note", "not today"))
            out["denied"] = payload(await client.call_tool("commit", COMMIT))
            out["approval"] = approval

    anyio.run(body)
    assert out["denied"]["error"] == "approval_denied"
    assert out["denied"]["approval"] == {"id": out["approval"], "note": "not today",
                                         "decided_by": "alice"}
    assert "refs/heads/agent/alice" not in world.refs()


def test_stdio_approval_survives_the_engine_and_resumes_in_a_new_process(
    world: World, home: Path
) -> None:
    """The approval is in the store and the staged change in the saved session."""
    token = _token(world)
    out: dict[str, Any] = {}

    async def first() -> None:
        params = stdio_server_params(home, world.repo, token)
        async with Client(params, mode="legacy") as client:
            out["approval"] = (await _ask(client))["approval"]["id"]
            out["session"] = payload(await client.call_tool("status", {}))["session"]

    anyio.run(first)  # the chit mcp process (its engine) has exited
    assert cli(world, "approve", out["approval"], "--as", "alice").returncode == 0
    params = stdio_server_params(home, world.repo, token)
    params = params.model_copy(update={"args": [*params.args, "--session", out["session"]]})

    async def second() -> None:
        async with Client(params, mode="legacy") as client:
            await client.list_tools()
            landed = await client.call_tool("commit", COMMIT)
            out["landed"] = (landed.is_error, payload(landed))

    anyio.run(second)
    assert out["landed"][0] is False, out["landed"]
    assert "refs/heads/agent/alice" in world.refs()


def test_http_approved_then_landed_and_replays_from_elsewhere_are_refused(
    world: World, home: Path
) -> None:
    """Threat: an approval replayed from another session or with another token."""
    token, other = _token(world), _token(world)
    out: dict[str, Any] = {}

    async def body(url: str) -> None:
        async with http_client(url, token) as (client, _http):
            approval = (await _ask(client))["approval"]["id"]
            out["approval"] = approval
            assert (await anyio.to_thread.run_sync(
                lambda: cli(world, "approve", approval, "--as", "alice"))).returncode == 0
            # Another session of the same token, the same write and commit.
            async with http_client(url, token) as (elsewhere, _):
                out["elsewhere"] = await _ask(elsewhere)
            # Another token of the same agent.
            async with http_client(url, other) as (stranger, _):
                out["stranger"] = await _ask(stranger)
            landed = await client.call_tool("commit", COMMIT)
            out["landed"] = (landed.is_error, payload(landed))

    with running_edge(world) as edge:
        anyio.run(body, edge.url)
    for who in ("elsewhere", "stranger"):
        assert out[who]["error"] == "approval_required", who
        assert out[who]["approval"]["id"] != out["approval"], who
    assert out["landed"][0] is False, out["landed"]
    assert world.refs()["refs/heads/agent/alice"] == out["landed"][1]["commit"]


class _Clock:
    def __init__(self) -> None:
        self.now = int(time.time())

    def __call__(self) -> float:
        return float(self.now)


@contextmanager
def _in_process_edge(engine: Engine) -> Iterator[str]:
    """``chit mcp --http``'s app on loopback, served by uvicorn in a thread of this process."""
    import uvicorn

    settings = HttpSettings("127.0.0.1", 0)
    sock = bind(settings)
    edge = HttpEdge(engine, settings, port=sock.getsockname()[1])
    server = uvicorn.Server(uvicorn_config(edge.app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the edge did not start"
            time.sleep(0.02)
        yield edge.resource
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_http_an_unanswered_approval_expires_on_the_engines_clock(
    world: World, home: Path
) -> None:
    token = _token(world)
    clock = _Clock()
    out: dict[str, Any] = {}

    async def body(url: str) -> None:
        async with http_client(url, token) as (client, _http):
            out["asked"] = await _ask(client)
            clock.now += 600
            out["expired"] = payload(await client.call_tool("commit", COMMIT))
            out["anew"] = payload(await client.call_tool("commit", COMMIT))

    with Engine(home, world.repo, clock=clock) as engine, _in_process_edge(engine) as url:
        anyio.run(body, url)
    first = out["asked"]["approval"]["id"]
    assert out["expired"]["error"] == "approval_expired"
    assert out["expired"]["approval"]["id"] == first
    assert out["anew"]["error"] == "approval_required" and out["anew"]["approval"]["id"] != first
    late = cli(world, "approve", first, "--as", "alice")
    assert late.returncode == 3 and "refused (expired)" in late.stderr
    assert json.loads(cli(world, "approvals", "show", first, "--json").stdout)["state"] == (
        "expired")
