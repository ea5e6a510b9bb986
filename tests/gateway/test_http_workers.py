"""``chit mcp --http --engine URL --workers 2``: edge workers on one port, sessions across them.

The official client makes a new connection for every request (``fresh``), and
a test steers a connection to one worker by pausing the other (``SIGSTOP``). A
request that completes while one worker is stopped was served by the other; one
that needs the stopped worker (its session lives there) waits for it, proxied.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import pytest

from engine import admin
from gateway import cli
from gateway.http_edge import MAX_SESSIONS_PER_IDENTITY
from tests.conftest import World
from tests.gateway import procs
from tests.gateway.http_client import Edge, http_client, start, stop
from tests.gateway.mcp_client import engine_server, payload

MODERN = "2026-07-28"
LEGACY = {"MCP-Protocol-Version": "2025-11-25"}
JSON_HEADERS = {"Accept": "application/json, text/event-stream",
                "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}


@contextmanager
def edge_workers(world: World, tmp_path: Path, *engine_args: str) -> Iterator[
        tuple[Edge, dict[int, int]]]:
    """An engine and ``chit mcp --http --workers 2`` in front of it: the edge and its workers."""
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    with engine_server(world.home, world.repo, *engine_args) as server:
        edge = start([sys.executable, "-m", "gateway.cli", "--home", str(edge_home), "mcp",
                      "--engine", server.url, "--http", "127.0.0.1:0", "--workers", "2",
                      "--watch-interval", "0.2"])
        try:
            found: dict[int, int] = {}

            def both() -> bool:
                found.update(procs.worker_indexes(edge.process.pid))
                return len(found) == 2

            procs.wait_for(both, "two edge workers")
            yield edge, found
        finally:
            stop(edge)
    assert list(edge_home.iterdir()) == []


def _port(edge: Edge) -> int:
    return int(edge.authority.rpartition(":")[2])


class _Heard:
    def __init__(self) -> None:
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.event.set()


def test_a_legacy_session_works_whichever_worker_its_requests_reach(
    world: World, tmp_path: Path
) -> None:
    """Threat: a session's requests failing, or acting on another worker's state, when the
    kernel hands them to a worker that does not hold the session."""
    token = world.mint()
    heard = _Heard()
    ids: list[str] = []
    out: dict[str, Any] = {}

    async def note(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            ids.append(response.headers["mcp-session-id"])

    with edge_workers(world, tmp_path) as (edge, workers):
        port = _port(edge)

        async def write(client: Any, name: str) -> Any:
            return payload(await client.call_tool(
                "write_file", {"path": f"src/{name}.py", "content": f"{name} = 1\n"}))

        async def go() -> None:
            async with http_client(edge.url, token, message_handler=heard, fresh=True,
                                   event_hooks={"response": [note]}) as (client, _):
                home = int(ids[0][1:ids[0].index(".")])  # the id names its worker
                other = workers[1 - home]
                with procs.paused(other):  # these complete at the session's own worker
                    await client.list_tools()
                    out["a"] = await write(client, "a")
                before = procs.accepted_tcp(port, other)
                os.kill(workers[home], signal.SIGSTOP)  # new connections reach `other` only
                try:
                    async with anyio.create_task_group() as tg:
                        async def b() -> None:
                            out["b"] = await write(client, "b")

                        tg.start_soon(b)
                        await anyio.to_thread.run_sync(procs.wait_for, lambda: (
                            procs.accepted_tcp(port, other) > before), "the call at `other`")
                        os.kill(workers[home], signal.SIGCONT)  # it answers through `other`
                finally:
                    os.kill(workers[home], signal.SIGCONT)
                out["status"] = payload(await client.call_tool("status", {}))
                admin.set_freeze(world.home, True, reason="test")
                with anyio.fail_after(15):
                    await heard.event.wait()
                out["after"] = {t.name for t in (await client.list_tools()).tools}
            # Leaving the client sent DELETE: the session is gone on every worker.
            with httpx2.Client(timeout=30) as http:
                out["ended"] = [http.post(edge.url, json={"jsonrpc": "2.0", "id": 9,
                                                          "method": "tools/list"},
                                          headers=JSON_HEADERS | LEGACY | {
                                              "Authorization": f"Bearer {token}",
                                              "Mcp-Session-Id": ids[0]}).status_code
                                for _ in range(4)]

        anyio.run(go)
    assert len(set(ids)) == 1 and ids[0].startswith(("w0.", "w1."))
    assert out["a"]["change"] == "added" and out["b"]["change"] == "added"
    assert [e["path"] for e in out["status"]["staged"]] == ["src/a.py", "src/b.py"]
    assert "write_file" not in out["after"] and "read_file" in out["after"]  # frozen
    assert out["ended"] == [404] * 4


def test_a_proxied_get_stream_carries_list_changed_and_a_dead_workers_session_is_404(
    world: World, tmp_path: Path
) -> None:
    token = world.mint()
    auth = {"Authorization": f"Bearer {token}"}
    lines: list[str] = []
    with edge_workers(world, tmp_path) as (edge, workers), httpx2.Client(timeout=30) as http:
        port = _port(edge)
        opened = http.post(edge.url, json=INIT, headers=JSON_HEADERS | auth)
        session = opened.headers["mcp-session-id"]
        home = int(session[1:session.index(".")])
        other = workers[1 - home]
        on = JSON_HEADERS | LEGACY | auth | {"Mcp-Session-Id": session}
        http.post(edge.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                  headers=on)
        assert "write_file" in http.post(edge.url, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=on).text
        started = threading.Event()

        def listen() -> None:
            with httpx2.Client(timeout=httpx2.Timeout(30, read=30)) as stream_http, \
                    stream_http.stream("GET", edge.url, headers=LEGACY | auth | {
                        "Accept": "text/event-stream", "Mcp-Session-Id": session}) as stream:
                lines.append(str(stream.status_code))
                started.set()
                for line in stream.iter_lines():
                    lines.append(line)
                    if "tools/list_changed" in line:
                        return

        before = procs.accepted_tcp(port, other)
        reader = threading.Thread(target=listen, daemon=True)
        with procs.paused(workers[home]):  # the stream's connection goes to `other`
            reader.start()
            procs.wait_for(lambda: procs.accepted_tcp(port, other) > before, "the GET at other")
        assert started.wait(30) and lines[0] == "200"
        admin.set_freeze(world.home, True, reason="test")
        reader.join(30)
        assert any("notifications/tools/list_changed" in line for line in lines), lines
        # Threat: session hijack by id, through a worker that does not hold the session.
        bob = {"Authorization": f"Bearer {world.mint(agent='bob')}"}
        mismatched = []
        for _ in range(4):
            with httpx2.Client(timeout=30) as fresh:  # a new connection: any worker
                mismatched.append(fresh.post(edge.url, headers=on | bob, json={
                    "jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        assert [r.status_code for r in mismatched] == [403] * 4
        assert mismatched[0].json()["error"]["data"]["error"] == "session_token_mismatch"

        killed = {workers[home]: procs.started(workers[home]) or 0}
        os.kill(workers[home], signal.SIGKILL)  # the session dies with its worker
        procs.wait_for(lambda: procs.alive(killed) == [], "the worker to die")
        gone = []
        for _ in range(4):
            with httpx2.Client(timeout=30) as fresh:  # a new connection: any worker
                gone.append(fresh.post(edge.url, headers=on, json={
                    "jsonrpc": "2.0", "id": 3, "method": "tools/list"}).status_code)
        assert gone == [404] * 4
        procs.wait_for(lambda: procs.worker_indexes(edge.process.pid).get(home) not in (
            None, workers[home]), "the worker's replacement")
        with httpx2.Client(timeout=30) as fresh:  # the client initialises again
            again = fresh.post(edge.url, json=INIT, headers=JSON_HEADERS | auth)
        assert again.status_code == 200 and again.headers["mcp-session-id"] != session


def test_the_per_identity_session_limit_holds_across_workers(
    world: World, tmp_path: Path
) -> None:
    """Threat: one token opening the session limit once per worker."""
    greedy, other = world.mint(agent="greedy"), world.mint(agent="other")
    with edge_workers(world, tmp_path) as (edge, _workers):
        def open_session(token: str) -> httpx2.Response:
            with httpx2.Client(timeout=30) as http:  # a new connection each: any worker
                return http.post(edge.url, json=INIT, headers=JSON_HEADERS | {
                    "Authorization": f"Bearer {token}"})

        opened = [open_session(greedy) for _ in range(MAX_SESSIONS_PER_IDENTITY)]
        refused = [open_session(greedy) for _ in range(4)]
        theirs = open_session(other)
        # Threat: a client posing as a worker, to record a listing its identity never
        # made (writes would then skip catalog_changed). Only private sockets have it.
        with httpx2.Client(timeout=30) as http:
            posed = [http.post(edge.origin + "/_chit/listed", json={
                "token_id": "x", "agent": "greedy", "catalog_hash": "sha256:0"})
                for _ in range(4)]
    assert [r.status_code for r in posed] == [404] * 4
    assert all(r.status_code == 200 for r in opened)
    assert len({r.headers["mcp-session-id"][:3] for r in opened}) == 1  # one worker holds them
    assert [r.status_code for r in refused] == [429] * 4
    assert refused[0].json()["error"]["data"]["error"] == "limit_exceeded"
    assert theirs.status_code == 200


def test_a_stateless_identitys_staged_change_is_one_across_workers(
    world: World, tmp_path: Path
) -> None:
    """Threat: an identity's writes split between workers' sessions, or a write accepted
    at a worker that never saw the identity list the catalog."""
    token = world.mint()
    out: dict[str, Any] = {}
    with edge_workers(world, tmp_path, "--workers", "2") as (edge, workers):

        async def go() -> None:
            async with http_client(edge.url, token, mode=MODERN, fresh=True) as (client, _):
                with procs.paused(workers[1]):  # served by worker 0
                    await client.list_tools()
                    out["a"] = payload(await client.call_tool(
                        "write_file", {"path": "src/a.py", "content": "a\n"}))
                with procs.paused(workers[0]):  # served by worker 1: it never listed
                    out["b"] = payload(await client.call_tool(
                        "write_file", {"path": "src/b.py", "content": "b\n"}))
                    out["status"] = payload(await client.call_tool("status", {}))
                out["commit"] = payload(await client.call_tool("commit", {"message": "ab"}))

        anyio.run(go)
    assert out["a"]["change"] == "added" and out["b"]["change"] == "added", out
    assert [e["path"] for e in out["status"]["staged"]] == ["src/a.py", "src/b.py"]
    assert out["status"]["session"].startswith("identity.")
    assert out["commit"]["files"] == 2
    assert world.refs()["refs/heads/agent/alice"] == out["commit"]["commit"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mcp", "--repo", "R", "--http", "127.0.0.1:0", "--workers", "2"], "needs --engine"),
        (["mcp", "--engine", "unix:/x", "--workers", "2"], "applies to --http"),
        (["mcp", "--engine", "unix:/x", "--http", "127.0.0.1:0", "--workers", "0"], "from 1"),
        (["engine", "serve", "--repo", "R", "--workers", "x"], "from 1"),
    ],
)
def test_workers_options_are_checked(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    monkeypatch.setenv("CHIT_TOKEN", "chit_x")
    admin.init_home(tmp_path / "home")
    assert cli.main(["--home", str(tmp_path / "home"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_stateless_session_id_is_the_identity(world: World) -> None:
    from gateway.http_edge.connections import Connections, claimed_principal

    token = world.mint()
    principal = claimed_principal(token)
    one, two = Connections(), Connections()
    assert one.stateless_state(principal, None).engine_session == \
        two.stateless_state(principal, "app").engine_session == f"identity.{principal.token_id}"
    assert json.dumps(one.stateless_state(principal, None).engine_session).isascii()
