"""DNS-rebinding protection in front of every route of ``chit mcp --http``.

A foreign ``Host`` gets 421 and a foreign ``Origin`` 403, before anything else is
read, so a rebinding page learns nothing, not even whether a token would be
accepted (docs/http.md).
"""

from __future__ import annotations

import logging

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HostOriginGuard"]

logger = logging.getLogger("chit.gateway")


class HostOriginGuard:
    """ASGI middleware: a foreign ``Host`` 421, a foreign ``Origin`` 403.

    A request without ``Origin`` (any non-browser client) passes; one with an
    ``Origin`` must name an allowed host.

    Args:
        app: The app behind it.
        hosts: The ``Host`` values accepted (lowercase).
        origins: The ``Origin`` values accepted (lowercase).
    """

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str], origins: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a foreign ``Host`` or ``Origin``; pass anything else to the app."""
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            hosts, origins = headers.getlist("host"), headers.getlist("origin")
            # Exact matches, as the SDK's own check behind this one compares them;
            # a repeated header is refused (a proxy and the SDK might read another copy).
            if len(hosts) != 1 or hosts[0] not in self._hosts:
                logger.warning("refused a request for a foreign Host (DNS rebinding?)")
                await Response("Invalid Host header", status_code=421)(scope, receive, send)
                return
            if len(origins) > 1 or (origins and origins[0] not in self._origins):
                logger.warning("refused a request from a foreign Origin")
                await Response("Invalid Origin header", status_code=403)(scope, receive, send)
                return
        await self._app(scope, receive, send)
