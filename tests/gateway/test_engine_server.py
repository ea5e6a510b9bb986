"""``chit engine serve`` and ``chit mcp --engine``: the engine as a separate process.

Real subprocesses, a real unix socket and loopback TCP, the real HTTP client and
the official MCP client. The MCP contract tests themselves run against this
deployment too (the ``edge`` fixture); these cover what only it has: the socket,
the listener, strict requests, and an edge that holds nothing.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.shared.exceptions import MCPError

from engine import admin
from engine.admin.seed import create_repository
from engine.service import Engine
from gateway import cli, engine_server
from gateway.remote_engine import RemoteEngine, parse_engine_url
from tests.conftest import FILES, World
from tests.gateway.mcp_client import TOKEN_TEXT, payload, remote_edge_params, stop
from tests.gateway.mcp_client import engine_server as running_engine

READY = re.compile(r"chit engine: serving chit-engine/1 on (\S+)")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short folder for sockets (sun_path holds 107 bytes; pytest's tmp paths are long)."""
    path = Path(tempfile.mkdtemp(prefix="chit-t-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _serve_argv(world: World, *extra: str) -> list[str]:
    return [*world.cli(), "engine", "serve", "--repo", str(world.repo), *extra]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _client(url: str) -> httpx2.Client:
    path, base = parse_engine_url(url)
    transport = httpx2.HTTPTransport(uds=path, trust_env=False)
    return httpx2.Client(base_url=base, transport=transport, trust_env=False, timeout=30.0)


def _call_log_size(world: World) -> int:
    return sum(1 for _entry in admin.call_log_entries(world.home))


# --- the socket -------------------------------------------------------------------


def test_socket_is_0600_and_removed_on_sigterm(world: World, short_dir: Path) -> None:
    """Threat: another local user connecting to the engine's socket."""
    sock = short_dir / "e.sock"
    with running_engine(world.home, world.repo, socket_path=sock) as server:
        info = os.lstat(sock)
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == os.geteuid()
        assert "(mode 0600)" in server.output()
    assert server.process.returncode == 0
    assert not sock.exists()


def test_default_socket_is_engine_sock_in_the_home(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="chit-h-"))
    try:
        repo = tmp_path / "repo"
        create_repository(repo, FILES)
        admin.init_home(home)
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "--home", str(home), "engine", "serve",
             "--repo", str(repo)],
            stderr=subprocess.PIPE, text=True,
        )
        try:
            assert process.stderr is not None
            line = process.stderr.readline()
            assert READY.search(line), line
            assert READY.search(line).group(1) == f"unix:{home / 'engine.sock'}"
            assert stat.S_IMODE(os.lstat(home / "engine.sock").st_mode) == 0o600
        finally:
            stop(process)
            assert process.stderr is not None
            process.stderr.close()
        assert not (home / "engine.sock").exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_sigterm_right_after_the_ready_line_still_removes_the_socket(
    world: World, short_dir: Path
) -> None:
    """The ready line is printed only once SIGTERM leads to a clean exit (no stale socket)."""
    sock = short_dir / "r.sock"
    for _ in range(8):
        process = subprocess.Popen(
            _serve_argv(world, "--socket", str(sock)), stderr=subprocess.PIPE, text=True
        )
        assert process.stderr is not None
        try:
            assert READY.search(process.stderr.readline())
            process.terminate()  # at once: no request, no delay
            assert process.wait(30) == 0
        finally:
            stop(process)  # type: ignore[arg-type]
            process.stderr.close()
        assert not sock.exists()


def test_socket_group_makes_it_0660(world: World, short_dir: Path) -> None:
    import grp

    group = grp.getgrgid(os.getegid()).gr_name
    sock = short_dir / "g.sock"
    with running_engine(world.home, world.repo, "--socket-group", group, socket_path=sock):
        info = os.lstat(sock)
        assert stat.S_IMODE(info.st_mode) == 0o660 and info.st_gid == os.getegid()


def test_a_path_that_is_not_a_stale_socket_is_refused(world: World, short_dir: Path) -> None:
    """Threat: `engine serve` clobbering a file, or hijacking a live engine's socket."""
    plain = short_dir / "file"
    plain.write_text("keep me")
    refused = _run(_serve_argv(world, "--socket", str(plain)))
    assert refused.returncode == 2 and "not a socket" in refused.stderr
    assert plain.read_text() == "keep me"

    live = short_dir / "live.sock"
    with running_engine(world.home, world.repo, socket_path=live):
        second = _run(_serve_argv(world, "--socket", str(live)))
        assert second.returncode == 2 and "already serving" in second.stderr
        with _client(f"unix:{live}") as client:  # the first one still serves
            assert client.get("/v1/health").json() == {"ok": True, "api": "chit-engine/1"}

    stale = short_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))
    dead.close()  # the file stays; nobody listens
    with running_engine(world.home, world.repo, socket_path=stale), _client(
        f"unix:{stale}"
    ) as client:
        assert client.get("/v1/health").json()["ok"] is True

    too_long = short_dir / ("x" * 120)
    refused = _run(_serve_argv(world, "--socket", str(too_long)))
    assert refused.returncode == 2 and "too long" in refused.stderr


