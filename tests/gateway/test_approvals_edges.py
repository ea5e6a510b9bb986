"""Approvals end to end: a commit waits, ``chit approve`` decides, the retry lands.

Real ``chit mcp`` subprocesses over stdio (embedded, and a client of a real
``chit engine serve``) and over streamable HTTP on loopback, the official
client in both protocol eras, the operator's real CLI.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import mcp_types as types
import pytest
import uvicorn
from mcp import Client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

from engine import admin
from engine.service import Engine, resolve_repo_specs
from gateway.demo import stdio_server_params
from gateway.http_edge import HttpEdge, HttpSettings
from gateway.http_edge.run import bind, uvicorn_config
from tests.conftest import World
from tests.gateway import procs
from tests.gateway.approvals_setup import decide, require_approval
from tests.gateway.http_client import http_client, running_edge, start, stop
from tests.gateway.mcp_client import Edge, engine_server, payload

MODERN = "2026-07-28"
LANE = "refs/heads/agent/alice"


class Completed:
    """A client message handler noting ``notifications/elicitation/complete``."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/elicitation/complete":
            self.ids.append(message.params.elicitation_id)
            self.event.set()


async def _never(_ctx: Any, _params: Any) -> types.ElicitResult:
    raise AssertionError("the edge sends no elicitation/create")


async def _stage(client: Client) -> None:
    await client.list_tools()
    await client.call_tool("write_file", {"path": "src/app.py", "content": "X = 2\n"})


async def _waiting(client: Client) -> types.InputRequiredResult:
    result = await client.session.call_tool("commit", {"message": "change app"},
                                            allow_input_required=True)
    assert isinstance(result, types.InputRequiredResult), result
    return result


def _id_of(waiting: types.InputRequiredResult) -> str:
    return str((waiting.meta or {})["chit/approval"]["approval"]["id"])


async def _decide(world: World, key: Path, approval_id: str, **kw: Any) -> None:
    await anyio.to_thread.run_sync(lambda: decide(world, key, approval_id, **kw))


# --- stdio ------------------------------------------------------------------------


def test_stdio_2026_waits_then_the_retry_with_the_state_lands(
    world: World, edge: Edge, tmp_path: Path,
) -> None:
    key = require_approval(world, tmp_path)
    token = world.mint()

    async def go() -> dict[str, Any]:
        async with Client(edge.params(token), mode=MODERN) as client:
            await _stage(client)
            waiting = await _waiting(client)
            approval_id = _id_of(waiting)
            status = payload(await client.call_tool("status", {}))
            again = await _waiting(client)  # still pending: the same approval
            await _decide(world, key, approval_id)
            done = await client.call_tool("commit", {"message": "change app"},
                                          request_state=again.request_state)
            return {"id": approval_id, "again": _id_of(again), "status": status,
                    "done": payload(done), "error": done.is_error}

    out = anyio.run(go)
    assert out["again"] == out["id"]
    assert [a["id"] for a in out["status"]["approvals"]] == [out["id"]]
    assert not out["error"] and out["done"]["commit"] == world.refs()[LANE]


def test_stdio_2026_a_denial_reaches_the_client_with_its_note(
    world: World, edge: Edge, tmp_path: Path,
) -> None:
    key = require_approval(world, tmp_path)
    token = world.mint()

    async def go() -> Any:
        async with Client(edge.params(token), mode=MODERN) as client:
            await _stage(client)
            waiting = await _waiting(client)
            await _decide(world, key, _id_of(waiting), deny=True, note="not before release")
            return await client.call_tool("commit", {"message": "change app"},
                                          request_state=waiting.request_state)

    denied = anyio.run(go)
    assert denied.is_error and payload(denied)["error"] == "approval_denied"
    assert payload(denied)["approval"]["note"] == "not before release"
    assert LANE not in world.refs()


def test_stdio_2025_without_elicitation_gets_the_refusal_and_retries(
    world: World, edge: Edge, tmp_path: Path,
) -> None:
    key = require_approval(world, tmp_path)
    token = world.mint()

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(edge.params(token), mode="legacy") as client:
            await _stage(client)
            waiting = await client.call_tool("commit", {"message": "change app"})
            assert waiting.is_error
            await _decide(world, key, payload(waiting)["approval"]["id"])
            done = await client.call_tool("commit", {"message": "change app"})
            return payload(waiting), payload(done)

    waiting, done = anyio.run(go)
    assert waiting["error"] == "approval_required"
    assert waiting["waits"] == f"chit approve {waiting['approval']['id']}"
    assert done["commit"] == world.refs()[LANE]


