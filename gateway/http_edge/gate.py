"""The MCP endpoints' gate: a bearer token on every request, sessions bound to it.

Before the SDK sees a request, the gate reads the token's claimed identity,
refuses a missing or unparsable token with 401 and the RFC 6750 challenge,
opens a 2025-11-25 session only for a token the engine accepts on the
repository of the request's path (``/mcp`` or ``/repos/NAME/mcp``) and binds
it to that identity and repository, and in the stateless era keeps state only
for accepted identities (docs/http.md, "Sessions", "Several repositories").
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from engine.errors import ChitError, InvalidRequestError
from engine.service import Refused, validate_session_id
from gateway.http_edge.connections import (
    REPO_KEY,
    REQUEST_KEY,
    BoundSession,
    Connections,
    Credentials,
    Principal,
    claimed_principal,
    offer_state,
)
from gateway.http_edge.engine_calls import EngineCalls
from gateway.mcp_server import INVALID_PARAMS, TOKEN_REFUSED

__all__ = [
    "MAX_SESSIONS_PER_IDENTITY",
    "RESUME_HEADER",
    "SESSION_HEADER",
    "SESSION_TOKEN_MISMATCH_STATUS",
    "Gate",
    "jsonrpc_error",
    "repo_not_found",
]

logger = logging.getLogger("chit.gateway")

SESSION_HEADER = "mcp-session-id"
RESUME_HEADER = "chit-session"  # the engine session a client resumes (docs/http.md)
SESSION_TOKEN_MISMATCH_STATUS = 403
MAX_SESSIONS_PER_IDENTITY = 64  # open 2025-11-25 sessions opened by one token identity


def repo_not_found(code: str = "not_found") -> Response:
    """404 for a path naming no repository this token may use here.

    The same bytes for every name (none is repeated): the answer says nothing
    of which repositories exist. ``code`` is ``repo_required`` for ``/mcp`` of
    an engine that serves several.
    """
    message = ("this engine serves several repositories: use /repos/NAME/mcp"
               if code == "repo_required" else "no such repository")
    return jsonrpc_error(404, -32600, code, {"error": code, "message": message})


def jsonrpc_error(status: int, code: int, message: str, data: Any = None,
                  headers: dict[str, str] | None = None) -> Response:
    """A JSON-RPC error body (id null: the client pairs it with its request) at ``status``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": error}, status_code=status, headers=headers
    )


def _described(code: str) -> str:
    """``code`` if it has the form of chit's codes, else ``token_malformed``.

    The challenge's ``error_description`` is a quoted-string limited to
    printable ASCII without the double quote and backslash (RFC 6750 §3); chit's codes are
    lower-case words joined by ``_``, and nothing else is let through.
    """
    if 0 < len(code) <= 64 and all(c == "_" or "a" <= c <= "z" for c in code):
        return code
    return "token_malformed"


def _resumed(headers: Headers) -> str | None:
    """The engine session a ``Chit-Session`` header names, if any.

    Only its form is checked here; the engine decides whether the request's
    token identity may use it (``session_token_mismatch`` otherwise).

    Raises:
        InvalidRequestError: ``invalid_argument`` for a malformed or repeated header.
    """
    values = headers.getlist(RESUME_HEADER)
    if not values:
        return None
    if len(values) > 1:
        raise InvalidRequestError("invalid_argument", "send at most one Chit-Session header")
    return validate_session_id(values[0].strip())


