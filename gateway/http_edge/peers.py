"""The HTTP edge's workers (``chit mcp --http --workers N``): who serves which request.

Under the 2026-07-28 protocol any worker serves any request: the engine session
of a token identity is named after the identity (``connections``), and a
``tools/list`` is told to every other worker before it is answered, so a write
that follows it anywhere is checked against it. A 2025-11-25 session lives in
the memory of one worker: the session id a client sees names that worker
(``w<index>.`` before the SDK's id), every session of one identity is opened on
the identity's own worker (so the per-identity limit holds), and a request that
lands elsewhere is proxied, streaming, over that worker's private unix socket.
A session whose worker is gone answers 404, and the client initialises again.
docs/http.md, "Workers".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.errors import ChitError
from gateway._workers import listener_gone
from gateway.http_edge.connections import Principal, claimed_principal
from gateway.http_edge.gate import SESSION_HEADER, jsonrpc_error
from gateway.mcp_server import TOKEN_REFUSED

__all__ = ["LISTED_PATH", "MAX_PROXIED", "EdgeWorkers", "Router", "SessionNames"]

logger = logging.getLogger("chit.gateway")

LISTED_PATH = "/_chit/listed"  # private sockets only: a peer's tools/list of an identity
MAX_PROXIED = 1024  # requests one worker proxies to another at once (GET streams included)
_ANNOUNCE_SECONDS = 2.0  # a peer that does not take a listing in this time misses it
_CONNECT_SECONDS = 5.0
_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te",
    b"trailer", b"upgrade", b"content-length",
})
_NOT_RELAYED = _HOP_BY_HOP - {b"content-length"} | {b"date", b"server"}
_NAMED = re.compile(rb"w(\d{1,2})\.")


def _not_found() -> ASGIApp:
    return jsonrpc_error(404, -32600, "Session not found")


class SessionNames:
    """ASGI wrapper: the session ids clients see name this worker (``w<index>.`` + the SDK's).

    A session id without this worker's prefix is unknown here (404).

    Args:
        app: The gate.
        index: This worker's index.
    """

    def __init__(self, app: ASGIApp, index: int) -> None:
        self._app = app
        self._prefix = f"w{index}.".encode()

    def __repr__(self) -> str:
        return f"SessionNames({self._prefix.decode()})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strip the prefix from the request's session id, add it to the answer's."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = []
        for name, value in scope["headers"]:
            if name == SESSION_HEADER.encode():
                if not value.startswith(self._prefix):
                    await _not_found()(scope, receive, send)
                    return
                value = value[len(self._prefix):]
            headers.append((name, value))
        prefix = self._prefix

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[
                    (k, prefix + v if k.lower() == SESSION_HEADER.encode() else v)
                    for k, v in message.get("headers", [])])
            await send(message)

        await self._app(dict(scope, headers=headers), receive, named)


class EdgeWorkers:
    """This worker among the edge's workers: its index, and the others' private sockets.

    Args:
        index: This worker's index (0 to ``count - 1``).
        count: How many workers there are.
        folder: The supervisor's private run folder (``w<i>.sock`` each).
        host: A ``Host`` value the workers accept (for requests between them).
    """

    def __init__(self, index: int, count: int, folder: Path, host: str) -> None:
        self.index = index
        self.count = count
        self._folder = folder
        self._host = host
        self._clients: dict[int, httpx2.AsyncClient] = {}

    def __repr__(self) -> str:
        return f"EdgeWorkers({self.index} of {self.count})"

    def socket_path(self, index: int) -> Path:
        """Worker ``index``'s private socket."""
        return self._folder / f"w{index}.sock"

    def home(self, principal: Principal) -> int:
        """The worker that opens every 2025-11-25 session of ``principal``."""
        digest = hashlib.sha256(principal.token_id.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.count

    def target(self, scope: Scope) -> int | None:
        """The other worker a request belongs to, or ``None`` to serve it here."""
        headers = Headers(scope=scope)
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None  # 2026-07-28: any worker
        session = headers.get(SESSION_HEADER)
        if session is not None:
            named = _NAMED.match(session.encode("utf-8", "replace"))
            index = int(named.group(1)) if named else self.index
        elif scope["method"] == "POST":  # opens a session: on the identity's worker
            scheme, _, token = headers.get("authorization", "").partition(" ")
            try:
                principal = claimed_principal(token.strip())
            except ChitError:
                return None  # the gate answers 401 here
            index = self.home(principal) if scheme.lower() == "bearer" else self.index
        else:
            return None
        return index if index != self.index and 0 <= index < self.count else None

    def _client(self, index: int) -> httpx2.AsyncClient:
        client = self._clients.get(index)
        if client is None:
            # A new connection for each request: one to a worker that died since
            # fails to connect (its sessions are gone: 404) instead of failing
            # half-way on a kept-alive connection, which would look like a hiccup.
            transport = httpx2.AsyncHTTPTransport(
                uds=str(self.socket_path(index)), retries=0, trust_env=False,
                limits=httpx2.Limits(max_connections=MAX_PROXIED, max_keepalive_connections=0),
            )
            client = self._clients[index] = httpx2.AsyncClient(
                base_url="http://chit-edge", transport=transport, trust_env=False,
                follow_redirects=False,
                timeout=httpx2.Timeout(None, connect=_CONNECT_SECONDS, pool=_CONNECT_SECONDS),
            )
        return client

    async def proxy(self, index: int, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a request to worker ``index`` and stream its answer back, as it comes."""
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        query = scope.get("query_string", b"").decode("latin-1")
        url = scope["path"] + (f"?{query}" if query else "")
        has_body = scope["method"] not in ("GET", "HEAD", "DELETE", "OPTIONS")
        client = self._client(index)
        request = client.build_request(
            scope["method"], url, headers=headers, content=_body(receive) if has_body else None)
        try:
            response = await client.send(request, stream=True)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            await self._unreachable(index, scope, listener_gone(exc))(scope, receive, send)
            return
        except (httpx2.HTTPError, _ClientGone):
            # Cut off before any answer: the worker may have died just now.
            await self._unreachable(index, scope, not _listens(self.socket_path(index)))(
                scope, receive, send)
            return
        try:
            await self._relay(response, receive, send)
        except OSError:  # the client went away while the answer was relayed
            pass
        finally:
            await response.aclose()

    @staticmethod
    async def _relay(response: httpx2.Response, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw
                                if k.lower() not in _NOT_RELAYED]})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
            with contextlib.suppress(httpx2.HTTPError):  # the worker went away mid-answer
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()

    def _unreachable(self, index: int, scope: Scope, is_gone: bool) -> ASGIApp:
        if is_gone and SESSION_HEADER.encode() in dict(scope["headers"]):
            return _not_found()  # its worker is gone, and the session with it
        logger.warning("edge worker %d does not answer", index)
        return _unavailable()

    async def announce_listed(
        self, principal: Principal, repo: str | None, catalog_hash: str
    ) -> None:
        """Tell every other worker that ``principal`` was shown ``catalog_hash`` on ``repo``."""
        body = json.dumps({"token_id": principal.token_id, "agent": principal.agent,
                           "repo": repo, "catalog_hash": catalog_hash}).encode("utf-8")

        async def tell(index: int) -> None:
            with anyio.move_on_after(_ANNOUNCE_SECONDS), contextlib.suppress(httpx2.HTTPError):
                await self._client(index).post(LISTED_PATH, content=body, headers={
                    "content-type": "application/json", "host": self._host})

        async with anyio.create_task_group() as tg:
            for index in range(self.count):
                if index != self.index:
                    tg.start_soon(tell, index)

    async def aclose(self) -> None:
        """Close the connections to the other workers."""
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class Router:
    """The shared socket's ``/mcp``: serve here, or proxy to the worker a request belongs to.

    Args:
        app: This worker's own ``/mcp`` (the gate behind :class:`SessionNames`).
        workers: This worker among the others.
    """

    def __init__(self, app: ASGIApp, workers: EdgeWorkers) -> None:
        self._app = app
        self._workers = workers

    def __repr__(self) -> str:
        return f"Router({self._workers!r})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one request."""
        if scope["type"] == "http":
            index = self._workers.target(scope)
            if index is not None:
                await self._workers.proxy(index, scope, receive, send)
                return
        await self._app(scope, receive, send)


class _ClientGone(Exception):
    """The client disconnected while its request body was being passed on."""


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _listens(path: Path) -> bool:
    """Whether a worker listens on ``path`` (a plain connect, closed at once)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(str(path))
    except BlockingIOError:  # a full backlog: someone listens
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _unavailable() -> ASGIApp:
    return jsonrpc_error(503, TOKEN_REFUSED, "edge worker unavailable", {
        "error": "internal_error", "message": "an edge worker is restarting; try again shortly"},
        headers={"Retry-After": "1"})
