"""Two repositories behind one ``chit engine serve``, reached through every real edge.

A token minted for ``app`` must never act on ``lib`` (same keyring, same paths),
whichever way an edge names the repository: stdio ``chit mcp --engine URL
--repo-name``, HTTP ``/repos/NAME/mcp`` (one edge process, and ``--workers
2``), or a raw ``chit-engine/1`` request. The official MCP client drives the
edges; git is real, on disk.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pygit2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from engine.admin.seed import create_repository
from tests.conftest import FILES, World
from tests.gateway import procs
from tests.gateway.http_client import Edge, http_client, start, stop
from tests.gateway.mcp_client import (
    TOKEN_TEXT,
    EngineServer,
    engine_server,
    payload,
    remote_edge_params,
)

MODERN = "2026-07-28"
JSON_HEADERS = {"Accept": "application/json, text/event-stream",
                "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}


@dataclass
class Served:
    """The engine serving ``app`` and ``lib``, and what the tests need around it."""

    world: World
    app: Path
    lib: Path
    engine: EngineServer
    edge_home: Path

    def mint(self, repos: list[str] | None, **kw: Any) -> str:
        return self.world.mint(repos=repos, **kw)

    def lane(self, path: Path, agent: str = "alice") -> str | None:
        refs = pygit2.Repository(str(path)).references
        name = f"refs/heads/agent/{agent}"
        return str(refs[name].target) if name in refs else None

    def stdio(self, token: str, *extra: str) -> Any:
        return remote_edge_params(self.engine.url, self.edge_home, token, *extra)


@pytest.fixture
def served(world: World, tmp_path: Path) -> Iterator[Served]:
    app, lib = tmp_path / "app", tmp_path / "lib.git"
    create_repository(app, {**FILES, "src/app.py": b"APP = 1\n"})
    create_repository(lib, {**FILES, "src/app.py": b"LIB = 1\n"})
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    with engine_server(world.home, app, "--repo", str(lib), verbose=True) as engine:
        yield Served(world, app, lib, engine, edge_home)
    assert not TOKEN_TEXT.search(engine.output()), "the engine logged a token"
    assert list(edge_home.iterdir()) == []


def _stdio(params: Any, body: Any) -> Any:
    async def go() -> Any:
        async with Client(params) as client:
            return await body(client)

    return anyio.run(go)


def _refused(client_call: Any) -> Any:
    """Run an awaitable of the client; the data of the MCP error it raises, or its payload."""

    async def go() -> Any:
        try:
            result = await client_call()
        except MCPError as exc:
            return exc.error.data
        return payload(result)

    return go()


# --- stdio: chit mcp --engine URL --repo-name NAME ---------------------------------


def test_stdio_repo_name_picks_the_repository(served: Served) -> None:
    token = served.mint(["app", "lib"])

    async def body(client: Client) -> Any:
        await client.list_tools()
        read = payload(await client.call_tool("read_file", {"path": "src/app.py"}))
        await client.call_tool("write_file", {"path": "src/new.py", "content": "x = 1\n"})
        landed = payload(await client.call_tool("commit", {"message": "new"}))
        scope = payload(await client.call_tool("effective_scope", {}))
        return read["content"], landed["commit"], scope["repo"]

    content, commit, repo = _stdio(served.stdio(token, "--repo-name", "lib"), body)
    assert (content, repo) == ("LIB = 1\n", "lib")
    assert served.lane(served.lib) == commit and served.lane(served.app) is None


def test_stdio_repo_name_outside_the_token_is_refused(served: Served) -> None:
    """Threat: an agent whose host starts `chit mcp --repo-name lib` with a token for `app`
    acting on `lib`."""
    token = served.mint(["app"])

    async def body(client: Client) -> Any:
        listed = await _refused(client.list_tools)
        read = await _refused(lambda: client.call_tool("read_file", {"path": "src/app.py"}))
        wrote = await _refused(lambda: client.call_tool(
            "write_file", {"path": "src/app.py", "content": "pwned"}))
        return listed, read, wrote

    for name in ("lib", "LIB", "Lib", "nope"):
        listed, read, wrote = _stdio(served.stdio(token, "--repo-name", name), body)
        assert listed["error"] == "repo_outside_scope", name
        assert read["error"] == wrote["error"] == "repo_outside_scope", name
    # Names that are no repository name never reach the engine: the edge refuses to start.
    for name in ("../lib", "lib/..", "l?b", "*", "lib\x01", "a" * 65, ""):
        params = served.stdio(token, "--repo-name", name)
        out = subprocess.run([params.command, *params.args], env=params.env, input="",
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 2 and "--repo-name" in out.stderr, name
    assert served.lane(served.lib) is None
    assert pygit2.Repository(str(served.lib)).references["refs/heads/main"]


def test_stdio_without_repo_name_on_two_repositories_is_refused(served: Served) -> None:
    token = served.mint(["*"])

    async def body(client: Client) -> Any:
        return await _refused(client.list_tools)

    assert _stdio(served.stdio(token), body)["error"] == "repo_required"


def test_a_token_without_repos_is_refused_on_a_two_repository_engine(served: Served) -> None:
    """Threat: a token minted before repositories had names, for an engine that then got a
    second repository, acting on either."""
    legacy = served.mint(None)

    async def body(client: Client) -> Any:
        return await _refused(lambda: client.call_tool("read_file", {"path": "src/app.py"}))

    for name in ("app", "lib"):
        assert _stdio(served.stdio(legacy, "--repo-name", name), body)["error"] == (
            "repo_outside_scope")


def test_repo_name_needs_engine_and_stdio(world: World) -> None:
    base = [*world.cli(), "mcp"]
    for argv in (["--repo", str(world.repo), "--repo-name", "repo"],
                 ["--engine", "unix:/nonexistent", "--http", "127.0.0.1:0", "--repo-name", "x"]):
        out = subprocess.run([*base, *argv], capture_output=True, text=True, timeout=60,
                             check=False, env={"CHIT_TOKEN": "chit_x", "PATH": "/usr/bin"})
        assert out.returncode == 2 and "--repo-name" in out.stderr


# --- chit-engine/1 carries the repository ---------------------------------------------


def _engine_post(engine: EngineServer, path: str, body: dict[str, Any]) -> httpx2.Response:
    transport = httpx2.HTTPTransport(uds=engine.url.removeprefix("unix:"), trust_env=False)
    with httpx2.Client(transport=transport, trust_env=False, timeout=30) as client:
        return client.post(f"http://chit-engine{path}", json=body)


def test_the_engine_api_carries_the_repository(served: Served) -> None:
    """Threat: a raw client of the engine socket naming the other repository, or
    smuggling a name the edge would have refused."""
    token = served.mint(["app"])
    ok = _engine_post(served.engine, "/v1/offer", {"token": token, "repo": "app"}).json()
    assert ok["ok"] is True
    other = _engine_post(served.engine, "/v1/offer", {"token": token, "repo": "lib"}).json()
    assert other["error"]["error"] == "repo_outside_scope"
    call = _engine_post(served.engine, "/v1/invoke", {
        "token": token, "tool": "read_file", "arguments": {"path": "src/app.py"},
        "session": "raw", "repo": "lib"}).json()
    assert call["error"]["error"] == "repo_outside_scope"
    none = _engine_post(served.engine, "/v1/offer", {"token": token}).json()
    assert none["error"]["error"] == "repo_required"
    mistyped = _engine_post(served.engine, "/v1/offer", {"token": token, "repo": ["lib"]})
    assert mistyped.status_code == 400 and mistyped.json()["error"]["fields"] == ["repo"]


# --- HTTP: /repos/NAME/mcp ----------------------------------------------------------------


@contextmanager
def http_edge(served: Served, *extra: str) -> Iterator[Edge]:
    edge = start([sys.executable, "-m", "gateway.cli", "--home", str(served.edge_home), "mcp",
                  "--engine", served.engine.url, "--http", "127.0.0.1:0",
                  "--watch-interval", "0.2", *extra])
    try:
        yield edge
    finally:
        stop(edge)


def _raw(edge: Edge, target: str, token: str | None) -> tuple[int, bytes]:
    """POST ``initialize`` to ``target`` exactly as written (no client normalises the path)."""
    host, _, port = edge.authority.rpartition(":")
    body = json.dumps(INIT).encode()
    lines = [f"POST {target} HTTP/1.1", f"Host: {edge.authority}",
             "Accept: application/json, text/event-stream", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        size, _, rest = rest.partition(b"\r\n")
        rest = rest[: int(size, 16)]
    return status, rest


def test_http_each_repository_at_its_path(served: Served) -> None:
    token = served.mint(["app", "lib"])

    async def go(edge: Edge) -> Any:
        out = []
        for name in ("app", "lib"):
            url = edge.origin + f"/repos/{name}/mcp"
            for mode in ("legacy", MODERN):
                async with http_client(url, token, mode=mode) as (client, _):
                    await client.list_tools()
                    read = payload(await client.call_tool("read_file", {"path": "src/app.py"}))
                    out.append((name, mode, read["content"]))
            async with http_client(url, token) as (client, _):
                await client.list_tools()
                await client.call_tool("write_file", {"path": f"src/{name}_x.py",
                                                      "content": "x = 1\n"})
                out.append(payload(await client.call_tool("commit", {"message": name})))
        return out

    with http_edge(served) as edge:
        got = anyio.run(go, edge)
    assert [g for g in got if isinstance(g, tuple)] == [
        ("app", "legacy", "APP = 1\n"), ("app", MODERN, "APP = 1\n"),
        ("lib", "legacy", "LIB = 1\n"), ("lib", MODERN, "LIB = 1\n")]
    commits = [g["commit"] for g in got if isinstance(g, dict)]
    assert served.lane(served.app) == commits[0] and served.lane(served.lib) == commits[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_http_path_of_another_repository_is_refused(served: Served, workers: int) -> None:
    """Threat: an agent pointing its MCP host at /repos/lib/mcp with a token for `app`,
    through a single edge process or edge workers that proxy to each other."""
    token = served.mint(["app"])
    extra = ("--workers", str(workers)) if workers > 1 else ()

    async def go(edge: Edge) -> Any:
        url = edge.origin + "/repos/lib/mcp"
        async with http_client(url, token, mode=MODERN) as (client, _):
            listed = await _refused(client.list_tools)
            called = await _refused(lambda: client.call_tool(
                "write_file", {"path": "src/app.py", "content": "pwned"}))
        async with http_client(edge.origin + "/repos/app/mcp", token, mode=MODERN) as (
                client, _):
            await client.list_tools()
            mine = payload(await client.call_tool("effective_scope", {}))
        return listed, called, mine

    with http_edge(served, *extra) as edge:
        if workers > 1:
            procs.wait_for(lambda: len(procs.worker_indexes(edge.process.pid)) == 2,
                           "two edge workers")
        with httpx2.Client(timeout=30) as http:
            legacy = http.post(edge.origin + "/repos/lib/mcp", json=INIT,
                               headers=JSON_HEADERS | {"Authorization": f"Bearer {token}"})
        listed, called, mine = anyio.run(go, edge)
    assert legacy.status_code == 403
    assert legacy.json()["error"]["data"]["error"] == "repo_outside_scope"
    assert listed["error"] == called["error"] == "repo_outside_scope"
    assert mine["repo"] == "app"
    assert served.lane(served.lib) is None


def test_http_unknown_and_invalid_names_are_one_404(served: Served) -> None:
    """Threat: probing the edge for which repositories exist, or reaching a repository
    through a crafted path (traversal, an encoded slash, NUL, glob characters)."""
    wide, narrow = served.mint(["*"]), served.mint(["app"])
    with http_edge(served) as edge:
        unknown = _raw(edge, "/repos/nope/mcp", wide)
        invalid = [_raw(edge, f"/repos/{name}/mcp", token)
                   for name in ("..", ".", "%2E%2E", "app%2F..%2Flib", "app%00", "l%3Fb",
                                "*", "a%20b", ".hidden", "x" * 65)
                   for token in (wide, narrow, None)]
        outside = _raw(edge, "/repos/nope/mcp", narrow)
        outside_served = _raw(edge, "/repos/lib/mcp", narrow)
        slashed = _raw(edge, "/repos/app/../lib/mcp", wide)
        bare = _raw(edge, "/mcp", wide)
        anonymous = _raw(edge, "/repos/lib/mcp", None)
    assert unknown[0] == 404
    assert json.loads(unknown[1])["error"]["data"] == {
        "error": "not_found", "message": "no such repository"}
    for status, body in invalid:
        assert (status, body) == unknown
    assert slashed == unknown  # never the lib repository
    # Outside the token's repos: the same refusal whether or not the repository exists.
    assert outside[0] == outside_served[0] == 403
    assert json.loads(outside[1])["error"]["data"]["error"] == "repo_outside_scope"
    assert outside[1] == outside_served[1]
    assert bare[0] == 404 and json.loads(bare[1])["error"]["data"]["error"] == "repo_required"
    assert anonymous[0] == 401
    assert b"nope" not in unknown[1] and b"lib" not in outside[1]


def test_http_a_session_stays_at_its_repository(served: Served) -> None:
    """Threat: a session opened at /repos/app/mcp used at /repos/lib/mcp to act on `lib`."""
    token = served.mint(["app", "lib"])
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    with http_edge(served) as edge, httpx2.Client(timeout=30) as http:
        auth = JSON_HEADERS | {"Authorization": f"Bearer {token}"}
        opened = http.post(edge.origin + "/repos/app/mcp", json=INIT, headers=auth)
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"],
                   "MCP-Protocol-Version": "2025-11-25"}
        http.post(edge.origin + "/repos/app/mcp", headers=auth | session,
                  json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        there = http.post(edge.origin + "/repos/app/mcp", json=listing, headers=auth | session)
        elsewhere = http.post(edge.origin + "/repos/lib/mcp", json=listing,
                              headers=auth | session)
    assert there.status_code == 200 and "write_file" in there.text
    assert elsewhere.status_code == 404


def test_http_single_repository_engine_serves_mcp_and_its_path(world: World) -> None:
    token = world.mint()  # no repos caveat: good on this one-repository engine

    async def go(edge: Edge) -> Any:
        out = []
        for path in ("/mcp", "/repos/repo/mcp"):
            async with http_client(edge.origin + path, token) as (client, _):
                await client.list_tools()
                out.append(payload(await client.call_tool("effective_scope", {}))["repo"])
        return out

    edge = start([*world.cli(), "mcp", "--repo", str(world.repo), "--http", "127.0.0.1:0"])
    try:
        assert anyio.run(go, edge) == ["repo", "repo"]
        with httpx2.Client(timeout=30) as http:
            meta = http.get(edge.origin + "/.well-known/oauth-protected-resource/repos/repo/mcp")
            other = http.post(edge.origin + "/repos/other/mcp", json=INIT,
                              headers=JSON_HEADERS | {"Authorization": f"Bearer {token}"})
    finally:
        stop(edge)
    assert meta.json()["resource"] == edge.origin + "/repos/repo/mcp"
    assert other.status_code == 403  # outside what this token is good for


# --- chit engine serve: configuration -----------------------------------------------------


def test_engine_serve_reads_repo_tables_and_workers_keep_repositories_apart(
    world: World, tmp_path: Path
) -> None:
    """``[[repo]]`` tables in engine.toml, two engine workers: each session in its repository."""
    app, lib = tmp_path / "app", tmp_path / "lib.git"
    create_repository(app, {**FILES, "src/app.py": b"APP = 1\n"})
    create_repository(lib, {**FILES, "src/app.py": b"LIB = 1\n"})
    (world.home / "engine.toml").write_text(
        f'[[repo]]\nname = "web"\npath = "{app}"\n\n[[repo]]\npath = "{lib}"\n')
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    token = world.mint(repos=["web", "lib"])

    async def body(client: Client) -> Any:
        await client.list_tools()
        await client.call_tool("write_file", {"path": "src/w.py", "content": "w = 1\n"})
        status = payload(await client.call_tool("status", {}))
        landed = payload(await client.call_tool("commit", {"message": "w"}))
        return [e["path"] for e in status["staged"]], landed["commit"]

    with engine_server(world.home, None, "--workers", "2") as engine:
        for name, path in (("web", app), ("lib", lib)):
            params = remote_edge_params(engine.url, edge_home, token, "--repo-name", name)
            staged, commit = _stdio(params, body)
            assert staged == ["src/w.py"]
            refs = pygit2.Repository(str(path)).references
            assert str(refs["refs/heads/agent/alice"].target) == commit


@pytest.mark.parametrize("args", [
    ["--repo", "a=REPO", "--repo", "A=OTHER"],
    ["--repo", "a=REPO", "--repo", "b=REPO"],
    ["--repo", "../x=REPO"],
    ["--repo", "a b=REPO"],
])
def test_engine_serve_refuses_ambiguous_repositories(
    world: World, tmp_path: Path, args: list[str]
) -> None:
    other = tmp_path / "other"
    create_repository(other, FILES)
    argv = [a.replace("REPO", str(world.repo)).replace("OTHER", str(other)) for a in args]
    out = subprocess.run([*world.cli(), "engine", "serve", *argv, "--socket",
                          str(tmp_path / "e.sock"), "--workers", "1"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.startswith("chit:")
    assert not (tmp_path / "e.sock").exists()
