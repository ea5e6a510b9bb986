"""The ASGI app of ``chit-engine/1``: the engine's ``offer`` and ``invoke`` over HTTP.

``POST /v1/offer`` and ``POST /v1/invoke`` answer what the engine answers, as it
is (its typed answers are ``dict`` objects of their JSON form); ``POST
/v1/warning`` gives the vital-sign line for the MCP instructions; ``GET
/v1/health`` names the API. Requests are checked first (``requests``); ``POST
/v1/changes`` waits on the engine's change feed (``changes``), and the token
exchange routes join when there is an exchange function (``token``). The API:
docs/engine-api.md.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.service import SessionElsewhere
from gateway import _wire, telemetry
from gateway.engine_server.changes import changes_route
from gateway.engine_server.forward import SessionRouting
from gateway.engine_server.requests import (
    RequestError,
    guard,
    invoke_request,
    json_response,
    offer_request,
    read_json,
)
from gateway.engine_server.token import Exchange, token_routes
from gateway.mcp_server import EngineClient

__all__ = ["ENGINE_THREADS", "MAX_REQUEST_BYTES", "EngineClient", "create_app"]

logger = logging.getLogger("chit.engine_server")

MAX_REQUEST_BYTES = 16 * 1024 * 1024
ENGINE_THREADS = 32  # engine calls running at once; the rest wait for a thread


def create_app(
    engine: EngineClient,
    *,
    allowed_hosts: frozenset[str] | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    engine_threads: int = ENGINE_THREADS,
    exchange: Exchange | None = None,
    issuer: str | None = None,
    stopping: threading.Event | None = None,
    sessions: SessionRouting | None = None,
) -> Starlette:
    """Build the ASGI app that serves ``engine`` as ``chit-engine/1``.

    Args:
        engine: The engine (:class:`engine.service.Engine`, or anything with its
            ``offer``/``invoke``).
        allowed_hosts: ``Host`` header values to accept (``host:port``), for TCP
            listeners, against DNS rebinding; ``None`` accepts any (unix sockets,
            which no browser reaches).
        max_request_bytes: Largest request body accepted (413 above).
        engine_threads: Engine calls running at once.
        exchange: Serve ``POST /token`` with it (RFC 8693); ``None``: no such endpoint.
        issuer: With ``exchange``, the authorization server's issuer identifier
            (an origin checked by :func:`gateway._oauth.check_issuer_url`): serve
            its RFC 8414 metadata at ``/.well-known/oauth-authorization-server``.
            ``None`` (a unix socket without ``--public-url``): that path answers
            404 saying why, since no URL of this server is known.
        stopping: Set when the server starts stopping: each ``POST /v1/changes``
            then answers within a second, so no long poll holds up the shutdown.
        sessions: For a worker among several: where each ``invoke`` is
            answered, here or at the worker holding its session
            (:mod:`gateway.engine_server.forward`); ``None``: always here.

    Returns:
        A Starlette application.
    """
    limiter = anyio.CapacityLimiter(engine_threads)

    async def run(call: Callable[[], dict[str, Any]]) -> JSONResponse:
        try:
            answer = await anyio.to_thread.run_sync(call, limiter=limiter)
        except SessionElsewhere:
            raise  # for the session routing: another worker holds the session
        except Exception:
            # The engine shapes its own failures; this is a bug. Never forward its text.
            logger.exception("the engine raised instead of answering")
            return json_response(_wire.error("internal_error", "the engine failed"), 500)
        return json_response(answer)  # a typed answer is a dict of its JSON form

    async def offer(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
            token, repo = offer_request(await read_json(request, max_request_bytes))
        except RequestError as exc:
            return json_response(exc.answer, exc.status)
        call = telemetry.engine_offer(
            token, functools.partial(engine.offer, token, repo=repo), request.headers)
        return await run(_noting(engine, request, call))

    async def invoke(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
            doc = await read_json(request, max_request_bytes)
            asked = invoke_request(doc)
        except RequestError as exc:
            return json_response(exc.answer, exc.status)
        call = functools.partial(
            engine.invoke, asked.token, asked.tool, asked.arguments,
            session=asked.session, offered_catalog_hash=asked.offered_catalog_hash,
            repo=asked.repo, **({} if asked.approval is None else {"approval": asked.approval}),
        )
        call = _noting(engine, request,
                       telemetry.engine_call(asked.tool, asked.token, call, request.headers))
        if sessions is not None:
            return await sessions.invoke(asked, doc, functools.partial(run, call))
        return await run(call)

    async def warning(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
            token, repo = offer_request(await read_json(request, max_request_bytes))
        except RequestError as exc:
            return json_response(exc.answer, exc.status)

        def line() -> dict[str, Any]:
            return {"ok": True, "warning": engine.warning(token, repo=repo)}

        return await run(line)

    async def health(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
        except RequestError as exc:
            return json_response(exc.answer, exc.status)
        return json_response({"ok": True, "api": _wire.API})

    routes = [
        Route(_wire.OFFER_PATH, offer, methods=["POST"]),
        Route(_wire.INVOKE_PATH, invoke, methods=["POST"]),
        Route(_wire.WARNING_PATH, warning, methods=["POST"]),
        Route(_wire.HEALTH_PATH, health, methods=["GET"]),
        changes_route(engine, allowed_hosts=allowed_hosts, max_request_bytes=max_request_bytes,
                      stopping=stopping or threading.Event()),
    ]
    if exchange is not None:
        routes += token_routes(exchange, issuer, allowed_hosts=allowed_hosts, limiter=limiter)
    return Starlette(
        routes=routes, exception_handlers={HTTPException: _http_error, 500: _server_error}
    )


_UNVERIFIED = ("token_", "caveat_", "delegation_", "internal_error")


def _noting(engine: EngineClient, request: Request, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call``, then let the engine note the edge that sent it, if its token was verified.

    The ``chit-edge`` header is untrusted: only an engine that notes edges
    (:meth:`engine.service.Engine.note_edge`) does, escaping and cutting the
    value, and only for a request whose token verified, so a caller without a
    good token cannot fill the presence table. It never refuses or delays the
    call.
    """
    note = getattr(engine, "note_edge", None)
    if not callable(note):
        return call

    def noted() -> Any:
        answer = call()
        code = getattr(answer, "code", None)
        if not (isinstance(code, str) and code.startswith(_UNVERIFIED)):
            note(request.headers.get(_wire.EDGE_HEADER))
        return answer

    return noted


async def _http_error(_request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        answer = _wire.error("not_found", f"no such endpoint; this engine speaks {_wire.API}")
    elif status == 405:
        answer = _wire.error("invalid_argument", "method not allowed on this endpoint")
    else:
        answer = _wire.error("internal_error", "the engine server failed")
    response = json_response(answer, status)
    if isinstance(exc, HTTPException) and exc.headers:
        response.headers.update(exc.headers)  # Allow, on 405
    return response


async def _server_error(_request: Request, _exc: Exception) -> Response:
    return json_response(_wire.error("internal_error", "the engine server failed"), 500)
