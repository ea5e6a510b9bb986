"""``chit engine serve``: the engine as a separate process, behind ``chit-engine/1``.

The engine keeps its keys, its repository and its state; edges (``chit mcp
--engine URL``) reach it over HTTP/1.1 on a unix socket or a loopback TCP port
and hold nothing but the connection. ``app`` serves the API, ``requests`` checks
what reaches it, ``token`` is the token exchange, ``listeners`` binds the socket
and ``run`` serves until a signal; ``worker`` runs it as several processes and
``forward`` takes each call to the worker holding its session. The API:
docs/engine-api.md; tokens travel only in request bodies, which are never logged.
"""

from gateway.engine_server.app import MAX_REQUEST_BYTES, create_app
from gateway.engine_server.listeners import (
    DEFAULT_SOCKET_NAME,
    Listener,
    bind_tcp,
    bind_unix,
    parse_listen,
)
from gateway.engine_server.run import serve

__all__ = [
    "DEFAULT_SOCKET_NAME",
    "MAX_REQUEST_BYTES",
    "Listener",
    "bind_tcp",
    "bind_unix",
    "create_app",
    "parse_listen",
    "serve",
]