def test_stdio_2025_url_elicitation_from_the_engine_toml_template(
    world: World, tmp_path: Path,
) -> None:
    key = require_approval(world, tmp_path)
    (world.home / "engine.toml").write_text(
        '[approvals]\nurl = "https://approvals.example.org/a/{id}?from=chit"\n')
    token = world.mint()
    completed = Completed()

    async def go() -> tuple[UrlElicitationRequiredError, dict[str, Any]]:
        params = stdio_server_params(world.home, world.repo, token)
        async with Client(params, mode="legacy", message_handler=completed,
                          elicitation_callback=_never) as client:
            await _stage(client)
            with pytest.raises(MCPError) as err:
                await client.call_tool("commit", {"message": "change app"})
            waiting = UrlElicitationRequiredError.from_error(err.value.error)
            await _decide(world, key, waiting.elicitations[0].elicitation_id or "")
            with anyio.fail_after(20):
                await completed.event.wait()
            done = await client.call_tool("commit", {"message": "change app"})
            return waiting, payload(done)

    waiting, done = anyio.run(go)
    [elicitation] = waiting.elicitations
    approval_id = elicitation.elicitation_id or ""
    assert elicitation.url == f"https://approvals.example.org/a/{approval_id}?from=chit"
    assert "commit" in elicitation.message and "ops" in elicitation.message
    assert completed.ids == [approval_id]
    assert done["commit"] == world.refs()[LANE]


def test_stdio_a_state_opens_in_another_edge_process_on_the_same_home(
    world: World, tmp_path: Path,
) -> None:
    """The requestState keys come from the home: a restarted edge still opens a state."""
    key = require_approval(world, tmp_path)
    token = world.mint()

    async def first() -> tuple[str, str, str]:
        async with Client(stdio_server_params(world.home, world.repo, token),
                          mode=MODERN) as client:
            await _stage(client)
            session = payload(await client.call_tool("status", {}))["session"]
            waiting = await _waiting(client)
            return session, _id_of(waiting), waiting.request_state or ""

    session, approval_id, state = anyio.run(first)
    decide(world, key, approval_id)
    params = stdio_server_params(world.home, world.repo, token)
    params.args = [*params.args, "--session", session]

    async def second() -> dict[str, Any]:
        async with Client(params, mode=MODERN) as client:
            await client.list_tools()
            return payload(await client.call_tool("commit", {"message": "change app"},
                                                  request_state=state))

    assert anyio.run(second)["commit"] == world.refs()[LANE]


# --- HTTP -------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["echoed", "fresh"])
def test_http_2026_waits_then_the_retry_lands(world: World, tmp_path: Path, state: str) -> None:
    key = require_approval(world, tmp_path)
    token = world.mint()
    with running_edge(world) as running:

        async def go() -> dict[str, Any]:
            async with http_client(running.url, token, mode=MODERN) as (client, _):
                await _stage(client)
                waiting = await _waiting(client)
                await _decide(world, key, _id_of(waiting))
                echo = waiting.request_state if state == "echoed" else None
                return payload(await client.call_tool("commit", {"message": "change app"},
                                                      request_state=echo))

        done = anyio.run(go)
    assert done["commit"] == world.refs()[LANE]