@pytest.mark.parametrize(
    "listen", ["0.0.0.0:0", "[::]:0", "192.0.2.1:8080", "example.com:80", "8080", "127.0.0.1:x"]
)
def test_non_loopback_or_malformed_listen_is_refused(
    world: World, listen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Threat: tokens in clear text on a network interface."""
    status = cli.main(["--home", str(world.home), "engine", "serve", "--repo", str(world.repo),
                       "--listen", listen])
    assert status == 2
    err = capsys.readouterr().err
    assert "loopback" in err or "HOST:PORT" in err


def test_an_unusable_home_or_repository_never_binds(world: World, short_dir: Path) -> None:
    sock = short_dir / "n.sock"
    refused = _run(
        [*world.cli(), "engine", "serve", "--repo", str(short_dir), "--socket", str(sock)]
    )
    assert refused.returncode == 2 and not sock.exists()
    empty = short_dir / "empty-home"
    empty.mkdir()
    refused = _run([sys.executable, "-m", "gateway.cli", "--home", str(empty), "engine", "serve",
                    "--repo", str(world.repo), "--socket", str(sock)])
    assert refused.returncode == 2 and "chit init" in refused.stderr and not sock.exists()


# --- loopback TCP -----------------------------------------------------------------


def test_loopback_tcp_serves_an_edge_and_checks_host(world: World, tmp_path: Path) -> None:
    """Threat: DNS rebinding, or a browser page, driving a loopback engine."""
    process = subprocess.Popen(
        _serve_argv(world, "--listen", "127.0.0.1:0"), stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    try:
        match = READY.search(process.stderr.readline())
        assert match, "no ready line"
        url = match.group(1)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
        port = url.rsplit(":", 1)[1]
        with httpx2.Client(base_url=url, trust_env=False, timeout=30) as client:
            assert client.get("/v1/health").json()["ok"] is True
            assert client.get("/v1/health", headers={"host": f"localhost:{port}"}).status_code \
                == 200
            rebound = client.get("/v1/health", headers={"host": f"evil.example:{port}"})
            assert rebound.status_code == 403
            assert rebound.json()["error"]["error"] == "invalid_argument"
            browser = client.post("/v1/offer", json={"token": "chit_x"},
                                  headers={"origin": "http://evil.example"})
            assert browser.status_code == 403

        edge_home = tmp_path / "edge-home"
        edge_home.mkdir()
        token = world.mint()

        async def body(client: Client) -> Any:
            await client.list_tools()
            await client.call_tool("write_file", {"path": "src/app.py", "content": "tcp\n"})
            return payload(await client.call_tool("commit", {"message": "over tcp"}))

        async def go() -> Any:
            async with Client(remote_edge_params(url, edge_home, token)) as client:
                return await body(client)

        committed = anyio.run(go)
        assert world.refs()["refs/heads/agent/alice"] == committed["commit"]
    finally:
        stop(process)
        process.stderr.close()


# --- strict requests ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    """One engine for the request-parsing cases (a 64 KiB request limit)."""
    base = tmp_path_factory.mktemp("served")
    world = World(home=base / "home", repo=base / "repo",
                  main_id=create_repository(base / "repo", FILES))
    admin.init_home(world.home)
    with running_engine(world.home, world.repo, "--max-request-bytes", "65536",
                        verbose=True) as server:
        yield world, server.url
    assert not TOKEN_TEXT.search(server.output())


def _nested(depth: int) -> bytes:
    return b'{"token":"t","tool":"status","session":"s","arguments":' + (
        b'{"a":' * depth + b"1" + b"}" * depth
    ) + b"}"


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/offer", b'{"token":"a","token":"b"}', 400, "invalid_argument"),
        ("/v1/offer", b'{"token":NaN}', 400, "invalid_argument"),
        ("/v1/offer", b'{"token":Infinity}', 400, "invalid_argument"),
        ("/v1/offer", b'["token"]', 400, "invalid_argument"),
        ("/v1/offer", b'"chit_x"', 400, "invalid_argument"),
        ("/v1/offer", b"", 400, "invalid_argument"),
        ("/v1/offer", b'{"token":"a"', 400, "invalid_argument"),
        ("/v1/offer", b'{"token":"a","extra":1}', 400, "invalid_argument"),
        ("/v1/offer", b"{}", 400, "invalid_argument"),
        ("/v1/offer", b'{"token":5}', 400, "invalid_argument"),
        ("/v1/offer", b'{"token":"\\ud800"}', 400, "invalid_argument"),
        ("/v1/offer", b'{"token":"\xff"}', 400, "invalid_argument"),
        ("/v1/offer", b'\xef\xbb\xbf{"token":"a"}', 400, "invalid_argument"),
        ("/v1/offer", '{"token":"a"}'.encode("utf-16"), 400, "invalid_argument"),
        ("/v1/warning", b'{"token":"a","extra":1}', 400, "invalid_argument"),
        ("/v1/warning", b'{"token":"a","session":"s"}', 400, "invalid_argument"),
        ("/v1/warning", b"{}", 400, "invalid_argument"),
        ("/v1/warning", b'{"token":"a","repo":5}', 400, "invalid_argument"),
        ("/v1/invoke", b'{"token":"t","tool":"status"}', 400, "invalid_argument"),
        ("/v1/invoke", b'{"token":"t","tool":"status","session":null}', 400, "invalid_argument"),
        ("/v1/invoke", b'{"token":"t","tool":"status","session":"s","arguments":[]}', 400,
         "invalid_argument"),
        ("/v1/invoke", b'{"token":"t","tool":"status","session":"s","offered_catalog_hash":5}',
         400, "invalid_argument"),
        ("/v1/invoke", b'{"token":"t","tool":7,"session":"s"}', 400, "invalid_argument"),
        ("/v1/invoke", b'{"token":"t","tool":"status","session":"s","arguments":{"n":'
         + b"9" * 5000 + b"}}", 400, "invalid_argument"),
        ("/v1/invoke", _nested(70), 400, "invalid_argument"),
        ("/v1/invoke", b'{"token":"' + b"a" * 70000 + b'"}', 413, "limit_exceeded"),
    ],
)
def test_requests_are_parsed_strictly_and_reach_no_engine(
    served: tuple[World, str], path: str, body: bytes, status: int, code: str
) -> None:
    """Threat: parser differentials and oversized bodies between edge and engine."""
    world, url = served
    before = _call_log_size(world)
    with _client(url) as client:
        answer = client.post(path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status
    assert answer.json() == {"ok": False, "error": answer.json()["error"]}
    assert answer.json()["error"]["error"] == code
    assert isinstance(answer.json()["error"]["message"], str)
    assert answer.headers["cache-control"] == "no-store"
    assert _call_log_size(world) == before  # the engine never saw it


def test_transport_refusals_have_the_same_shape(served: tuple[World, str]) -> None:
    _world, url = served
    with _client(url) as client:
        cases = [
            (client.post("/v1/offer", content=b'{"token":"a"}',
                         headers={"content-type": "text/plain"}), 415, "invalid_argument"),
            (client.post("/v1/offer", json={"token": "a"}, headers={"origin": "null"}), 403,
             "invalid_argument"),
            (client.get("/v1/offer"), 405, "invalid_argument"),
            (client.post("/v2/offer", json={"token": "a"}), 404, "not_found"),
            (client.get("/"), 404, "not_found"),
            (client.post("/v1/offer", content=b"x" * 70000,
                         headers={"content-type": "application/json"}), 413, "limit_exceeded"),
        ]
        for response, status, code in cases:
            assert response.status_code == status, response.text
            assert response.json()["ok"] is False
            assert response.json()["error"]["error"] == code
        assert cases[2][0].headers["allow"] == "POST"


def test_answers_are_the_engines_own(served: tuple[World, str]) -> None:
    world, url = served
    token = world.mint(ops="read")
    local = Engine(world.home, world.repo)
    with RemoteEngine(url) as remote:
        assert remote.offer(token) == local.offer(token)
        assert remote.offer(token + "x") == local.offer(token + "x")
        # A healthy engine has no vital-sign line for the instructions (docs/vital-signs.md).
        assert remote.warning(token) is None and local.warning(token) is None
        assert remote.warning(token + "x") is None
        for tool, arguments in [("read_file", {"path": "src/app.py"}),
                                ("read_file", {"path": "docs/guide.md"}),
                                ("write_file", {"path": "src/x", "content": "x"})]:
            assert remote.invoke(token, tool, arguments, session="cmp-r") == local.invoke(
                token, tool, arguments, session="cmp-l"
            )
        assert remote.invoke(token, "status", None, session="bad id!")["error"]["error"] == \
            "invalid_argument"


# --- the edge -------------------------------------------------------------------------


def _edge_pid(marker: str) -> int:
    """The ``chit mcp --engine`` process whose command line holds ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--engine" in argv and marker.encode() in b" ".join(argv):
            return int(entry.name)
    raise AssertionError("no edge process found")


def test_the_edge_holds_no_keys_and_no_repository(world: World, short_dir: Path) -> None:
    """Threat: a compromised edge (or agent host) reading the keyring or the repository."""
    sock = short_dir / "k.sock"
    edge_home = short_dir / "no-such-home"  # not even created: the edge needs none
    token = world.mint()
    with running_engine(world.home, world.repo, socket_path=sock):

        async def go() -> dict[str, Any]:
            async with Client(remote_edge_params(f"unix:{sock}", edge_home, token)) as client:
                await client.list_tools()
                scope = payload(await client.call_tool("effective_scope", {}))
                pid = _edge_pid(str(sock))
                maps = Path(f"/proc/{pid}/maps").read_text()
                opened = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(
                    f"/proc/{pid}/fd")]
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                return {"scope": scope, "maps": maps, "opened": opened, "environ": environ}

        seen = anyio.run(go)
    assert seen["scope"]["agent"] == "alice"
    assert "pygit2" not in seen["maps"] and "libgit2" not in seen["maps"]
    assert not [p for p in seen["opened"] if p.startswith((str(world.home), str(world.repo)))]
    assert str(world.home).encode() not in seen["environ"]
    assert not edge_home.exists()


