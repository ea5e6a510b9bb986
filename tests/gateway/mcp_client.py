"""Drive ``chit mcp`` over a real stdio subprocess with the official MCP client.

The MCP contract tests run every case twice (the ``edge`` fixture in
tests/gateway/conftest.py): against the embedded engine (``chit mcp --repo``)
and against a separate engine (a real ``chit engine serve`` on a unix socket,
with ``chit mcp --engine unix:...`` as a client of it, whose home holds no keys).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from gateway.demo import stdio_server_params

T = TypeVar("T")
MODES = ("embedded", "remote")
TOKEN_TEXT = re.compile(r"chit_[A-Za-z0-9_-]{16,}")


HEARD_BOUND = 10.0  # seconds a notification may take to arrive before a test fails


class Heard:
    """A client message handler counting ``notifications/tools/list_changed``."""

    def __init__(self) -> None:
        self.count = 0
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.count += 1
            self.event.set()

    async def reaches(self, count: int, bound: float = HEARD_BOUND) -> int:
        """Wait (up to ``bound`` seconds) until ``count`` notifications arrived; the count then."""
        with anyio.move_on_after(bound):
            while self.count < count:
                await anyio.sleep(0.05)
        return self.count


def with_client(home: Path, repo: Path, token: str, body: Callable[[Client], Awaitable[T]]) -> T:
    async def run() -> T:
        async with Client(stdio_server_params(home, repo, token)) as client:
            return await body(client)

    return anyio.run(run)


def payload(result: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(result.content[0].text)
    return doc


def remote_edge_params(
    engine_url: str, edge_home: Path, token: str, *extra: str
) -> StdioServerParameters:
    """``chit mcp --engine URL [extra...]`` for one token, with a home that holds nothing."""
    env = dict(os.environ, CHIT_TOKEN=token, CHIT_HOME=str(edge_home))
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", "--home", str(edge_home), "mcp", "--engine", engine_url,
              *extra],
        env=env,
    )


@dataclass
class EngineServer:
    """A running ``chit engine serve`` subprocess."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    final_output: str | None = None  # everything it wrote, once it has stopped

    def output(self) -> str:
        if self.final_output is not None:
            return self.final_output
        return self.log.read_text(encoding="utf-8", errors="replace")


def _healthy(url: str) -> bool:
    path = url.removeprefix("unix:")
    # A raw probe first: httpcore leaves the socket of a failed unix connect open.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    transport = httpx2.HTTPTransport(uds=path, trust_env=False)
    with httpx2.Client(transport=transport, trust_env=False, timeout=5.0) as client:
        return client.get("http://chit-engine/v1/health").json().get("ok") is True


@contextlib.contextmanager
def engine_server(
    home: Path, repo: Path | None, *extra: str, socket_path: Path | None = None,
    verbose: bool = False,
) -> Iterator[EngineServer]:
    """Start ``chit engine serve`` on a unix socket; stop it (SIGTERM, then SIGKILL) after.

    ``repo`` ``None``: no ``--repo`` (the home's ``engine.toml`` names them, or ``extra``).
    """
    scratch = Path(tempfile.mkdtemp(prefix="chit-eng-"))  # short: sun_path holds 107 bytes
    sock = socket_path or scratch / "engine.sock"
    log = scratch / "engine.log"
    argv = [sys.executable, "-m", "gateway.cli", "--home", str(home)]
    if verbose:
        argv.append("-v")
    argv += ["engine", "serve", *(["--repo", str(repo)] if repo is not None else []),
             "--socket", str(sock), *extra]
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    server = EngineServer(process, f"unix:{sock}", log)
    try:
        deadline = time.monotonic() + 60
        # Workers may answer before the last one is ready: the ready line says all are.
        while "chit engine: serving" not in server.output() or not _healthy(server.url):
            if process.poll() is not None:
                raise AssertionError(f"chit engine serve exited: {server.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"chit engine serve did not start: {server.output()}")
            time.sleep(0.05)
        yield server
    finally:
        stop(process)
        server.final_output = server.output()
        shutil.rmtree(scratch, ignore_errors=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate a subprocess we started, by its own handle."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@dataclass
class Edge:
    """How a test starts ``chit mcp`` for a token: embedded or a client of a remote engine.

    Attributes:
        mode: ``embedded`` or ``remote``.
        home: The engine's home (keys, policy, state).
        repo: The repository.
        engine: The ``chit engine serve`` process (remote mode).
        edge_home: The edge's own home (remote mode): an empty folder, no keys.
    """

    mode: str
    home: Path
    repo: Path
    engine: EngineServer | None = None
    edge_home: Path | None = None

    def params(self, token: str) -> StdioServerParameters:
        if self.engine is None:
            return stdio_server_params(self.home, self.repo, token)
        assert self.edge_home is not None
        return remote_edge_params(self.engine.url, self.edge_home, token)

    def run(self, token: str, body: Callable[[Client], Awaitable[T]]) -> T:
        async def go() -> T:
            async with Client(self.params(token)) as client:
                return await body(client)

        return anyio.run(go)