def test_http_2025_url_elicitation_points_at_the_edge_page_then_completes(
    world: World, tmp_path: Path,
) -> None:
    key = require_approval(world, tmp_path)
    token = world.mint()
    completed = Completed()
    with running_edge(world) as running:

        async def go() -> tuple[UrlElicitationRequiredError, str, dict[str, Any]]:
            async with http_client(running.url, token, message_handler=completed,
                                   elicitation_callback=_never) as (client, http):
                await _stage(client)
                with pytest.raises(MCPError) as err:
                    await client.call_tool("commit", {"message": "change app"})
                waiting = UrlElicitationRequiredError.from_error(err.value.error)
                page = (await http.get(waiting.elicitations[0].url)).text
                await _decide(world, key, waiting.elicitations[0].elicitation_id or "")
                with anyio.fail_after(20):
                    await completed.event.wait()
                done = await client.call_tool("commit", {"message": "change app"})
                return waiting, page, payload(done)

        waiting, page, done = anyio.run(go)
    [elicitation] = waiting.elicitations
    approval_id = elicitation.elicitation_id or ""
    assert elicitation.url == f"{running.origin}/approvals/{approval_id}"
    assert "src/app.py" in page and "src needs a review" in page and "ops" in page
    assert f"chit approve {approval_id}" in page
    assert completed.ids == [approval_id] and done["commit"] == world.refs()[LANE]


def test_http_workers_open_each_others_state(world: World, tmp_path: Path) -> None:
    """The workers of ``chit mcp --http --engine URL --workers 2`` share the state key."""
    key = require_approval(world, tmp_path)
    token = world.mint()
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    with engine_server(world.home, world.repo) as server:
        edge = start([sys.executable, "-m", "gateway.cli", "--home", str(edge_home), "mcp",
                      "--engine", server.url, "--http", "127.0.0.1:0", "--workers", "2"])
        try:
            workers: dict[int, int] = {}

            def both() -> bool:
                workers.update(procs.worker_indexes(edge.process.pid))
                return len(workers) == 2

            procs.wait_for(both, "two edge workers")

            async def go() -> dict[str, Any]:
                async with http_client(edge.url, token, mode=MODERN, fresh=True) as (client, _):
                    with procs.paused(workers[1]):  # sealed by worker 0
                        await _stage(client)
                        waiting = await _waiting(client)
                    await _decide(world, key, _id_of(waiting))
                    with procs.paused(workers[0]):  # opened by worker 1
                        done = await client.call_tool("commit", {"message": "change app"},
                                                      request_state=waiting.request_state)
                    return payload(done)

            done = anyio.run(go)
        finally:
            stop(edge)
    assert done["commit"] == world.refs()[LANE]
    assert list(edge_home.iterdir()) == []


def test_http_page_is_read_only_and_404_for_other_paths(world: World) -> None:
    with running_edge(world) as running, httpx2.Client(timeout=30) as http:
        posted = http.post(f"{running.origin}/approvals/apr_{'a' * 26}")
        other = http.get(f"{running.origin}/approvals/not-an-id")
    assert posted.status_code == 405 and other.status_code == 404


def test_http_2026_a_state_past_its_approval_gets_approval_expired(
    world: World, tmp_path: Path,
) -> None:
    """The sealed state lives longer than an approval: the engine's clock decides."""
    require_approval(world, tmp_path)
    token = world.mint()
    clock = _Clock()
    with Engine(world.home, resolve_repo_specs(world.home, [str(world.repo)]),
                clock=clock) as engine, \
            _in_process_edge(engine, admin.request_state_keys(world.home).keys) as url:

        async def go() -> tuple[str, Any, dict[str, Any]]:
            async with http_client(url, token, mode=MODERN) as (client, _):
                await _stage(client)
                waiting = await _waiting(client)
                clock.now += 601  # the rule's ttl is 600 s
                expired = await client.call_tool("commit", {"message": "change app"},
                                                 request_state=waiting.request_state)
                anew = await _waiting(client)
                return _id_of(waiting), expired, {"id": _id_of(anew)}

        first, expired, anew = anyio.run(go)
    assert expired.is_error and payload(expired)["error"] == "approval_expired"
    assert payload(expired)["approval"]["id"] == first
    assert anew["id"] != first and LANE not in world.refs()


class _Clock:
    def __init__(self) -> None:
        self.now = int(time.time())

    def __call__(self) -> float:
        return float(self.now)


@contextlib.contextmanager
def _in_process_edge(engine: Engine, keys: tuple[bytes, ...]) -> Iterator[str]:
    """``chit mcp --http``'s app on loopback, served by uvicorn in a thread of this process."""
    settings = HttpSettings("127.0.0.1", 0)
    sock = bind(settings)
    edge = HttpEdge(engine, settings, port=sock.getsockname()[1],
                    state_keys=keys)
    server = uvicorn.Server(uvicorn_config(edge.app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
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
