"""The engine as authorization server: ``POST /token`` and its RFC 8414 metadata.

``POST /token`` exchanges an identity provider's JWT for a root chit token (RFC
8693, docs/exchange.md); ``GET /.well-known/oauth-authorization-server``
describes it. Both exist only when ``chit engine serve`` is given an exchange
function; errors are RFC 6749 section 5.2 answers carrying chit's code.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.errors import ChitError, ConfigurationError
from gateway import _oauth, _wire
from gateway.engine_server.requests import HEADERS, RequestError, guard, json_response

__all__ = ["MAX_TOKEN_REQUEST_BYTES", "TOKEN_PATH", "Exchange", "oauth_error", "token_routes"]

logger = logging.getLogger("chit.engine_server")

TOKEN_PATH = _oauth.TOKEN_PATH
MAX_TOKEN_REQUEST_BYTES = 32 * 1024
_TOKEN_HEADERS = {**HEADERS, "pragma": "no-cache"}  # RFC 6749 section 5.1
Exchange = Callable[[str], dict[str, Any]]
"""Verifies a subject JWT and mints: ``engine.admin.exchange.TokenExchange`` bound to a home."""

_GRANT_TYPE = _oauth.GRANT_TYPE
_JWT_TYPE = _oauth.JWT_TOKEN_TYPE
_ACCESS_TYPE = _oauth.ACCESS_TOKEN_TYPE
_TOKEN_FIELDS = frozenset({
    "grant_type", "subject_token", "subject_token_type", "audience", "resource", "scope",
    "requested_token_type",
})


def oauth_error(status: int, error: str, description: str, **extra: Any) -> JSONResponse:
    """An RFC 6749 section 5.2 error answer; chit's own code rides along as ``chit_error``."""
    return json_response(
        {"error": error, "error_description": description, **extra}, status, _TOKEN_HEADERS
    )


def token_routes(
    exchange: Exchange,
    issuer: str | None,
    *,
    allowed_hosts: frozenset[str] | None,
    limiter: anyio.CapacityLimiter,
) -> list[Route]:
    """The routes of ``POST /token`` and of the authorization-server metadata.

    Args:
        exchange: Verifies a subject JWT and mints a root token.
        issuer: The issuer identifier (an origin, already checked), or ``None``
            when this server knows no URL of its own: the metadata path then
            answers 404 saying why.
        allowed_hosts: ``Host`` values to accept (TCP), else ``None``.
        limiter: The engine threads the exchanges share with the engine's calls.

    Returns:
        The two routes.
    """

    async def token(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
        except RequestError as exc:
            return oauth_error(exc.status, "invalid_request", exc.answer["error"]["message"])
        fields, problem = await _token_form(request)
        if problem is not None:
            return problem
        if fields.get("grant_type") != _GRANT_TYPE:
            return oauth_error(400, "unsupported_grant_type", f"grant_type must be {_GRANT_TYPE}")
        if fields.get("subject_token_type") != _JWT_TYPE:
            return oauth_error(400, "invalid_request", f"subject_token_type must be {_JWT_TYPE}")
        subject = fields.get("subject_token", "")
        if not subject:
            return oauth_error(400, "invalid_request", "subject_token is required")
        requested = fields.get("requested_token_type")
        if requested is not None and requested != _ACCESS_TYPE:
            return oauth_error(
                400, "invalid_request", f"only {_ACCESS_TYPE} tokens are issued here")
        if fields.get("scope") is not None:
            # RFC 8693 §2.1: the server must not ignore a narrowing it was asked
            # for; the issuer's mapping alone decides a token's operations here.
            return oauth_error(
                400, "invalid_scope", "scope is not supported: the issuer's mapping in the "
                "policy decides the token's operations and paths (narrow it afterwards with "
                "chit attenuate)")
        return await _exchange(subject)

    async def _exchange(subject: str) -> Response:
        try:
            minted = await anyio.to_thread.run_sync(exchange, subject, limiter=limiter)
        except ChitError as exc:
            if exc.code == "internal_error":  # e.g. the call log could not be written
                return oauth_error(500, "server_error", exc.message, chit_error=exc.code)
            return oauth_error(400, "invalid_request", exc.message, chit_error=exc.code,
                               **exc.hints)
        except ConfigurationError:
            logger.error("token exchange: the engine's configuration is unusable; run "
                         "`chit policy check` and `chit keys list`")
            return oauth_error(500, "server_error", "the engine's configuration is unusable",
                               chit_error="internal_error")
        except Exception:
            logger.exception("token exchange failed")
            return oauth_error(500, "server_error", "the engine failed",
                               chit_error="internal_error")
        return json_response({
            "access_token": minted["token"],
            "issued_token_type": _ACCESS_TYPE,
            "token_type": "Bearer",
            "expires_in": minted["expires_in"],
        }, headers=_TOKEN_HEADERS)

    async def metadata(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
        except RequestError as exc:
            return json_response(exc.answer, exc.status)
        if issuer is None:
            return json_response(_wire.error(
                "not_found", "this engine does not know its URL: start chit engine serve "
                "with --public-url to publish authorization-server metadata",
            ), 404)
        return json_response(_oauth.authorization_server_metadata(issuer))

    return [
        Route(TOKEN_PATH, token, methods=["POST"]),
        Route(_oauth.METADATA_PATH, metadata, methods=["GET"]),
    ]


async def _token_form(request: Request) -> tuple[dict[str, str], JSONResponse | None]:
    """The form-encoded body of ``POST /token``: each parameter at most once (RFC 6749 3.2)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}, oauth_error(
            400, "invalid_request", "the body must be application/x-www-form-urlencoded"
        )
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_TOKEN_REQUEST_BYTES):
        # Refused before reading: a huge declared length would hold the connection.
        return {}, oauth_error(
            413, "invalid_request", f"the body exceeds {MAX_TOKEN_REQUEST_BYTES} bytes"
        )
    raw = b""
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_TOKEN_REQUEST_BYTES:
                return {}, oauth_error(
                    413, "invalid_request", f"the body exceeds {MAX_TOKEN_REQUEST_BYTES} bytes"
                )
    except ClientDisconnect:  # the client left mid-body: nothing to answer, nothing to log
        return {}, oauth_error(400, "invalid_request", "the request body was cut short")
    try:
        pairs = urllib.parse.parse_qsl(
            raw.decode("ascii"), keep_blank_values=True, strict_parsing=True,
            max_num_fields=len(_TOKEN_FIELDS),
        )
    except (UnicodeDecodeError, ValueError):
        return {}, oauth_error(400, "invalid_request", "the body is not a valid form")
    fields: dict[str, str] = {}
    for key, value in pairs:
        if key in fields:
            return {}, oauth_error(400, "invalid_request", "a parameter is repeated")
        if key not in _TOKEN_FIELDS:
            return {}, oauth_error(400, "invalid_request", "unknown parameter")
        fields[key] = value
    return fields, None
