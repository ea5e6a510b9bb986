"""Inside a worker process of :mod:`gateway._workers`: its start, its servers, its stop.

A worker first asks the kernel to kill it when its supervisor dies
(``PR_SET_PDEATHSIG``, then checks the supervisor is still its parent), reads
its settings from stdin, and reports ready on a pipe once its servers listen.
It runs uvicorn servers (the shared socket, and its private one) in one event
loop; SIGTERM or SIGINT drains them (uvicorn's graceful shutdown, bounded) and
a hard stop follows if draining hangs. docs/engine-api.md, "Running it".
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import uvicorn

__all__ = ["MAX_CONFIG_BYTES", "Server", "begin", "inherited_socket", "run_servers"]

logger = logging.getLogger("chit.gateway")

MAX_CONFIG_BYTES = 1 << 20  # a worker's settings, read from stdin
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_HARD_STOP_MARGIN = 10  # seconds past the drain before a stuck worker is ended


class Server(uvicorn.Server):
    """A uvicorn server whose signals are the worker's (several servers share one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Leave signal handling to :func:`run_servers`."""
        yield


def begin() -> dict[str, Any]:
    """Start a worker: tie its life to the supervisor's, read its settings, set up logging.

    Returns:
        The settings the supervisor sent (``ready_fd``, ``supervisor`` and the
        worker's own).

    Raises:
        SystemExit: If the supervisor is already gone or sent no settings.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    # SIGKILL, as if the one engine process had been killed: a supervisor is
    # only ever gone without stopping its workers when it was killed itself.
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise SystemExit("chit: worker: cannot tie its life to the supervisor's")
    # Its own process group is not the terminal's: with `stty tostop`, a log
    # line would stop it. Ignored, SIGTTOU stays ignored in what it starts too.
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    raw = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)
    try:
        config = json.loads(raw) if len(raw) <= MAX_CONFIG_BYTES else None
    except ValueError:
        config = None
    if not isinstance(config, dict) or not isinstance(config.get("supervisor"), int):
        raise SystemExit("chit: worker: no settings from a supervisor")
    # Set after the fork: a supervisor that died before it took effect is not
    # our parent any more, and no signal will come.
    if os.getppid() != config["supervisor"]:
        raise SystemExit(1)
    logging.basicConfig(
        level=logging.INFO if config.get("verbose") else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return config


def inherited_socket(fd: int) -> socket.socket:
    """The listening socket the supervisor passed as ``fd``."""
    return socket.socket(fileno=fd)


def run_servers(
    servers: Sequence[tuple[Server, list[socket.socket]]],
    *,
    ready_fd: int,
    drain_seconds: float,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    stopping: threading.Event | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, starting ``servers`` in order; report ready once all listen.

    Each server starts once the one before it has (so a private socket only
    accepts once the shared app's lifespan runs). On a signal every server
    drains at once; a worker still running ``drain_seconds`` plus a margin
    later is ended by ``SIGALRM``.

    Args:
        servers: ``(server, sockets)`` pairs.
        ready_fd: The pipe to the supervisor: ``R`` is written once all listen.
        drain_seconds: Each server's ``timeout_graceful_shutdown``, for the hard stop.
        on_stop: Awaited in the servers' loop once they have all stopped.
        stopping: Set at the signal, before draining (long polls then answer).
    """

    def stop(sig: int, _frame: object) -> None:
        if stopping is not None:
            stopping.set()
        for server, _ in servers:
            if server.should_exit and sig == signal.SIGINT:
                server.force_exit = True
            server.should_exit = True
        signal.alarm(int(drain_seconds) + _HARD_STOP_MARGIN)  # default action: the process ends

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        asyncio.run(_serve(servers, lambda: _report_ready(ready_fd), on_stop))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _serve(
    servers: Sequence[tuple[Server, list[socket.socket]]],
    ready: Callable[[], None],
    on_stop: Callable[[], Awaitable[None]] | None,
) -> None:
    tasks: list[asyncio.Task[None]] = []
    for server, sockets in servers:
        tasks.append(asyncio.create_task(server.serve(sockets=sockets)))
        while not server.started and not tasks[-1].done() and not server.should_exit:
            await asyncio.sleep(0.02)
        if not server.started:
            break
    else:
        ready()
    if any(not server.started for server, _ in servers):
        for server, _ in servers:
            server.should_exit = True
    try:
        await asyncio.gather(*tasks)
    finally:
        if on_stop is not None:
            await on_stop()


def _report_ready(fd: int) -> None:
    with contextlib.suppress(OSError):  # a supervisor gone: the kernel's SIGTERM follows
        os.write(fd, b"R")
    os.close(fd)
