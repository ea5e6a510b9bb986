"""Stopping a server leaves nothing behind: every process ends, the host's stderr reaches EOF.

Threat: a host (an MCP client, a supervisor, a shell pipeline) that stops chit
with SIGTERM or Ctrl-C and reads its stderr until EOF hangs for ever if any
process of chit's tree (the semantic index's parse pool, its forkserver, the
resource tracker) outlives the server and keeps the pipe open; surviving
workers also keep repository data in memory. Each server is started in its
own process group, made to start its parse pool with a semantic call, then
signalled; the test then checks the process tree and the group are empty and
that stderr ends, without a traceback. A command whose reader closes stdout
early (``chit ... | head``) is no error, and spans still buffered when a server
with ``--otel`` is stopped are exported. See docs/deployment.md, "Stopping".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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


def read_to_eof(stream: IO[bytes]) -> bytes | None:
    """Everything left on ``stream``, or ``None`` if EOF does not come within the bound.

    On ``None`` the reading thread is still blocked: close ``stream`` only once
    its writers are killed (a close waits for a read in progress).
    """
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(stream.read()), daemon=True)
    reader.start()
    reader.join(EXIT_BOUND)
    return None if reader.is_alive() else out[0]


def wait_ready(stream: IO[bytes], marker: bytes) -> str:
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


def leftovers(pid: int, tree: dict[int, int]) -> list[int]:
    """What is left of the server's tree and group, now killed so no later test meets it.

    A process that closed its stderr may still be on its way out (on a busy
    machine, for a while): it gets up to ``EXIT_BOUND`` seconds to be gone.
    """
    deadline = time.monotonic() + EXIT_BOUND
    found = sorted(set(procs.alive(tree) + group(pid)))
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = sorted(set(procs.alive(tree) + group(pid)))
    for stray in found:
        with contextlib.suppress(OSError):
            os.kill(stray, signal.SIGKILL)
    return found


def check_stopped(pid: int, tree: dict[int, int], stderr: bytes | None,
                  left: list[int] | None = None) -> None:
    """No process of the tree or of the group is left, stderr ended, with no traceback."""
    assert tree, "the parse pool was never started: the test would prove nothing"
    left = leftovers(pid, tree) if left is None else left
    assert stderr is not None, "stderr never reached EOF: a process still holds it"
    assert left == []
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "leaked semaphore" not in text, text


@contextlib.contextmanager
def started(argv: list[str], marker: bytes, env: dict[str, str] | None = None,
            ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True, env=env)
    assert process.stderr is not None
    try:
        yield process, wait_ready(process.stderr, marker)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever a failed test left
        if process.poll() is None:
            process.kill()
        process.wait(EXIT_BOUND)
        process.stderr.close()


class Stop:
    """How a server is told to stop: a signal, to it or to its whole process group."""

    def __init__(self, sig: signal.Signals, whole_group: bool, name: str) -> None:
        self.sig, self.whole_group, self.name = sig, whole_group, name

    def send(self, pid: int) -> None:
        if self.whole_group:
            os.killpg(pid, self.sig)
        else:
            os.kill(pid, self.sig)


SIGNALS = [
    Stop(signal.SIGTERM, False, "SIGTERM"),  # a supervisor, kill(1), a container runtime
    Stop(signal.SIGTERM, True, "SIGTERM-group"),  # systemd's KillMode=control-group
    Stop(signal.SIGINT, True, "SIGINT-group"),  # a terminal's Ctrl-C
]


def stop(process: subprocess.Popen[bytes], how: Stop) -> dict[int, int]:
    """Signal the server; its tree as it was just before."""
    tree = procs.descendants(process.pid)
    how.send(process.pid)
    return tree


@pytest.mark.parametrize("how", SIGNALS, ids=lambda s: s.name)
def test_stdio_server_leaves_nothing(site: tuple[Path, Path, str], how: Stop) -> None:
    home, repo, token = site
    read_end, write_end = os.pipe()
    errlog = os.fdopen(write_end, "w")
    stream = os.fdopen(read_end, "rb")
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
            try:
                assert (await semantic_call(client))["symbols"]
                found["tree"] = procs.descendants(pid)
                # The client keeps the server's stdin open: the signal alone must stop it.
                how.send(pid)
                found["stderr"] = await anyio.to_thread.run_sync(read_to_eof, stream)
            finally:  # before the client's exit, which would wait on a server still running
                found["left"] = leftovers(pid, found.get("tree", {}))

    try:
        with contextlib.suppress(Exception):  # the client sees its server go: that is the point
            anyio.run(body)
    finally:
        stream.close()  # only now: closing it under a blocked read would wait for that read
    assert "pid" in found, "the server did not start"
    check_stopped(found["pid"], found.get("tree", {}), found.get("stderr"), found["left"])


@pytest.mark.parametrize("how", SIGNALS, ids=lambda s: s.name)
def test_http_edge_leaves_nothing(site: tuple[Path, Path, str], how: Stop) -> None:
    home, repo, token = site
    argv = [sys.executable, "-m", "gateway.cli", "--home", str(home), "mcp", "--repo", str(repo),
            "--http", "127.0.0.1:0"]
    with started(argv, READY.encode()) as (process, url):

        async def call() -> None:
            async with http_client(url, token) as (client, _):
                assert (await semantic_call(client))["symbols"]

        anyio.run(call)
        tree = stop(process, how)
        assert process.stderr is not None
        stderr = read_to_eof(process.stderr)
        process.wait(EXIT_BOUND)
        check_stopped(process.pid, tree, stderr)
        assert process.returncode == 0


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("how", SIGNALS, ids=lambda s: s.name)
def test_engine_server_leaves_nothing(
    site: tuple[Path, Path, str], tmp_path: Path, how: Stop, workers: int
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
        tree = stop(process, how)
        assert process.stderr is not None
        stderr = read_to_eof(process.stderr)
        process.wait(EXIT_BOUND)
        check_stopped(process.pid, tree, stderr)
        assert process.returncode == 0


def test_http_edge_exports_its_spans_when_stopped(site: tuple[Path, Path, str]) -> None:
    # Threat: an operator's trace of the last calls before a stop (the calls an
    # incident review needs) is lost when SIGTERM skips the exporter's flush.
    home, repo, token = site
    argv = [sys.executable, "-m", "gateway.cli", "--home", str(home), "mcp", "--repo", str(repo),
            "--http", "127.0.0.1:0", "--otel"]
    env = dict(os.environ, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none",
               OTEL_BSP_SCHEDULE_DELAY="3600000")  # spans leave only when the provider shuts down
    with started(argv, READY.encode(), env=env) as (process, url):

        async def call() -> None:
            async with http_client(url, token) as (client, _):
                assert (await semantic_call(client))["symbols"]

        anyio.run(call)
        tree = stop(process, SIGNALS[0])
        assert process.stderr is not None
        stderr = read_to_eof(process.stderr)
        process.wait(EXIT_BOUND)
        check_stopped(process.pid, tree, stderr)
        assert process.returncode == 0
    assert stderr is not None
    assert "tools/call search_symbols" in [doc["name"] for doc in console_spans(stderr.decode())]


def console_spans(text: str) -> list[dict[str, Any]]:
    """The span documents the console exporter wrote into ``text``, among other lines."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    at = text.find("{")
    while at != -1:
        try:
            doc, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        if isinstance(doc, dict) and "name" in doc and "kind" in doc:
            found.append(doc)
        at = text.find("{", end)
    return found


@pytest.mark.parametrize("command", [["--version"], ["--help"], ["keys", "list"],
                                     ["keys", "list", "--json"]], ids=" ".join)
def test_a_closed_stdout_is_no_error(site: tuple[Path, Path, str], command: list[str]) -> None:
    # `chit keys list | head -1`: the reader has what it wanted and closed the pipe.
    # The read end is closed before chit starts, so every write meets EPIPE.
    home, _, _ = site
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), *command],
                              stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE,
                              timeout=EXIT_BOUND, check=False)
    finally:
        os.close(write_end)
    assert done.stderr == b""
    assert done.returncode == 0


def test_ctrl_c_ends_a_command_quietly_with_130() -> None:
    # `chit inspect -` waits for the token on stdin; Ctrl-C there is the user's
    # change of mind: status 130 as shells report it, and no traceback.
    process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "inspect", "-"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        procs.wait_for(lambda: "pipe_read" in Path(f"/proc/{process.pid}/wchan").read_text(),
                       "the command to wait on stdin")
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=EXIT_BOUND)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    assert (process.returncode, out, err) == (130, b"", b"")
