"""``chit approvals list|show``, ``chit approve`` and ``chit deny`` (docs/approvals.md).

A decision is made by an operator the approval's table lists (by name or
group), signed with that operator's key, verified against the key registered
in the store, countersigned with the engine's signing key, stored (only while
the approval is pending and unexpired) and appended to the call log as an
operator entry.
"""

from __future__ import annotations

import logging
import os
import time
import unicodedata
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from engine.admin.operators import default_key_file, load_operator_key
from engine.admin.state import state_store
from engine.audit import calllog, provenance, redact, tlog
from engine.auth import discharge, signkeys
from engine.errors import ConfigurationError, StoreError
from engine.limits import LIMITS
from engine.service.policyfile import load_policy
from engine.state import Store
from engine.state.approvals import Approval

__all__ = [
    "REFUSALS",
    "ApprovalRefusedError",
    "decide_approval",
    "decision_arguments",
    "list_approvals",
    "show_approval",
]

logger = logging.getLogger("chit.admin")

REFUSALS: Final = frozenset(
    {"unknown_approval", "unknown_operator", "not_an_approver", "wrong_key", "already_decided",
     "expired"}
)
"""Why a decision is refused (stable; docs/errors.md)."""
DECISION_TOOLS: Final = {"approved": "chit approve", "denied": "chit deny"}
"""The ``tool`` of a decision's call-log entry (agent ``(operator)``)."""


class ApprovalRefusedError(ValueError):
    """A decision the CLI refuses; nothing is recorded.

    Args:
        reason: One of :data:`REFUSALS`.
        message: For the operator, one line.
    """

    def __init__(self, reason: str, message: str) -> None:
        if reason not in REFUSALS:
            raise ValueError(f"unknown refusal {reason!r}")
        super().__init__(f"refused ({reason}): {message}")
        self.reason = reason


def list_approvals(
    home: str | os.PathLike[str], *, every: bool = False, state: str | None = None,
    now: int | None = None,
) -> list[dict[str, Any]]:
    """Approvals, newest first: the pending, unexpired ones (``every``: all of them).

    Returns:
        :meth:`~engine.state.approvals.Approval.to_dict` of each.
    """
    at = int(time.time()) if now is None else now
    with state_store(home, state) as store:
        found = store.approvals(now=at, pending=not every)
    return [a.to_dict() for a in found]


def show_approval(
    home: str | os.PathLike[str], approval_id: str, *, state: str | None = None
) -> dict[str, Any]:
    """One approval, whatever its state.

    Raises:
        ApprovalRefusedError: ``unknown_approval``.
    """
    with state_store(home, state) as store:
        found = store.approval(approval_id)
    if found is None:
        raise ApprovalRefusedError("unknown_approval", f"no approval {approval_id!r}")
    return found.to_dict()


def _note(note: str) -> str:
    text = unicodedata.normalize("NFC", note)
    most = LIMITS.approval_note_chars
    if len(text) > most or any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text):
        raise ValueError(f"--note is one line of at most {most} characters")
    return text


