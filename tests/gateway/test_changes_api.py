"""``POST /v1/changes`` of ``chit engine serve``, and ``RemoteEngine.wait_change``.

A real engine process on a unix socket, the real HTTP client, changes made by
the ``chit`` CLI in other processes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from engine import admin
from engine.admin.seed import create_repository
from engine.service import LIMITS
from gateway.remote_engine import RemoteEngine, parse_engine_url
from tests.conftest import FILES, World
from tests.gateway.mcp_client import TOKEN_TEXT, engine_server

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    """One engine for the cases that change nothing but the feed."""
    base = tmp_path_factory.mktemp("changes")
    world = World(home=base / "home", repo=base / "repo",
                  main_id=create_repository(base / "repo", FILES))
    admin.init_home(world.home)
    with engine_server(world.home, world.repo, verbose=True) as server:
        yield world, server.url
    assert not TOKEN_TEXT.search(server.output())


def _client(url: str) -> httpx2.Client:
    path, base = parse_engine_url(url)
    transport = httpx2.HTTPTransport(uds=path, trust_env=False)
    return httpx2.Client(base_url=base, transport=transport, trust_env=False, timeout=60.0)


def _changes(url: str, body: Any) -> httpx2.Response:
    with _client(url) as client:
        return client.post("/v1/changes", json=body)


def _send_wait(url: str, after: int) -> socket.socket:
    """Send a ``timeout: 30`` wait on a raw connection and leave it in flight.

    Any answer on another connection after this returns was served by an event
    loop that had read this request already.
    """
    body = json.dumps({"after": after, "timeout": LIMITS.change_wait_seconds}).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(url.removeprefix("unix:"))
    sock.sendall(
        b"POST /v1/changes HTTP/1.1\r\nHost: chit-engine\r\n"
        b"Content-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    return sock


def _answer(sock: socket.socket) -> tuple[int, Any]:
    """The status and JSON body of the answer on ``sock``, read until the server closes it.

    The read gives up after 20 seconds, less than the 30 the wait asked for: a
    wait that does not end early fails here.
    """
    sock.settimeout(20)
    raw = b""
    with sock:
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def _revoke(world: World, token: str) -> None:
    token_id = str(admin.inspect_token(token)["id"])
    done = subprocess.run([*world.cli(), "revoke", token_id], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        (b"{}", ["after", "timeout"]),
        (b'{"after":-1}', ["timeout"]),
        (b'{"timeout":0}', ["after"]),
        (b'{"after":-1,"timeout":0,"token":"chit_x"}', ["token"]),
        (b'{"after":"1","timeout":0}', ["after"]),
        (b'{"after":1.0,"timeout":0}', ["after"]),
        (b'{"after":true,"timeout":0}', ["after"]),
        (b'{"after":null,"timeout":0}', ["after"]),
        (b'{"after":-2,"timeout":0}', ["after"]),
        (b'{"after":9223372036854775808,"timeout":0}', ["after"]),
        (b'{"after":-1,"timeout":"1"}', ["timeout"]),
        (b'{"after":-1,"timeout":false}', ["timeout"]),
        (b'{"after":-1,"timeout":-0.5}', ["timeout"]),
        (b'{"after":-1,"timeout":30.5}', ["timeout"]),
        (b'{"after":-1,"timeout":1e400}', ["timeout"]),
    ],
)
def test_requests_are_checked_strictly(
    served: tuple[World, str], body: bytes, fields: list[str]
) -> None:
    """Threat: a malformed wait tying up a thread, or a field read two ways."""
    _world, url = served
    with _client(url) as client:
        answer = client.post("/v1/changes", content=body, headers=JSON)
    assert answer.status_code == 400
    assert answer.json()["ok"] is False
    assert answer.json()["error"]["error"] == "invalid_argument"
    assert answer.json()["error"]["fields"] == fields
    assert answer.headers["cache-control"] == "no-store"


def test_the_transport_rules_of_the_api_apply(served: tuple[World, str]) -> None:
    _world, url = served
    with _client(url) as client:
        cases = [
            (client.get("/v1/changes"), 405, "invalid_argument"),
            (client.post("/v1/changes", content=b'{"after":-1,"timeout":0}',
                         headers={"content-type": "text/plain"}), 415, "invalid_argument"),
            (client.post("/v1/changes", json={"after": -1, "timeout": 0},
                         headers={"origin": "http://evil.example"}), 403, "invalid_argument"),
            (client.post("/v1/changes", content=b'{"after":-1,"after":0,"timeout":0}',
                         headers=JSON), 400, "invalid_argument"),
        ]
    for response, status, code in cases:
        assert response.status_code == status, response.text
        assert response.json()["error"]["error"] == code


def test_after_minus_one_answers_at_once_with_the_position(served: tuple[World, str]) -> None:
    _world, url = served
    answer = _changes(url, {"after": -1, "timeout": LIMITS.change_wait_seconds})
    assert answer.status_code == 200
    doc = answer.json()
    assert doc == {"ok": True, "position": doc["position"]}
    assert type(doc["position"]) is int and doc["position"] >= 0
    # Nothing changed since: a zero wait answers the same position.
    assert _changes(url, {"after": doc["position"], "timeout": 0}).json() == doc


def test_a_wait_wakes_up_on_a_revocation_made_by_the_cli(world: World) -> None:
    """The long poll answers when the feed moves, well before its timeout."""
    token = world.mint()
    with engine_server(world.home, world.repo) as server:
        start = _changes(server.url, {"after": -1, "timeout": 0}).json()["position"]
        waiting = _send_wait(server.url, start)
        _changes(server.url, {"after": -1, "timeout": 0})  # the wait is in flight now
        _revoke(world, token)
        status, doc = _answer(waiting)
    assert status == 200
    assert doc == {"ok": True, "position": doc["position"]}
    assert doc["position"] > start


def test_remote_engine_wait_change(world: World) -> None:
    token = world.mint()
    with engine_server(world.home, world.repo) as server, RemoteEngine(server.url) as remote:
        start = remote.wait_change(-1, 0)
        assert start >= 0
        assert remote.wait_change(start, 0) == start
        moved: list[int] = []
        waiter = threading.Thread(target=lambda: moved.append(remote.wait_change(start, 30)))
        waiter.start()
        _revoke(world, token)
        waiter.join(90)
    assert moved and moved[0] > start


def test_remote_engine_wait_change_never_raises() -> None:
    """Threat: an engine outage ending the edge's session through its feed."""
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with RemoteEngine(f"http://127.0.0.1:{port}") as remote:
        assert remote.wait_change(7, 2.0) == 7
        assert remote.wait_change(-1, 0) == -1


