"""Sessions across the workers of ``chit engine serve --workers N``: a call goes to its worker.

An edge's calls for one session may reach any worker (the kernel picks who
accepts a connection). The worker that receives an ``invoke`` for a session
another worker holds (the engine raises ``SessionElsewhere`` naming it) sends
the request to that worker's private socket and relays the answer unchanged;
if that worker is gone (nobody listens), it takes the session over and serves
it, its staged change read back from its saved reference. A private socket's
app serves locally and never forwards, so no call travels twice. A session is
one repository's: routes are kept by repository and session.
docs/engine-api.md, "Sessions across workers".
"""

from __future__ import annotations

import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
import httpx2
from starlette.responses import Response

from engine.service import Placement, SessionElsewhere
from gateway import _wire
from gateway._workers import listener_gone
from gateway.engine_server.requests import HEADERS, InvokeRequest, json_response

__all__ = ["MISDIRECTED", "Forwarding", "Peers", "ServeHere", "SessionRouting"]

logger = logging.getLogger("chit.engine_server")

MISDIRECTED = 409  # a private socket's answer for a session its worker does not hold
ROUTES_KEPT = 4096  # sessions whose worker this one remembers (least recent forgotten)
_ATTEMPTS = 4  # placements tried for one call (each a worker that let the session go)
_CONNECT_SECONDS = 5.0
_CALL_SECONDS = 300.0  # as the edge waits for an answer
_MAX_ANSWER_BYTES = 64 * 1024 * 1024  # as the edge reads at most

Local = Callable[[], Awaitable[Response]]
"""Runs the call in this worker's engine (may raise ``SessionElsewhere``)."""


class SessionRouting(Protocol):
    """How an app answers an ``invoke``: here, or at the worker holding its session."""

    async def invoke(self, asked: InvokeRequest, request: dict[str, Any], local: Local) -> Response:
        """Answer the checked ``request`` (``asked``: its fields) for its session."""
        ...


class ServeHere:
    """A private socket's routing: serve here; a session held elsewhere is misdirected."""

    def __repr__(self) -> str:
        return "ServeHere()"

    async def invoke(self, asked: InvokeRequest, request: dict[str, Any], local: Local) -> Response:
        """Serve locally; ``409`` if another worker holds the session (the sender asks again)."""
        del asked, request
        try:
            return await local()
        except SessionElsewhere:
            return json_response(_wire.error(
                "internal_error", "the session is served by another worker"), MISDIRECTED)


class _PeerGone(Exception):
    """Nobody listens on the peer's socket: the worker is gone."""


class Peers:
    """The other workers of this engine, by their private sockets.

    Args:
        folder: The private run folder the supervisor made.
        count: How many workers there are.
    """

    def __init__(self, folder: Path, count: int) -> None:
        self._sockets = {str(folder / f"w{i}.sock") for i in range(count)}
        self._clients: dict[str, httpx2.AsyncClient] = {}

    def __repr__(self) -> str:
        return f"Peers({len(self._sockets)})"

    def known(self, owner: str) -> bool:
        """Whether ``owner`` is one of this engine's worker sockets (never any other path)."""
        return owner in self._sockets

    async def post(self, owner: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        """POST ``body`` to ``owner``'s private socket.

        Returns:
            The answer's status, body (read whole, bounded) and content type.

        Raises:
            _PeerGone: If nobody listens there.
            httpx2.HTTPError: For any other failure.
        """
        client = self._clients.get(owner)
        if client is None:
            # A new connection for each call: one to a worker that died since is
            # refused (taken over) instead of failing after the call was sent.
            transport = httpx2.AsyncHTTPTransport(
                uds=owner, retries=0, trust_env=False,
                limits=httpx2.Limits(max_keepalive_connections=0))
            client = self._clients[owner] = httpx2.AsyncClient(
                base_url="http://chit-engine", transport=transport, trust_env=False,
                follow_redirects=False,
                timeout=httpx2.Timeout(_CALL_SECONDS, connect=_CONNECT_SECONDS),
            )
        try:
            async with client.stream("POST", path, content=body, headers={
                    "content-type": "application/json"}) as response:
                raw = bytearray()
                async for chunk in response.aiter_bytes():
                    raw += chunk
                    if len(raw) > _MAX_ANSWER_BYTES:
                        raise httpx2.DecodingError("the answer is too large")
                kind = response.headers.get("content-type", "application/json")
                return response.status_code, bytes(raw), kind
        except httpx2.ConnectError as exc:
            if listener_gone(exc):
                raise _PeerGone from exc
            raise

    async def aclose(self) -> None:
        """Close the connections to the other workers."""
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class Forwarding:
    """The shared socket's routing: serve here, or at the worker that holds the session.

    Args:
        placement: This worker's placement (:meth:`engine.service.Engine.place_sessions`).
        peers: The other workers.
    """

    def __init__(self, placement: Placement, peers: Peers) -> None:
        self._placement = placement
        self._peers = peers
        # (repository as asked, session) -> (owner, the repository it resolved to)
        self._routes: OrderedDict[tuple[str | None, str], tuple[str, str | None]] = OrderedDict()

    def __repr__(self) -> str:
        return f"Forwarding({len(self._routes)} routes)"

    async def invoke(self, asked: InvokeRequest, request: dict[str, Any], local: Local) -> Response:
        """Answer ``request``: here if this worker holds its session, else where it is held."""
        key = (asked.repo, asked.session)
        session = asked.session
        owner, repo = self._routes.get(key, (None, None))
        for _ in range(_ATTEMPTS):
            if owner is None:
                try:
                    return await local()
                except SessionElsewhere as elsewhere:
                    owner, repo = elsewhere.owner, elsewhere.repo
            if not self._peers.known(owner):
                # The store names a socket that is none of ours: never connect there.
                logger.error("the state store places a session with an unknown worker")
                break
            try:
                body = json.dumps(request, ensure_ascii=False).encode("utf-8")
                status, raw, kind = await self._peers.post(owner, _wire.INVOKE_PATH, body)
            except _PeerGone:
                self._routes.pop(key, None)
                taken = functools.partial(self._placement.take_over, session, owner, repo=repo)
                if await anyio.to_thread.run_sync(taken):
                    logger.warning("an engine worker is gone; its session is resumed here from "
                                   "its saved staged change")
                owner = None
                continue
            except (httpx2.ConnectError, httpx2.ConnectTimeout):  # nothing was sent
                return json_response(_wire.error(
                    "internal_error", "the engine is busy; try again shortly"), 503)
            except httpx2.HTTPError as exc:
                logger.warning("a call forwarded to another engine worker failed (%s)",
                               type(exc).__name__)
                return json_response(_wire.error(
                    "internal_error", "the engine did not answer; the call may have taken "
                    "effect, check `status` first"), 500)
            if status == MISDIRECTED:  # that worker let the session go: ask again
                self._routes.pop(key, None)
                owner = None
                continue
            self._remember(key, owner, repo)
            return Response(raw, status, headers={**HEADERS, "content-type": kind})
        return json_response(_wire.error("internal_error", "the engine failed"), 500)

    def _remember(self, key: tuple[str | None, str], owner: str, repo: str | None) -> None:
        self._routes[key] = (owner, repo)
        self._routes.move_to_end(key)
        while len(self._routes) > ROUTES_KEPT:
            self._routes.popitem(last=False)
