"""Run ``chit mcp --http`` (real uvicorn, loopback) and reach it with the official client."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import World

READY = "chit: MCP over streamable HTTP at "


@dataclass
class Edge:
    """A running ``chit mcp --http`` process."""

    url: str
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)
    drain: threading.Thread | None = None

    @property
    def origin(self) -> str:
        return self.url.removesuffix("/mcp")

    @property
    def authority(self) -> str:
        return self.origin.removeprefix("http://")


def start(argv: Sequence[str], *, timeout: float = 60.0) -> Edge:
    """Start ``argv`` (a ``chit mcp --http`` command line) and wait for its URL on stderr."""
    process = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    ready = threading.Event()
    url: list[str] = []

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if line.startswith(READY) and not url:
                url.append(line[len(READY):].strip())
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    if not ready.wait(timeout) or not url:
        process.kill()
        process.wait(10)
        reader.join(10)
        assert process.stderr is not None
        process.stderr.close()
        raise AssertionError("chit mcp --http did not start:\n" + "".join(lines))
    return Edge(url[0], process, lines, reader)


def stop(edge: Edge) -> None:
    edge.process.terminate()
    try:
        edge.process.wait(15)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hung shutdown is a failure
        edge.process.kill()
        edge.process.wait(10)
        raise AssertionError("chit mcp --http did not stop on SIGTERM") from None
    finally:
        if edge.drain is not None:
            edge.drain.join(10)
        if edge.process.stderr is not None:
            edge.process.stderr.close()


def edge_command(world: World, *extra: str, watch_interval: float = 0.2) -> list[str]:
    return [
        *world.cli(), "mcp", "--repo", str(world.repo), "--http", "127.0.0.1:0",
        "--watch-interval", str(watch_interval), *extra,
    ]


@contextmanager
def running_edge(world: World, *extra: str, watch_interval: float = 0.2) -> Iterator[Edge]:
    edge = start(edge_command(world, *extra, watch_interval=watch_interval))
    try:
        yield edge
    finally:
        stop(edge)


@asynccontextmanager
async def http_client(
    url: str,
    token: str | None,
    *,
    mode: str = "legacy",
    message_handler: Any = None,
    headers: dict[str, str] | None = None,
    fresh: bool = False,
    event_hooks: dict[str, list[Any]] | None = None,
    elicitation_callback: Any = None,
) -> AsyncIterator[tuple[Client, httpx2.AsyncClient]]:
    """The official client over streamable HTTP, with the token as a bearer header.

    ``fresh``: a new connection for every request (none is kept alive), so the
    kernel picks a worker for each (``--workers``). ``elicitation_callback``:
    the client declares the ``elicitation`` capability (form and url).
    """
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    limits = httpx2.Limits(max_keepalive_connections=0) if fresh else httpx2.Limits()
    async with httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(30, read=60),
                                  limits=limits, event_hooks=event_hooks) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, message_handler=message_handler,
                          elicitation_callback=elicitation_callback) as client:
            yield client, http
