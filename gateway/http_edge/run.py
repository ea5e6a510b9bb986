"""``chit mcp --http``'s process: uvicorn on a bound socket until SIGINT or SIGTERM.

A non-loopback address is refused unless the operator accepts plain HTTP behind
a TLS-terminating proxy (docs/http.md, "Deployment").
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.errors import ConfigurationError
from gateway import _oauth
from gateway.http_edge.edge import HttpEdge
from gateway.http_edge.settings import (
    HttpSettings,
    allowed_names,
    check_authorization_server,
    url_host,
)
from gateway.mcp_server import EngineClient

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

__all__ = ["bind", "check_settings", "serve_http", "uvicorn_config"]

logger = logging.getLogger("chit.gateway")

DRAIN_SECONDS = 3  # after a signal: open GET streams never end by themselves


def bind(settings: HttpSettings) -> socket.socket:
    """Bind and listen on ``settings.host:settings.port``."""
    host = url_host(settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, settings.port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve_http(
    engine: EngineClient, settings: HttpSettings, *, state_keys: Sequence[bytes] | None = None
) -> None:
    """Serve MCP over streamable HTTP until interrupted (SIGINT or SIGTERM).

    Prints ``chit: MCP over streamable HTTP at URL`` to stderr once the socket
    listens. ``state_keys`` seal ``requestState`` (see :class:`HttpEdge`).

    Raises:
        ConfigurationError: A non-loopback address without ``allow_non_loopback``,
            a bad ``public_url`` or a bad ``authorization_server``.
        OSError: The address cannot be bound.
    """
    import uvicorn

    check_settings(settings)
    sock = bind(settings)
    try:
        edge = HttpEdge(engine, settings, port=sock.getsockname()[1], state_keys=state_keys)
        print(f"chit: MCP over streamable HTTP at {edge.resource}", file=sys.stderr, flush=True)
        uvicorn.Server(uvicorn_config(edge.app)).run(sockets=[sock])
    finally:
        sock.close()


def check_settings(settings: HttpSettings) -> None:
    """Refuse settings the edge cannot serve with, before it binds.

    Raises:
        ConfigurationError: A non-loopback address without ``allow_non_loopback``,
            a watch interval that is not positive, a bad ``public_url`` or a bad
            ``authorization_server``.
    """
    if not _oauth.is_loopback(settings.host):
        if not settings.allow_non_loopback:
            raise ConfigurationError(
                f"refusing to serve on non-loopback {settings.host}: bearer tokens would "
                "cross the network in clear; put a TLS-terminating proxy in front and pass "
                "--unsafe-non-loopback (docs/http.md)"
            )
        logger.warning("serving plain HTTP on non-loopback %s: only behind a TLS proxy",
                       settings.host)
    if settings.watch_interval <= 0:
        raise ConfigurationError("the watch interval must be positive")
    check_authorization_server(settings)  # before binding: a bad URL never listens
    allowed_names(settings, settings.port)  # a bad public URL, too


def uvicorn_config(app: ASGIApp, *, lifespan: str = "on") -> uvicorn.Config:
    """How uvicorn serves the edge: no request logging, 3 s to drain on a signal."""
    import uvicorn

    return uvicorn.Config(
        app,
        lifespan=lifespan,  # type: ignore[arg-type]
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=DRAIN_SECONDS,
        ws="none",
    )