def test_edge_flags_that_need_an_engine_here_are_refused(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHIT_TOKEN", world.mint())
    with pytest.raises(SystemExit) as both:
        cli.main(["mcp", "--repo", str(world.repo), "--engine", "unix:x"])
    assert both.value.code == 2 and "not allowed with" in capsys.readouterr().err
    assert cli.main(["mcp", "--engine", "unix:/x", "--read-only"]) == 2
    assert "--read-only" in capsys.readouterr().err
    for url in ["http://192.0.2.1:80", "https://127.0.0.1:1", "http://127.0.0.1", "unix:"]:
        assert cli.main(["mcp", "--engine", url]) == 2, url
        assert "--engine" in capsys.readouterr().err


def test_edge_survives_an_engine_that_is_down_then_back(world: World, short_dir: Path) -> None:
    """Threat: an engine outage crashing agents' sessions or leaking exception text."""
    sock = short_dir / "d.sock"
    edge_home = short_dir / "edge"
    edge_home.mkdir()
    token = world.mint()
    out: dict[str, Any] = {}

    async def go() -> None:
        async with Client(remote_edge_params(f"unix:{sock}", edge_home, token)) as client:
            try:
                await client.list_tools()
            except MCPError as exc:
                out["listed"] = exc.error
            down = await client.call_tool("status", {})
            out["down"] = (down.is_error, payload(down))
            with running_engine(world.home, world.repo, socket_path=sock) as server:
                await client.list_tools()
                out["up"] = payload(await client.call_tool("effective_scope", {}))
                await client.call_tool("write_file", {"path": "src/app.py", "content": "1\n"})
                server.process.kill()  # no clean shutdown: the socket file stays
                server.process.wait(10)
                killed = await client.call_tool("status", {})
                out["killed"] = (killed.is_error, payload(killed))
            with running_engine(world.home, world.repo, socket_path=sock):
                # A new engine process: the staged change was saved, the session resumes.
                out["back"] = payload(await client.call_tool("status", {}))
                await client.call_tool("write_file", {"path": "src/app.py", "content": "2\n"})
                out["commit"] = payload(await client.call_tool("commit", {"message": "back"}))

    anyio.run(go)
    assert out["listed"].code == -32001
    assert out["listed"].data == {"error": "internal_error", "message": "the engine is unreachable"}
    assert out["down"] == (True, {"error": "internal_error",
                                  "message": "the engine is unreachable"})
    assert out["up"]["agent"] == "alice"
    assert out["killed"][0] and out["killed"][1]["error"] == "internal_error"
    assert out["back"]["staged"] == [{"path": "src/app.py", "change": "modified"}]
    assert world.refs()["refs/heads/agent/alice"] == out["commit"]["commit"]


# --- the client against a misbehaving server -------------------------------------------


class _OddEngine:
    """An engine whose answers break the API's shape (an edge must not trust them blindly)."""

    def __init__(self) -> None:
        self.offer_answer: dict[str, Any] = {}
        self.invoke_answer: dict[str, Any] = {}

    def offer(self, token: str, *, repo: str | None = None) -> dict[str, Any]:
        return self.offer_answer

    def invoke(self, token: str, tool: str, arguments: dict[str, Any] | None, *, session: str,
               offered_catalog_hash: str | None = None,
               repo: str | None = None) -> dict[str, Any]:
        return self.invoke_answer


@pytest.fixture
def odd(short_dir: Path) -> Iterator[tuple[_OddEngine, str]]:
    engine = _OddEngine()
    listener = engine_server.bind_unix(short_dir / "odd.sock")
    app = engine_server.create_app(engine)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None,
                                           access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener.sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        yield engine, listener.url
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"ok": True},
        {"ok": True, "tools": "x", "catalog_hash": "h"},
        {"ok": True, "tools": [{"name": "x"}], "catalog_hash": "h"},
        {"ok": "yes", "error": {"error": "x", "message": "m"}},
        {"ok": False, "error": "token_expired"},
    ],
)
def test_an_answer_off_the_api_is_internal_error(
    odd: tuple[_OddEngine, str], answer: dict[str, Any]
) -> None:
    engine, url = odd
    engine.offer_answer = answer
    engine.invoke_answer = answer
    with RemoteEngine(url) as remote:
        for got in (remote.offer("t"), remote.invoke("t", "status", {}, session="s")):
            assert got == {"ok": False, "error": {
                "error": "internal_error", "message": "the engine's answer could not be read"}}


