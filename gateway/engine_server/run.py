"""``chit engine serve``'s process: uvicorn on a bound listener until SIGINT or SIGTERM.

It prints one ready line once the socket listens and removes its socket file on
the way out (docs/engine-api.md, "Running it").
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from starlette.applications import Starlette

from gateway import _oauth, _wire
from gateway.engine_server.app import MAX_REQUEST_BYTES, EngineClient, create_app
from gateway.engine_server.forward import SessionRouting
from gateway.engine_server.listeners import Listener
from gateway.engine_server.token import Exchange

if TYPE_CHECKING:
    import uvicorn

__all__ = ["build_app", "ready_line", "serve", "uvicorn_config"]

MAX_CONNECTIONS = 1024  # open connections (idle kept-alive ones too) before uvicorn answers 503
KEEP_ALIVE_SECONDS = 30  # longer than the client's idle expiry, so it never reuses a closed one


@contextlib.contextmanager
def _closing(listener: Listener) -> Iterator[Listener]:
    try:
        yield listener
    finally:
        listener.close()


def serve(
    engine: EngineClient,
    listener: Listener,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    exchange: Exchange | None = None,
    public_url: str | None = None,
) -> None:
    """Serve ``engine`` on ``listener`` until SIGINT or SIGTERM, then remove the socket.

    Args:
        engine: The engine.
        listener: From :func:`~gateway.engine_server.listeners.bind_unix` or
            :func:`~gateway.engine_server.listeners.bind_tcp`.
        max_request_bytes: Largest request body accepted.
        exchange: Serve ``POST /token`` with it (docs/exchange.md).
        public_url: The origin clients reach this server at (a TLS proxy in
            front, say), checked by :func:`gateway._oauth.check_issuer_url`: the
            issuer of its RFC 8414 metadata, and on TCP an accepted ``Host``. By
            default a TCP listener's own URL is the issuer and a unix socket has none.

    Raises:
        ValueError: If ``public_url`` is not an https origin (http only on loopback).
    """
    stopping = threading.Event()
    app = build_app(
        engine, url=listener.url, allowed_hosts=listener.allowed_hosts,
        max_request_bytes=max_request_bytes, exchange=exchange, public_url=public_url,
        stopping=stopping,
    )
    config = uvicorn_config(app)
    with _closing(listener):
        # uvicorn re-raises SIGTERM once it has shut down; exit through Python so
        # the socket file is removed (SIGINT arrives as KeyboardInterrupt). The
        # handler is in place before the ready line: a SIGTERM sent as soon as it
        # is read must not find the default action, which leaves the socket behind.
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            print(ready_line(listener), file=sys.stderr, flush=True)
            _server(config, stopping).run(sockets=[listener.sock])
        finally:
            signal.signal(signal.SIGTERM, previous)


def ready_line(listener: Listener, workers: int = 1) -> str:
    """The line printed once the engine serves: the API, the URL, the socket's mode."""
    mode = ""
    if listener.path is not None:
        mode = f" (mode {stat.S_IMODE(os.lstat(listener.path).st_mode):04o})"
    many = f" with {workers} workers" if workers > 1 else ""
    return f"chit engine: serving {_wire.API} on {listener.url}{mode}{many}"


def build_app(
    engine: EngineClient,
    *,
    url: str,
    allowed_hosts: frozenset[str] | None,
    max_request_bytes: int,
    exchange: Exchange | None,
    public_url: str | None,
    stopping: threading.Event,
    sessions: SessionRouting | None = None,
) -> Starlette:
    """The app for a listener at ``url`` (see :func:`serve`; the rest: :func:`create_app`)."""
    issuer = url if allowed_hosts is not None else None
    hosts = allowed_hosts
    if public_url is not None:
        issuer = _oauth.check_issuer_url(public_url, option="--public-url", origin_only=True)
        if hosts is not None:  # a proxy in front forwards its own Host
            hosts = hosts | {urllib.parse.urlsplit(issuer).netloc.lower()}
    return create_app(
        engine, allowed_hosts=hosts, max_request_bytes=max_request_bytes,
        exchange=exchange, issuer=issuer if exchange is not None else None,
        stopping=stopping, sessions=sessions,
    )


def uvicorn_config(app: Starlette, *, drain_seconds: float | None = None) -> uvicorn.Config:
    """How uvicorn serves the engine API: no logging of requests, bounded connections.

    Args:
        app: The app.
        drain_seconds: After a signal, how long calls in flight may take
            (``None``: as long as they take).
    """
    import uvicorn

    return uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,  # keep the CLI's logging; uvicorn never sees a body
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=drain_seconds,
        limit_concurrency=MAX_CONNECTIONS,
        ws="none",
    )


def _server(config: uvicorn.Config, stopping: threading.Event) -> uvicorn.Server:
    """The uvicorn server, setting ``stopping`` when a signal asks it to stop.

    uvicorn waits for the requests in flight before it exits; ``stopping``
    makes the ``POST /v1/changes`` long polls among them answer at once.
    """
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            stopping.set()
            super().handle_exit(sig, frame)

    return Server(config)


def _exit_on_sigterm(_sig: int, _frame: object) -> None:
    raise SystemExit(0)