def decide_approval(
    home: str | os.PathLike[str],
    approval_id: str,
    *,
    operator: str,
    approve: bool,
    key: str | os.PathLike[str] | None = None,
    note: str = "",
    state: str | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    """Approve or deny a pending approval as ``operator``, signing with its key.

    Args:
        home: The chit home (its signing key countersigns).
        approval_id: The approval's id.
        operator: The operator's registered name.
        approve: Approve (True) or deny (False).
        key: The operator's private key file; default ``<home>/operators/NAME.key``.
        note: A note for the agent and the record (one line).
        state: A state URL; ``None``: the home's.
        now: Unix seconds (tests); default the clock.

    Returns:
        ``{"id", "decision", "operator", "operator_key", "decided_at",
        "expires_at", "note", "logged"}``.

    Raises:
        ApprovalRefusedError: ``unknown_approval``, ``unknown_operator``,
            ``not_an_approver``, ``wrong_key``, ``already_decided`` or
            ``expired``; nothing is recorded.
        ValueError: If the note is not one line within the bound, or the key
            file is unusable.
        ConfigurationError: If the home has no active signing key.
    """
    text = _note(note)
    at = int(time.time()) if now is None else now
    decision = "approved" if approve else "denied"
    with state_store(home, state) as store:
        approval = store.approval(approval_id)
        if approval is None:
            raise ApprovalRefusedError("unknown_approval", f"no approval {approval_id!r}")
        registered = {o.name: o for o in store.operators()}.get(operator)
        if registered is None:
            raise ApprovalRefusedError(
                "unknown_operator", f"{operator!r} is not a registered operator"
            )
        _check_open(approval, at)
        if not _lists(approval, operator, registered.groups):
            raise ApprovalRefusedError(
                "not_an_approver",
                f"{operator} is not among the approvers of {approval.id} "
                f"({approval.rule}: {', '.join(approval.approvers)})",
            )
        private = load_operator_key(key if key is not None else default_key_file(home, operator))
        public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        if discharge.key_id(public) != registered.key_id:
            raise ApprovalRefusedError(
                "wrong_key", f"the key file is not {operator}'s registered key "
                f"({registered.key_id})",
            )
        body = discharge.encode_body(discharge.DecisionBody(
            approval.id, bytes.fromhex(approval.request), decision, operator,
            registered.key_id, text, at, approval.expires_at,
        ))
        operator_sig = discharge.operator_sign(body, private)
        signed = _countersigned(home, store, body, operator_sig, operator, registered.key_id)
        if not store.decide_approval(approval.id, state=decision, decision=signed,
                                     decided_by=operator, decided_at=at, note=text):
            now_seen = store.approval(approval.id)
            _check_open(now_seen or approval, at)
            raise ApprovalRefusedError("already_decided", f"{approval.id} was just decided")
        logged = _log(home, store, approval, decision, operator, registered.key_id, text, at)
        _announce_decision(store, at)
    return {
        "id": approval.id, "decision": decision, "operator": operator,
        "operator_key": registered.key_id, "decided_at": at, "expires_at": approval.expires_at,
        "note": text, "logged": logged,
    }


def _announce_decision(store: Store, at: int) -> None:
    """Move the change feed: edges tell clients waiting on a URL elicitation (docs/approvals.md §8).

    The decision stands if this fails; a client retries on its own.
    """
    try:
        store.announce("approval", now=at)
    except StoreError:
        logger.warning("the decision could not be announced on the change feed; waiting "
                       "clients learn of it when they retry")


def _check_open(approval: Approval, at: int) -> None:
    if approval.state == "expired" or (approval.state == "pending" and at >= approval.expires_at):
        raise ApprovalRefusedError("expired", f"{approval.id} expired; the agent must ask again")
    if approval.state != "pending":
        raise ApprovalRefusedError(
            "already_decided", f"{approval.id} is {approval.state} already"
            + (f" (by {approval.decided_by})" if approval.decided_by else "")
        )


def _lists(approval: Approval, operator: str, groups: tuple[str, ...]) -> bool:
    """Whether the approval's table lists ``operator`` by name or by one of its groups."""
    return any(
        a == operator or (a.startswith("group:") and a.removeprefix("group:") in groups)
        for a in approval.approvers
    )


def _countersigned(
    home: str | os.PathLike[str], store: Store, body: bytes, operator_sig: bytes,
    operator: str, key_id: str,
) -> bytes:
    """Verify the operator's signature with the registered key, countersign, envelope it."""
    public = store.operator_key(operator, key_id)
    try:
        if public is None:
            raise InvalidSignature
        Ed25519PublicKey.from_public_bytes(public).verify(
            operator_sig, discharge.OPERATOR_CONTEXT + body
        )
    except (InvalidSignature, ValueError):
        raise ApprovalRefusedError("wrong_key", "the signature does not verify under the "
                                   "registered key") from None
    engine = signkeys.active_signing_key(home)
    engine_sig = discharge.countersign(body, operator_sig, engine.sign)
    return discharge.encode_discharge(
        discharge.Discharge(body, operator_sig, engine.key_id, engine_sig)
    )


def _log(
    home: str | os.PathLike[str], store: Store, approval: Approval, decision: str,
    operator: str, key_id: str, note: str, at: int,
) -> bool:
    """Append the decision to the call log as an operator entry; False if it could not be."""
    try:
        policy_hash = provenance.policy_hash(load_policy(home))
    except ConfigurationError:
        policy_hash = "-"
    record = calllog.CallRecord(
        time=at,
        agent=calllog.OPERATOR,
        chain=(),
        session=redact.redact_label(approval.session),
        tool=DECISION_TOOLS[decision],
        arguments=redact.redact_arguments(decision_arguments(approval, operator, key_id, note)),
        decision="allowed",
        code=None,
        policy_hash=policy_hash,
        catalog_hash=None,
        repo=approval.repo,
    )
    try:
        tlog.append(store, [record], calllog.LogSigner(home), now=at, checkpoint_entries=1)
    except (ConfigurationError, OSError):
        return False
    return True


def decision_arguments(
    approval: Approval, operator: str, key_id: str, note: str
) -> dict[str, Any]:
    """The ``arguments`` of a decision's call-log entry (docs/audit.md §8)."""
    return {
        "approval": approval.id,
        "request": approval.request,
        "tool": approval.tool,
        "agent": approval.agent,
        "operator": operator,
        "operator_key": key_id,
        "note": note,
    }
