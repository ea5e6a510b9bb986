"""Stopping a server leaves nothing behind: every process ends, the host's stderr reaches EOF.

Threat: a host (an MCP client, a supervisor, a shell pipeline) that stops chit
with SIGTERM or Ctrl-C and reads its stderr until EOF hangs for ever if any
process of chit's tree (the semantic index's parse pool, its forkserver, the
resource tracker) outlives the server and keeps the pipe open; surviving
workers also keep repository data in memory. Each server is started in its
own process group, made to start its parse pool with a semantic call, then
signalled; the test then checks the process tree and the group are empty and
that stderr ends, without a traceback. See docs/deployment.md, "Stopping".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from engine import admin
from engine.admin.seed import create_repository
from engine.limits import LIMITS
from gateway.demo import stdio_server_params
from tests.gateway import procs
from tests.gateway.http_client import READY, http_client
from tests.gateway.mcp_client import payload, remote_edge_params

EXIT_BOUND = 60.0  # seconds a signalled server may take before the test fails
FILES = {f"src/m{i:03}.py": f"def f{i}():\n    return {i}\n".encode()
         for i in range(2 * LIMITS.pool_min_files)}


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path, str]:
    """A home, a repository large enough for the parse pool, and a read token."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    create_repository(repo, FILES)
    admin.init_home(home)
    token = admin.mint_token(home, agent="alice", operations=["read"], paths=["src/**"],
                             ttl_seconds=900)["token"]
    return home, repo, str(token)


def group(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group ``pgid``."""
    found = []
    for pid in procs.pids():
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = Path(f"/proc/{pid}/stat").read_text()
            fields = raw[raw.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(pid)
    return found


def read_to_eof(stream: BinaryIO) -> bytes | None:
    """Everything left on ``stream``, or ``None`` if EOF does not come within the bound."""
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(stream.read()), daemon=True)
    reader.start()
    reader.join(EXIT_BOUND)
    return None if reader.is_alive() else out[0]


def wait_ready(stream: BinaryIO, marker: bytes) -> str:
    """Read stderr until the ready line; its text after ``marker``."""
    seen = b""
    while True:
        line = stream.readline()
        if not line:
            raise AssertionError(f"the server did not start: {seen.decode(errors='replace')}")
        seen += line
        if marker in line:
            return line.split(marker, 1)[1].decode().strip()


def semantic_call(client: Client) -> Any:
    async def call() -> Any:
        return payload(await client.call_tool("search_symbols", {"query": "f1"}))
    return call()


def check_stopped(pid: int, tree: dict[int, int], stderr: bytes | None) -> None:
    """No process of the tree or of the group is left, stderr ended, with no traceback."""
    assert tree, "the parse pool was never started: the test would prove nothing"
    assert stderr is not None, "stderr never reached EOF: a process still holds it"
    leftover = procs.alive(tree) + group(pid)
    for stray in leftover:  # do not leave them to the next test
        with contextlib.suppress(OSError):
            os.kill(stray, signal.SIGKILL)
    assert leftover == []
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "leaked semaphore" not in text, text


@contextlib.contextmanager
def started(argv: list[str], marker: bytes) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None
    try:
        yield process, wait_ready(process.stderr, marker)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(EXIT_BOUND)
        process.stderr.close()


def stop(process: subprocess.Popen[bytes], sig: signal.Signals) -> dict[int, int]:
    """Signal the server (SIGINT to its whole group, as a terminal's Ctrl-C does)."""
    tree = procs.descendants(process.pid)
    if sig == signal.SIGINT:
        os.killpg(process.pid, sig)
    else:
        os.kill(process.pid, sig)
    return tree


SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_stdio_server_leaves_nothing(site: tuple[Path, Path, str], sig: signal.Signals) -> None:
    home, repo, token = site
    read_end, write_end = os.pipe()
    errlog = os.fdopen(write_end, "w")
    found: dict[str, Any] = {}

    async def body() -> None:
        # The official client starts the server in a session (process group) of its own.
        async with Client(stdio_client(stdio_server_params(home, repo, token),
                                       errlog=errlog)) as client:
            errlog.close()  # only the server's tree holds the pipe now
            servers = [p for p in procs.children(os.getpid())
                       if b"gateway.cli" in Path(f"/proc/{p}/cmdline").read_bytes()]
            assert len(servers) == 1
            pid = found["pid"] = servers[0]
            assert (await semantic_call(client))["symbols"]
            found["tree"] = procs.descendants(pid)
            if sig == signal.SIGINT:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
            with open(read_end, "rb") as stream:
                found["stderr"] = await anyio.to_thread.run_sync(read_to_eof, stream)

    with contextlib.suppress(Exception):  # the client sees its server go: that is the point
        anyio.run(body)
    check_stopped(found["pid"], found["tree"], found.get("stderr"))


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_http_edge_leaves_nothing(site: tuple[Path, Path, str], sig: signal.Signals) -> None:
    home, repo, token = site
    argv = [sys.executable, "-m", "gateway.cli", "--home", str(home), "mcp", "--repo", str(repo),
            "--http", "127.0.0.1:0"]
    with started(argv, READY.encode()) as (process, url):

        async def call() -> None:
            async with http_client(url, token) as (client, _):
                assert (await semantic_call(client))["symbols"]

        anyio.run(call)
        tree = stop(process, sig)
        assert process.stderr is not None
        stderr = read_to_eof(process.stderr)
        process.wait(EXIT_BOUND)
        check_stopped(process.pid, tree, stderr)
        assert process.returncode == 0


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_engine_server_leaves_nothing(
    site: tuple[Path, Path, str], tmp_path: Path, sig: signal.Signals, workers: int
) -> None:
    home, repo, token = site
    sock = Path(os.path.realpath(tmp_path)) / "e.sock"
    if len(os.fsencode(sock)) > 100:  # sun_path holds 107 bytes
        sock = Path("/tmp") / f"chit-shutdown-{os.getpid()}.sock"
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    argv = [sys.executable, "-m", "gateway.cli", "--home", str(home), "engine", "serve",
            "--repo", str(repo), "--socket", str(sock), "--workers", str(workers)]
    with started(argv, b"chit engine: serving") as (process, _):

        async def call() -> None:
            async with Client(remote_edge_params(f"unix:{sock}", edge_home, token)) as client:
                assert (await semantic_call(client))["symbols"]

        anyio.run(call)
        tree = stop(process, sig)
        assert process.stderr is not None
        stderr = read_to_eof(process.stderr)
        process.wait(EXIT_BOUND)
        check_stopped(process.pid, tree, stderr)
        assert process.returncode == 0
