"""How an MCP client learns that a call waits for an approval, per protocol era.

The engine answers such a call with the refusal ``approval_required`` and the
approval's id (docs/approvals.md). Under MCP 2026-07-28 the edges turn it into
an input-required result whose sealed ``requestState`` carries the id
(``state``); under 2025-11-25, for a client that declared ``elicitation.url``,
into the error -32042 with one URL-mode elicitation, and into
``notifications/elicitation/complete`` once the approval is decided
(``answers``, ``waits``); a retry whose approval is still pending is held
a few seconds (``hold``); otherwise the ``isError`` result every refusal gets.
docs/approvals.md, "MCP clients".
"""

from gateway.approvals.answers import (
    APPROVAL_REQUIRED,
    URL_ELICITATION_REQUIRED,
    approval_of,
    elicitation_message,
    era_answer,
    input_required,
    takes_url_elicitation,
    url_elicitation,
)
from gateway.approvals.hold import HOLD_SECONDS, MAX_HOLDS, Hold
from gateway.approvals.state import (
    AUDIENCE,
    REQUEST_STATE_SECONDS,
    approval_from_state,
    install_boundary,
    principal_of,
    state_security,
    valid_approval_id,
)
from gateway.approvals.waits import MAX_WAITS, Waits, pending_in_status

__all__ = [
    "APPROVAL_REQUIRED",
    "AUDIENCE",
    "HOLD_SECONDS",
    "MAX_HOLDS",
    "MAX_WAITS",
    "REQUEST_STATE_SECONDS",
    "URL_ELICITATION_REQUIRED",
    "Hold",
    "Waits",
    "approval_from_state",
    "approval_of",
    "elicitation_message",
    "era_answer",
    "input_required",
    "install_boundary",
    "pending_in_status",
    "principal_of",
    "state_security",
    "takes_url_elicitation",
    "url_elicitation",
    "valid_approval_id",
]