class Gate:
    """The raw ASGI endpoint of ``/mcp``, in front of the SDK's session manager.

    Args:
        engine: The engine's calls.
        connections: The edge's connections.
        manager: The SDK's streamable HTTP session manager.
        metadata_url: The RFC 9728 metadata URL of ``/mcp`` named in
            ``WWW-Authenticate`` (a repository's path appends its own).
        session_idle_timeout: Seconds an idle session lives; what a ``429``'s
            ``Retry-After`` is computed from.
    """

    def __init__(
        self,
        engine: EngineCalls,
        connections: Connections,
        manager: StreamableHTTPSessionManager,
        metadata_url: str,
        *,
        session_idle_timeout: float = 1800.0,
    ) -> None:
        self._engine = engine
        self._connections = connections
        self._manager = manager
        self._metadata_url = metadata_url
        self._idle_timeout = session_idle_timeout

    def __repr__(self) -> str:
        return f"Gate({self._metadata_url})"

    def _metadata_for(self, repo: str | None) -> str:
        if repo is None:
            return self._metadata_url
        return self._metadata_url.removesuffix("/mcp") + f"/repos/{repo}/mcp"

    def unauthorized(
        self, code: str, message: str, *, presented: bool, repo: str | None = None
    ) -> Response:
        """401 with the RFC 6750 challenge and the chit refusal as a JSON-RPC error.

        Args:
            code: chit's refusal code (``token_missing`` when no bearer token
                was sent, else the engine's or the parser's, e.g. ``token_expired``).
            message: The refusal's message, for the JSON body only.
            presented: Whether a bearer token was sent. RFC 6750 §3.1: with
                none the challenge carries no error attribute; with one it
                carries ``error="invalid_token"`` and ``error_description``
                set to ``code``, so a client can say why instead of starting
                an OAuth flow.
            repo: The repository of the request's path, if any.

        Returns:
            The ``401`` response.
        """
        metadata = self._metadata_for(repo)
        challenge = f'Bearer resource_metadata="{metadata}"'
        if presented:
            challenge = (f'Bearer error="invalid_token", error_description="{_described(code)}", '
                         f'resource_metadata="{metadata}"')
        return jsonrpc_error(
            401, TOKEN_REFUSED, f"token refused: {code}", {"error": code, "message": message},
            headers={"WWW-Authenticate": challenge},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a request to an MCP endpoint, or pass it to the SDK with its credentials."""
        repo = scope.get(REPO_KEY)
        headers = Headers(scope=scope)
        authorization = headers.getlist("authorization")
        if len(authorization) > 1:
            # RFC 6750 §3.1: more than one way of sending the token is invalid_request.
            message = "send the token in exactly one Authorization header"
            await jsonrpc_error(
                400, TOKEN_REFUSED, "invalid_argument",
                {"error": "invalid_argument", "message": message},
                headers={"WWW-Authenticate": 'Bearer error="invalid_request", '
                         'error_description="one Authorization header"'},
            )(scope, receive, send)
            return
        scheme, _, token = (authorization[0] if authorization else "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            response = self.unauthorized(
                "token_missing", "send the chit token as Authorization: Bearer chit_...",
                presented=False, repo=repo,
            )
            await response(scope, receive, send)
            return
        try:
            principal = claimed_principal(token)
        except ChitError as exc:
            await self.unauthorized(exc.code, exc.message, presented=True, repo=repo)(
                scope, receive, send)
            return
        try:
            resumed = _resumed(headers)
        except ChitError as exc:
            refusal = {"error": "invalid_argument", "message": exc.message}
            await jsonrpc_error(400, INVALID_PARAMS, "invalid_argument", refusal)(
                scope, receive, send)
            return
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._stateless(scope, receive, send, token, principal, repo, resumed)
            return
        session_id = headers.get(SESSION_HEADER)
        if session_id is None:
            await self._open(scope, receive, send, token, principal, repo, resumed)
            return
        await self._on_session(scope, receive, send, token, principal, session_id, repo)

    async def _stateless(
        self, scope: Scope, receive: Receive, send: Send, token: str, principal: Principal,
        repo: str | None, resumed: str | None = None,
    ) -> None:
        """The 2026-07-28 era (the SDK routes on the version header the same way).

        No session: the engine session belongs to the token's identity in the
        path's repository, or is the one the request's ``Chit-Session`` header
        names.
        """
        key = (principal, repo)
        state = self._connections.stateless.get(key)
        if state is None:
            # State is kept only for an identity the engine accepts: tokens
            # forged with made-up keys must not push out other agents' state.
            if await self._refused(token, repo, scope, receive, send) is not None:
                return
            state = self._connections.stateless_state(principal, repo)
        else:
            self._connections.stateless.move_to_end(key)
        scope[REQUEST_KEY] = Credentials(token, principal, state, repo, resume=resumed)
        await self._manager.handle_request(scope, receive, send)

    async def _on_session(
        self, scope: Scope, receive: Receive, send: Send, token: str, principal: Principal,
        session_id: str, repo: str | None,
    ) -> None:
        """A request on a 2025-11-25 session: only its own identity may use it, at its path."""
        session = self._connections.sessions.get(session_id)
        if session is None or session.repo != repo:
            # A session opened at another repository's path is not one of this
            # path's: the same answer as for no session at all.
            await jsonrpc_error(404, -32600, "Session not found")(scope, receive, send)
            return
        if session.principal != principal:
            # A session id alone grants nothing: it stays with the identity that opened it.
            logger.warning("session_token_mismatch: a session of agent %r was presented "
                           "with another token", session.principal.agent)
            await jsonrpc_error(
                SESSION_TOKEN_MISMATCH_STATUS, TOKEN_REFUSED, "session_token_mismatch",
                {"error": "session_token_mismatch",
                 "message": "this session belongs to another token"},
            )(scope, receive, send)
            return
        if token != session.token:
            # Same claimed identity, other text: the identity is only parsed here, so
            # the engine must accept this token before it may act on the session (a
            # forged tag would otherwise close the session or take over its watch).
            if await self._refused(token, repo, scope, receive, send) is not None:
                return
            session.token = token
        scope[REQUEST_KEY] = Credentials(token, principal, session, repo)
        session.inflight += 1
        try:
            status = await self._forward(scope, receive, send)
        finally:
            session.inflight -= 1
            session.idle_since = time.monotonic()
        if status == 404 or (scope["method"] == "DELETE" and status is not None and status < 300):
            self._connections.sessions.pop(session_id, None)

    async def _open(
        self, scope: Scope, receive: Receive, send: Send, token: str, principal: Principal,
        repo: str | None, resumed: str | None = None,
    ) -> None:
        """A request without a session id: opens a session if the engine accepts the token.

        With a ``Chit-Session`` header the new MCP session's calls run in that
        engine session (resumed), else in a new one.
        """
        if scope["method"] != "POST":  # the SDK answers (no session id, no stream)
            await self._manager.handle_request(scope, receive, send)
            return
        answer = await self._engine.offer(token, repo)
        if isinstance(answer, Refused):
            await self._refusal(answer, repo)(scope, receive, send)
            return
        connections = self._connections
        sessions = connections.sessions
        # Counted and reserved with no await in between, and the reservation held
        # until the session is recorded: requests opening sessions at once each
        # see the others (docs/http.md, "Sessions").
        held = connections.held(principal)
        if held >= MAX_SESSIONS_PER_IDENTITY:
            # One token must not use up the edge's sessions for every other agent.
            message = (f"this token already holds {held} open sessions; close one (DELETE) "
                       "or let one expire")
            soonest = connections.soonest_expiry(principal, self._idle_timeout)
            wait = math.ceil(self._idle_timeout if soonest is None else soonest)
            await jsonrpc_error(429, TOKEN_REFUSED, "limit_exceeded", {
                "error": "limit_exceeded", "message": message,
                "limit": MAX_SESSIONS_PER_IDENTITY},
                headers={"Retry-After": str(max(1, wait))})(scope, receive, send)
            return
        session = BoundSession(
            principal=principal, repo=repo, token=token, baseline=offer_state(answer)
        )
        if resumed is not None:
            session.engine_session = resumed
        scope[REQUEST_KEY] = Credentials(token, principal, session, repo)

        reserved = True
        connections.reserve(principal)

        def opened(session_id: str) -> None:
            nonlocal reserved
            if session_id not in sessions:
                sessions[session_id] = session
            if reserved:  # the recorded session now counts instead
                reserved = False
                connections.release(principal)

        try:
            await self._forward(scope, receive, send, on_session=opened)
        finally:
            if reserved:  # no session was opened
                connections.release(principal)

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send,
        on_session: Callable[[str], None] | None = None,
    ) -> int | None:
        """Pass a request to the SDK; return its status (``on_session`` sees a new session id)."""
        status: int | None = None

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                session_id = Headers(raw=message.get("headers", [])).get(SESSION_HEADER)
                if on_session is not None and session_id and status < 400:
                    on_session(session_id)  # bound before the client can learn the id
            await send(message)

        await self._manager.handle_request(scope, receive, watch)
        return status

    async def _refused(
        self, token: str, repo: str | None, scope: Scope, receive: Receive, send: Send
    ) -> Refused | None:
        """Ask the engine for ``token``'s offer; if refused, answer the request and return why."""
        answer = await self._engine.offer(token, repo)
        if not isinstance(answer, Refused):
            return None
        await self._refusal(answer, repo)(scope, receive, send)
        return answer

    def _refusal(self, answer: Refused, repo: str | None) -> Response:
        """Answer a refused offer.

        401 for a token the engine refused; 403 for one not good for the
        path's repository (``repo_outside_scope``, whether or not it exists);
        404 for a repository in scope that is not served, or ``/mcp`` of an
        engine with several; 503 if the engine could not answer, or refuses
        every call because its policy file is invalid (``policy_denied``,
        rule ``policy``).
        """
        if answer.code == "internal_error":
            return jsonrpc_error(503, TOKEN_REFUSED, "engine unavailable", answer.error)
        if answer.code == "repo_outside_scope":
            return jsonrpc_error(403, TOKEN_REFUSED, "repo_outside_scope", answer.error)
        if answer.code in ("not_found", "repo_required"):
            return repo_not_found(answer.code)
        if answer.code == "policy_denied" and answer.hints.get("rule") == "policy":
            # The operator's policy file is invalid: the server's fault, not the
            # token's. A 401 would send an OAuth-aware client to log in again.
            return jsonrpc_error(503, TOKEN_REFUSED, "policy_denied", answer.error)
        return self.unauthorized(answer.code, answer.message, presented=True, repo=repo)