def test_the_client_relays_good_answers_unchanged(odd: tuple[_OddEngine, str]) -> None:
    engine, url = odd
    engine.invoke_answer = {"ok": True, "result": {"x": [1, "é", None]}}
    engine.offer_answer = {"ok": False, "error": {"error": "token_expired", "message": "m",
                                                  "expired_at": 5}}
    with RemoteEngine(url) as remote:
        assert remote.invoke("t", "status", None, session="s") == engine.invoke_answer
        assert remote.offer("t") == engine.offer_answer


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("unix:/run/chit/engine.sock", ("/run/chit/engine.sock", "http://chit-engine")),
        ("unix:///run/e.sock", ("/run/e.sock", "http://chit-engine")),
        ("unix:rel.sock", ("rel.sock", "http://chit-engine")),
        ("http://127.0.0.1:8700", (None, "http://127.0.0.1:8700")),
        ("http://127.8.9.1:1", (None, "http://127.8.9.1:1")),
        ("http://[::1]:8700/", (None, "http://[::1]:8700")),
        ("http://localhost:8700", (None, "http://localhost:8700")),
    ],
)
def test_engine_urls(url: str, expected: tuple[str | None, str]) -> None:
    assert parse_engine_url(url) == expected


@pytest.mark.parametrize(
    "url",
    ["unix:", "unix:a\x00b", "http://10.0.0.1:80", "http://example.com:80", "https://127.0.0.1:1",
     "http://127.0.0.1", "http://127.0.0.1:99999", "http://u:p@127.0.0.1:1",
     "http://127.0.0.1:1/api", "http://127.0.0.1:1/?q", "/run/e.sock"],
)
def test_engine_urls_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_engine_url(url)


