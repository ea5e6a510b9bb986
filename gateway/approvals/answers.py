"""The answer to a call that waits for an approval, in the client's protocol era.

- 2026-07-28: an input-required result whose ``requestState`` carries the
  approval id (sealed by the boundary, :mod:`gateway.approvals.state`) and
  whose ``_meta["chit/approval"]`` is the engine's refusal, for a client that
  shows it; the client retries with the state.
- 2025-11-25, a client that declared ``elicitation.url``, when the edge has a
  page to send a person to: JSON-RPC -32042 with one URL-mode elicitation whose
  ``elicitationId`` is the approval id.
- Otherwise: the ``isError`` result with the refusal's JSON, as every refusal.

docs/approvals.md, "MCP clients".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engine.service import CallAnswer, Refused
from gateway.approvals.state import state_for, valid_approval_id

__all__ = [
    "APPROVAL_REQUIRED",
    "META_KEY",
    "URL_ELICITATION_REQUIRED",
    "Elicited",
    "approval_of",
    "elicitation_message",
    "era_answer",
    "input_required",
    "takes_url_elicitation",
    "url_elicitation",
]

APPROVAL_REQUIRED = "approval_required"
URL_ELICITATION_REQUIRED = types.URL_ELICITATION_REQUIRED  # -32042
META_KEY = "chit/approval"  # the refusal, in an input-required result's _meta
_PATHS_SHOWN = 5  # paths an elicitation's message names before "and N more"
_FIELD_CHARS = 200  # characters of one name, path or reason in a message

Elicited = Callable[[dict[str, Any]], None]
"""Told of each approval sent to a client as a URL elicitation (the edge follows it)."""


def approval_of(answer: CallAnswer) -> dict[str, Any] | None:
    """The ``approval`` hints of an ``approval_required`` refusal; ``None`` for any other answer.

    A refusal whose hints do not name a well-formed id is not treated as one
    (the client gets it as the plain ``isError`` result).
    """
    if not isinstance(answer, Refused) or answer.code != APPROVAL_REQUIRED:
        return None
    approval = answer.error.get("approval")
    if not isinstance(approval, dict) or not valid_approval_id(approval.get("id")):
        return None
    return approval


def input_required(answer: Refused, approval: dict[str, Any]) -> types.InputRequiredResult:
    """The 2026-07-28 answer: retry with this state once the approval is decided.

    Args:
        answer: The engine's ``approval_required`` refusal.
        approval: Its ``approval`` hints (:func:`approval_of`).

    Returns:
        An input-required result with no input requests, the plaintext state
        (the boundary seals it) and the refusal under ``_meta["chit/approval"]``.
    """
    return types.InputRequiredResult(
        request_state=state_for(str(approval["id"])), _meta={META_KEY: answer.error}
    )


def takes_url_elicitation(ctx: Any) -> bool:
    """Whether the client of a handler's ``ctx`` declared the ``elicitation.url`` capability."""
    caps = getattr(ctx.session, "client_capabilities", None)
    elicitation = getattr(caps, "elicitation", None)
    return getattr(elicitation, "url", None) is not None


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= _FIELD_CHARS else text[: _FIELD_CHARS - 3] + "..."


def elicitation_message(approval: dict[str, Any]) -> str:
    """What waits and who approves, in one paragraph for a person.

    Args:
        approval: The ``approval`` hints of the refusal (docs/approvals.md).

    Returns:
        The message: the tool and its paths (the first few), the approvers,
        the rule's reason, how an approver decides and what the agent does next.
    """
    tool = _short(approval.get("tool") or "a tool")
    paths = [p for p in approval.get("paths") or [] if isinstance(p, str)]
    what = f"The call to {tool}"
    if paths:
        shown = ", ".join(_short(p) for p in paths[:_PATHS_SHOWN])
        more = len(paths) - _PATHS_SHOWN
        what += f" on {shown}" + (f" and {more} more" if more > 0 else "")
    approvers = [_short(a) for a in approval.get("approvers") or [] if isinstance(a, str)]
    who = ", ".join(approvers[:_PATHS_SHOWN]) if approvers else "an operator the policy names"
    text = f"{what} waits for an approval by {who}."
    reason = approval.get("reason")
    if isinstance(reason, str) and reason:
        text += f" Reason: {_short(reason)}."
    text += (
        f" An approver runs `chit approve {approval['id']} --as NAME` (or `chit deny`);"
        " then call the tool again with the same arguments."
    )
    return text


def url_elicitation(approval: dict[str, Any], url: str) -> UrlElicitationRequiredError:
    """The 2025-11-25 error -32042 naming one URL-mode elicitation for ``approval``.

    Args:
        approval: The ``approval`` hints (:func:`approval_of`).
        url: Where a person sees what is asked (the HTTP edge's page or the
            ``[approvals] url`` template, filled in).

    Returns:
        The error to raise from the handler; ``elicitationId`` is the approval id.
    """
    elicitation = types.ElicitRequestURLParams(
        message=elicitation_message(approval), url=url, elicitation_id=str(approval["id"])
    )
    return UrlElicitationRequiredError([elicitation], "This call waits for an approval")


def era_answer(
    ctx: Any,
    answer: CallAnswer,
    *,
    url: Callable[[str], str | None],
    elicited: Elicited,
) -> types.InputRequiredResult | None:
    """The answer to a waiting call in the client's era, or ``None`` for the usual result.

    Args:
        ctx: The ``tools/call`` handler's context (protocol version, session).
        answer: The engine's answer.
        url: The page of an approval id for a person, or ``None`` if there is none.
        elicited: Called with the hints before the -32042 error is raised.

    Returns:
        An input-required result (2026-07-28), or ``None``: the caller answers
        with the usual ``tools/call`` result (any other answer, or a
        2025-11-25 client without URL elicitation or without a page).

    Raises:
        UrlElicitationRequiredError: -32042 for a 2025-11-25 client that
            declared ``elicitation.url``, when there is a page.
    """
    approval = approval_of(answer)
    if approval is None or not isinstance(answer, Refused):
        return None
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return input_required(answer, approval)
    if not takes_url_elicitation(ctx):
        return None
    page = url(str(approval["id"]))
    if page is None:
        return None
    elicited(approval)
    raise url_elicitation(approval, page)
