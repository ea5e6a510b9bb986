"""The sealed ``requestState`` of MCP 2026-07-28: what it carries and who may echo it.

An edge's input-required result carries ``{"v": 1, "approval": ID}``. The SDK's
``RequestStateBoundary`` seals it (AES-256-GCM, under keys derived from the
home's root keys: ``engine.admin.request_state_keys``) in an envelope bound to
the method, the tool, a digest of the arguments, the token's identity and
repository, the audience ``chit`` and an expiry; it opens an echoed one before
any handler runs, and a tampered, expired or foreign one is JSON-RPC -32602
"Invalid or expired requestState" (the reason goes to the log only, never the
key). docs/approvals.md, "MCP clients".
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError

from gateway._wire import is_approval_id

__all__ = [
    "AUDIENCE",
    "REQUEST_STATE_SECONDS",
    "Principal",
    "approval_from_state",
    "install_boundary",
    "principal_of",
    "state_for",
    "state_security",
    "valid_approval_id",
]

REQUEST_STATE_SECONDS = 7 * 24 * 3600.0  # a sealed state's life: an approval's longest ttl
AUDIENCE = "chit"  # the envelope's audience: state another service sealed is refused
_VERSION = 1

Principal = Callable[[Any], str | None]
"""Who a request's state is bound to, from the handler context (raise: refuse)."""


def valid_approval_id(value: object) -> bool:
    """Whether ``value`` has the form of an approval id (``apr_`` + 26 base32 letters)."""
    return is_approval_id(value)


def state_security(keys: Sequence[bytes] | None, principal: Principal) -> RequestStateSecurity:
    """The protection of an edge's ``requestState``.

    Args:
        keys: 32-byte keys, newest first (the first seals, all open), from
            ``engine.admin.request_state_keys``, or shared by a supervisor with
            its edge workers; ``None``: one random key for this process only
            (state sealed before a restart is then refused, and the client
            calls again without it).
        principal: The identity a state is bound to: the token's id and the
            repository (:func:`principal_of`).

    Returns:
        The policy: the keys, :data:`REQUEST_STATE_SECONDS`, the principal,
        :data:`AUDIENCE`.
    """
    ring = list(keys) if keys else [os.urandom(32)]
    return RequestStateSecurity(
        keys=ring, ttl=REQUEST_STATE_SECONDS, bind_principal=principal, audience=AUDIENCE
    )


def principal_of(token_id: str, repo: str | None) -> str:
    """The principal a state is bound to: a token identity in one repository."""
    return json.dumps([token_id, repo], separators=(",", ":"))


def install_boundary(server: Server[Any], security: RequestStateSecurity) -> None:
    """Seal every outgoing and open every echoed ``requestState`` of ``server``."""
    server.middleware.append(RequestStateBoundary(security, default_audience=AUDIENCE))


def state_for(approval_id: str) -> str:
    """The plaintext state of a call that waits for ``approval_id`` (sealed on the way out)."""
    return json.dumps({"v": _VERSION, "approval": approval_id}, separators=(",", ":"))


def approval_from_state(params: types.CallToolRequestParams) -> str | None:
    """The approval id a retried call echoes in its (already opened) ``requestState``.

    Args:
        params: The ``tools/call`` params, after the boundary replaced the
            sealed state with the plaintext this edge minted.

    Returns:
        The id, or ``None`` if the call carries no state.

    Raises:
        MCPError: -32602 for a state that is not one this edge mints (it
            cannot happen past the boundary; refused all the same).
    """
    state = params.request_state
    if state is None:
        return None
    try:
        doc = json.loads(state)
    except ValueError:
        doc = None
    approval = doc.get("approval") if isinstance(doc, dict) and doc.get("v") == _VERSION else None
    if not valid_approval_id(approval):
        raise MCPError(types.INVALID_PARAMS, "Invalid or expired requestState",
                       {"reason": "invalid_request_state"})
    return str(approval)