def test_only_a_verified_token_lets_an_edge_be_seen(world: World, short_dir: Path) -> None:
    """Threat: a caller without a good token filling or flooding doctor's list of edges."""
    token = world.mint()
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    sock = short_dir / "e.sock"
    with running_engine(world.home, world.repo, socket_path=sock) as server, \
            _client(server.url) as http:
        for text, label in ((forged, "forged-edge/1"), ("nope", "garbage-edge/2"),
                            (token, "good-edge/3")):
            http.post("/v1/offer", json={"token": text}, headers={"chit-edge": label})
    done = subprocess.run([*world.cli(), "doctor", "--json"], capture_output=True, text=True,
                          timeout=120, check=False)
    labels = {row["label"] for row in json.loads(done.stdout)["seen"] if row["kind"] == "edge"}
    assert labels == {"good-edge/3"}


def test_a_refused_unix_connect_closes_its_socket(tmp_path: Path) -> None:
    """A dead engine's socket file refuses every connect; no refused socket may linger."""
    path = tmp_path / "engine.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.close()  # the file stays; connecting to it is refused, as after a SIGKILL
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with RemoteEngine(f"unix:{path}") as remote:
            for _ in range(3):
                assert remote.health() == {"ok": False, "error": {
                    "error": "internal_error", "message": "the engine is unreachable"}}
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == []
