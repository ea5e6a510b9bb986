"""What ``chit-engine/1`` accepts of a request before the engine sees it.

Browser origins and foreign ``Host`` headers, the content type, the body's size
and strict JSON, and each endpoint's fields; a request refused here gets the
engine's refusal shape with a 4xx status and never reaches the engine or its call
log (docs/engine-api.md, "Requests refused before the engine").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.service import LIMITS
from gateway import _wire

__all__ = [
    "HEADERS",
    "MAX_POSITION",
    "InvokeRequest",
    "RequestError",
    "changes_request",
    "guard",
    "invoke_request",
    "json_response",
    "offer_request",
    "read_json",
]

HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
_INVOKE_FIELDS = frozenset(
    {"token", "tool", "arguments", "session", "offered_catalog_hash", "repo", "approval"}
)
_OFFER_FIELDS = frozenset({"token", "repo"})
_CHANGES_FIELDS = frozenset({"after", "timeout"})
MAX_POSITION = (1 << 63) - 1  # feed positions are 64-bit integers in every store


class RequestError(Exception):
    """A request refused before it reaches the engine.

    Args:
        status: The HTTP status to answer with.
        code: A stable code (docs/errors.md).
        message: A caller-safe explanation.
        **hints: Extra JSON fields (``fields``).
    """

    def __init__(self, status: int, code: str, message: str, **hints: Any) -> None:
        super().__init__(code)
        self.status = status
        self.answer = _wire.error(code, message, **hints)


def json_response(
    answer: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> JSONResponse:
    """``answer`` as JSON at ``status``, with :data:`HEADERS` unless ``headers`` are given."""
    return JSONResponse(answer, status_code=status, headers=headers or HEADERS)


def guard(request: Request, allowed_hosts: frozenset[str] | None) -> None:
    """Refuse a browser's request, and on TCP a rebound name.

    A browser page must never drive the engine: browsers send ``Origin`` on
    cross-origin POSTs, and a rebound name shows up as a foreign ``Host``.

    Args:
        request: The request.
        allowed_hosts: ``Host`` values to accept, or ``None`` for any (unix sockets).

    Raises:
        RequestError: 403 ``invalid_argument``.
    """
    if "origin" in request.headers:
        raise RequestError(403, "invalid_argument", "browser requests are refused")
    if allowed_hosts is not None and request.headers.get("host", "") not in allowed_hosts:
        raise RequestError(403, "invalid_argument", "unexpected Host header")


async def read_json(request: Request, max_request_bytes: int) -> dict[str, Any]:
    """Read a request's body: ``application/json``, at most ``max_request_bytes``, strict JSON.

    Args:
        request: The request (already through :func:`guard`).
        max_request_bytes: The largest body accepted; ``Content-Length`` is
            checked first, then the bytes as they arrive.

    Returns:
        The JSON object.

    Raises:
        RequestError: 415 for another content type, 413 ``limit_exceeded`` for
            a body too large, 400 ``invalid_argument`` for one that is not a
            strict JSON object.
    """
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise RequestError(415, "invalid_argument", "the body must be application/json")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_request_bytes):
        raise RequestError(413, "limit_exceeded", f"the body exceeds {max_request_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_request_bytes:
            raise RequestError(
                413, "limit_exceeded", f"the body exceeds {max_request_bytes} bytes"
            )
        chunks.append(chunk)
    try:
        doc = _wire.loads_strict(b"".join(chunks))
    except _wire.WireError as exc:
        raise RequestError(400, "invalid_argument", str(exc)) from None
    if not isinstance(doc, dict):
        raise RequestError(400, "invalid_argument", "the body must be a JSON object")
    return doc


@dataclass(frozen=True)
class InvokeRequest:
    """The fields of ``POST /v1/invoke``, checked (docs/engine-api.md)."""

    token: str
    tool: str
    arguments: dict[str, Any] | None
    session: str
    offered_catalog_hash: str | None
    repo: str | None = None
    approval: str | None = None  # the approval id a client echoed (docs/approvals.md)


def offer_request(doc: dict[str, Any]) -> tuple[str, str | None]:
    """The token and repository of ``POST /v1/offer``'s body ``{"token", "repo"?}``.

    Raises:
        RequestError: 400 ``invalid_argument`` (``fields``) for an unknown,
            missing or mistyped field.
    """
    _fields(doc, required={"token"}, allowed=_OFFER_FIELDS)
    return _string(doc, "token"), _repo(doc)


def invoke_request(doc: dict[str, Any]) -> InvokeRequest:
    """The fields of ``POST /v1/invoke``'s body.

    Raises:
        RequestError: 400 ``invalid_argument`` (``fields``) for an unknown,
            missing or mistyped field, or an ``approval`` that is not an
            approval id.
    """
    _fields(doc, required={"token", "tool", "session"}, allowed=_INVOKE_FIELDS)
    token, tool, session = (_string(doc, k) for k in ("token", "tool", "session"))
    arguments = doc.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise RequestError(
            400, "invalid_argument", "arguments must be an object or null",
            fields=["arguments"],
        )
    listed = doc.get("offered_catalog_hash")
    if listed is not None and not isinstance(listed, str):
        raise RequestError(
            400, "invalid_argument", "offered_catalog_hash must be a string or null",
            fields=["offered_catalog_hash"],
        )
    approval = doc.get("approval")
    if approval is not None and not _wire.is_approval_id(approval):
        raise RequestError(
            400, "invalid_argument", "approval must be an approval id (apr_...) or null",
            fields=["approval"],
        )
    return InvokeRequest(token, tool, arguments, session, listed, _repo(doc), approval)


def changes_request(doc: dict[str, Any]) -> tuple[int, float]:
    """The fields of ``POST /v1/changes``'s body ``{"after", "timeout"}``.

    Returns:
        ``(after, timeout)``: the last feed position the caller saw (``-1``:
        none, answer at once) and the seconds to wait at most.

    Raises:
        RequestError: 400 ``invalid_argument`` (``fields``) for an unknown,
            missing or mistyped field, ``after`` below ``-1`` or past 2^63 - 1,
            or ``timeout`` outside ``0..LIMITS.change_wait_seconds``.
    """
    _fields(doc, required={"after", "timeout"}, allowed=_CHANGES_FIELDS)
    after, timeout = doc["after"], doc["timeout"]
    if isinstance(after, bool) or not isinstance(after, int) or not -1 <= after <= MAX_POSITION:
        raise RequestError(
            400, "invalid_argument", "after must be an integer, -1 or a feed position",
            fields=["after"],
        )
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 <= timeout <= LIMITS.change_wait_seconds
    ):
        raise RequestError(
            400, "invalid_argument",
            f"timeout must be a number of seconds from 0 to {LIMITS.change_wait_seconds:g}",
            fields=["timeout"],
        )
    return after, float(timeout)


def _fields(doc: dict[str, Any], *, required: set[str], allowed: frozenset[str] | set[str]) -> None:
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise RequestError(
            400, "invalid_argument", "unknown fields", fields=[f[:64] for f in unknown[:16]]
        )
    missing = sorted(required - set(doc))
    if missing:
        raise RequestError(400, "invalid_argument", "missing fields", fields=missing)


def _repo(doc: dict[str, Any]) -> str | None:
    """The optional ``repo`` field: a string or null (the engine judges the name)."""
    repo = doc.get("repo")
    if repo is not None and not isinstance(repo, str):
        raise RequestError(400, "invalid_argument", "repo must be a string or null",
                           fields=["repo"])
    return repo


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str):
        raise RequestError(400, "invalid_argument", f"{key} must be a string", fields=[key])
    return value