def test_a_long_poll_does_not_hold_up_the_engines_exit(world: World) -> None:
    """SIGTERM with a wait in flight: the wait answers and the engine exits cleanly."""
    with engine_server(world.home, world.repo) as server:
        start = _changes(server.url, {"after": -1, "timeout": 0}).json()["position"]
        waiting = _send_wait(server.url, start)
        _changes(server.url, {"after": -1, "timeout": 0})  # the wait is in flight now
        server.process.terminate()
        status, doc = _answer(waiting)
        code = server.process.wait(timeout=20)
    assert (status, doc) == (200, {"ok": True, "position": start})
    assert code == 0


def test_waits_past_the_bound_are_refused_at_once_never_queued(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: a flood of long polls queued behind the bound, each outliving its timeout.

    The bound is lowered to 2 for the app under test; of four waits sent
    together, two are answered 503 before either admitted one ends.
    """
    import dataclasses

    import anyio
    from starlette.applications import Starlette

    from engine.service import Engine
    from gateway.engine_server import changes

    monkeypatch.setattr(changes, "LIMITS", dataclasses.replace(LIMITS, change_waiters=2))
    stopping = threading.Event()
    order: list[str] = []

    async def run(app: Starlette) -> list[int]:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://chit") as client:
            statuses: list[int] = []
            now = (await client.post("/v1/changes", json={"after": -1, "timeout": 0})).json()

            async def wait(name: str, timeout: float) -> None:
                answer = await client.post("/v1/changes",
                                           json={"after": now["position"], "timeout": timeout})
                statuses.append(answer.status_code)
                order.append(name)

            async with anyio.create_task_group() as tg:
                for name in ("a", "b", "c", "d"):
                    tg.start_soon(wait, name, 3.0)
            return statuses

    with Engine(world.home, world.repo) as engine:
        route = changes.changes_route(engine, allowed_hosts=None, max_request_bytes=1 << 20,
                                      stopping=stopping)
        statuses = anyio.run(run, Starlette(routes=[route]))
    assert statuses == [503, 503, 200, 200]  # refused before the admitted waits ended
    assert len(order) == 4
