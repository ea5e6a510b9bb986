"""Operators and approvals in the state store: records, the contract, the statements.

Operators (who may approve, with their Ed25519 public keys) and approvals
(requests waiting for, or decided by, an operator) live in the store, so every
engine and CLI command on one database sees the same ones (docs/approvals.md).
Both stores run the statements here (``?`` placeholders, PostgreSQL's
``%s`` substituted); each state change is one conditional ``UPDATE``, so of two
racing writers exactly one wins.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from engine.limits import LIMITS

__all__ = [
    "APPROVAL_STATES",
    "OPERATOR_NAME",
    "Approval",
    "ApprovalStore",
    "Operator",
    "approval_of",
    "approval_row",
    "check_approval",
    "check_operator",
    "operator_of",
    "sql_for",
]

OPERATOR_NAME: Final = re.compile(r"[a-z0-9][a-z0-9._-]*", re.ASCII)
"""An operator's or a group's name (at most ``LIMITS.operator_name_chars``)."""
APPROVAL_STATES: Final = ("pending", "approved", "denied", "used", "expired")
"""Every state an approval can be in; ``pending``, ``approved`` and ``denied`` are live."""
_LIVE: Final = ("pending", "approved", "denied")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Operator:
    """One registered operator key.

    Attributes:
        name: The operator's name.
        key_id: The key's id (:func:`engine.auth.discharge.key_id`).
        public: The raw 32-byte Ed25519 public key.
        groups: The groups the operator belongs to, sorted.
        added_at: When it was registered, unix seconds.
        removed_at: When it was removed, unix seconds; 0 while it may approve.
    """

    name: str
    key_id: str
    public: bytes
    groups: tuple[str, ...]
    added_at: int
    removed_at: int = 0


def check_operator(operator: Operator) -> None:
    """Refuse an operator no store keeps (every store calls this before writing one).

    Raises:
        ValueError: If the name or a group is not ``[a-z0-9][a-z0-9._-]*`` of at
            most ``LIMITS.operator_name_chars``, there are more than
            ``LIMITS.operator_groups`` groups, or the key is not 32 bytes with a
            32-hex-digit id.
    """
    names = (operator.name, *operator.groups)
    if not all(
        isinstance(n, str) and len(n) <= LIMITS.operator_name_chars and OPERATOR_NAME.fullmatch(n)
        for n in names
    ):
        raise ValueError(
            f"an operator or group name is a-z 0-9 . _ - (starting with a letter or digit), "
            f"at most {LIMITS.operator_name_chars} characters"
        )
    if len(operator.groups) > LIMITS.operator_groups:
        raise ValueError(f"an operator belongs to at most {LIMITS.operator_groups} groups")
    if (
        type(operator.public) is not bytes
        or len(operator.public) != 32
        or not _HEX32.fullmatch(operator.key_id)
    ):
        raise ValueError("an operator key is 32 bytes with a 32-hex-digit id")


def operator_of(row: Sequence[Any]) -> Operator | None:
    """An ``operators`` row read back, or ``None`` if it does not read as one."""
    try:
        groups = json.loads(row[3])
        operator = Operator(
            str(row[0]), str(row[1]), bytes(row[2]), tuple(sorted(str(g) for g in groups)),
            int(row[4]), int(row[5]),
        )
        check_operator(operator)
    except (TypeError, ValueError):
        return None
    return operator


@dataclass(frozen=True)
class Approval:
    """One approval: a request that waits for an operator, and what became of it.

    Attributes:
        id: ``apr_`` + 26 base32 characters.
        request: The request hash, 64 lowercase hex (docs/approvals.md).
        tool: The tool called.
        agent: The calling agent.
        token_id: The calling token's id (hex).
        session: The session the call came from.
        repo: The repository's name.
        asked: What is asked, for people: ``{"tool", "paths", "summary"}``
            (commit) or ``{"tool", "paths", "grant"}`` (issue_sub_token).
        approvers: The table's approvers (names, ``group:NAME``).
        reason: The table's reason.
        rule: The table's location in the policy (``approval[0]``).
        created_at: When it was requested, unix seconds.
        expires_at: ``created_at`` + the table's ``ttl``.
        state: One of :data:`APPROVAL_STATES`.
        decision: The signed discharge (``chit-approval/1``); empty until decided.
        decided_by: The deciding operator's name; empty until decided.
        decided_at: When it was decided; 0 until then.
        note: The operator's note.
        used_at: When an approved call ran under it; 0 until then.
    """

    id: str
    request: str
    tool: str
    agent: str
    token_id: str
    session: str
    repo: str
    asked: dict[str, Any]
    approvers: tuple[str, ...]
    reason: str
    rule: str
    created_at: int
    expires_at: int
    state: str = "pending"
    decision: bytes = b""
    decided_by: str = ""
    decided_at: int = 0
    note: str = ""
    used_at: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``chit approvals show --json`` prints.

        ``state`` is the decision (``approved``, ``denied``, ...) and
        ``discharge`` the signed decision as hex (empty while pending), so
        ``decision`` means one thing across chit's JSON: an outcome.
        """
        return {
            "id": self.id, "request": self.request, "tool": self.tool, "agent": self.agent,
            "token_id": self.token_id, "session": self.session, "repo": self.repo,
            "asked": self.asked, "approvers": list(self.approvers), "reason": self.reason,
            "rule": self.rule, "created_at": self.created_at, "expires_at": self.expires_at,
            "state": self.state, "discharge": self.decision.hex(),
            "decided_by": self.decided_by, "decided_at": self.decided_at, "note": self.note,
            "used_at": self.used_at,
        }


def check_approval(approval: Approval) -> None:
    """Refuse an approval no store keeps (every store calls this before writing one).

    Raises:
        ValueError: If the request hash is not 64 hex digits, the state is not
            known, or the times are not integers (a programming error).
    """
    if (
        not _HEX64.fullmatch(approval.request)
        or approval.state not in APPROVAL_STATES
        or type(approval.created_at) is not int
        or type(approval.expires_at) is not int
    ):
        raise ValueError("not an approval a store keeps")


_COLUMNS = (
    "id, request, tool, agent, token_id, session, repo, asked, approvers, reason, rule,"
    " created_at, expires_at, state, decision, decided_by, decided_at, note, used_at"
)


def approval_row(approval: Approval) -> tuple[Any, ...]:
    """The values of an ``approvals`` row, in the statements' column order."""
    return (
        approval.id, approval.request, approval.tool, approval.agent, approval.token_id,
        approval.session, approval.repo, json.dumps(approval.asked, sort_keys=True),
        json.dumps(list(approval.approvers)), approval.reason, approval.rule,
        approval.created_at, approval.expires_at, approval.state, approval.decision,
        approval.decided_by, approval.decided_at, approval.note, approval.used_at,
    )


def approval_of(row: Sequence[Any]) -> Approval | None:
    """An ``approvals`` row read back, or ``None`` if it does not read as one."""
    try:
        asked = json.loads(row[7])
        approvers = json.loads(row[8])
        if not isinstance(asked, dict) or not isinstance(approvers, list):
            return None
        approval = Approval(
            str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]),
            str(row[6]), asked, tuple(str(a) for a in approvers), str(row[9]), str(row[10]),
            int(row[11]), int(row[12]), str(row[13]), bytes(row[14]), str(row[15]),
            int(row[16]), str(row[17]), int(row[18]),
        )
        check_approval(approval)
    except (TypeError, ValueError):
        return None
    return approval


def _select(rest: str) -> str:
    return "SELECT " + _COLUMNS + " FROM approvals " + rest  # noqa: S608 - fixed text


_SQL = {
    "operator_active": "SELECT 1 FROM operators WHERE name = ? AND removed_at = 0",
    "operator_count": "SELECT COUNT(*) FROM operators WHERE removed_at = 0",
    "operator_insert": "INSERT INTO operators (key_id, name, public, groups, added_at,"
    " removed_at) VALUES (?, ?, ?, ?, ?, 0)",
    "operator_remove": "UPDATE operators SET removed_at = ? WHERE name = ? AND removed_at = 0",
    "operators": "SELECT name, key_id, public, groups, added_at, removed_at FROM operators"
    " ORDER BY name, added_at, key_id",
    "operator_key": "SELECT public FROM operators WHERE name = ? AND key_id = ?",
    "approval_live": _select(
        "WHERE request = ? AND state IN ('pending', 'approved', 'denied')"
        " ORDER BY created_at DESC, id LIMIT 1"
    ),
    "approval_pending_count": "SELECT COUNT(*) FROM approvals WHERE token_id = ?"
    " AND state = 'pending' AND expires_at > ?",
    "approval_insert": "INSERT INTO approvals (" + _COLUMNS + ") VALUES ("  # noqa: S608
    + ", ".join(["?"] * 19) + ")",
    "approval": _select("WHERE id = ?"),
    "approval_latest": _select("WHERE request = ? ORDER BY created_at DESC, id LIMIT 1"),
    "approvals_all": _select("ORDER BY created_at DESC, id LIMIT ?"),
    "approvals_pending": _select(
        "WHERE state = 'pending' AND expires_at > ? ORDER BY created_at DESC, id LIMIT ?"
    ),
    "approvals_session": _select(
        "WHERE session = ? AND repo = ? AND state = 'pending' AND expires_at > ?"
        " ORDER BY created_at DESC, id LIMIT ?"
    ),
    "approval_decide": "UPDATE approvals SET state = ?, decision = ?, decided_by = ?,"
    " decided_at = ?, note = ? WHERE id = ? AND state = 'pending' AND expires_at > ?",
    "approval_use": "UPDATE approvals SET state = 'used', used_at = ? WHERE id = ?"
    " AND state = 'approved' AND expires_at > ?",
    "approval_restore": "UPDATE approvals SET state = 'approved', used_at = 0 WHERE id = ?"
    " AND state = 'used'",
    "approval_expire": "UPDATE approvals SET state = 'expired' WHERE id = ?"
    " AND state IN ('pending', 'approved', 'denied') AND expires_at <= ?",
}


def sql_for(mark: str) -> dict[str, str]:
    """The statements with ``mark`` as the placeholder (``?`` for SQLite, ``%s`` for psycopg)."""
    return {name: text.replace("?", mark) for name, text in _SQL.items()}


class ApprovalStore(Protocol):
    """The operators and approvals part of :class:`~engine.state.store.Store`.

    Every method may raise :class:`~engine.errors.StoreError` when the store
    fails; what failed changed nothing.
    """

    def add_operator(self, operator: Operator) -> bool:
        """Register an operator key; False if an operator of that name is registered.

        Raises:
            ValueError: If the operator is malformed (:func:`check_operator`) or
                ``LIMITS.operators`` operators are registered; nothing is written.
        """

    def remove_operator(self, name: str, *, now: int) -> bool:
        """Remove an operator (its key keeps verifying what it signed); False if none."""

    def operators(self, *, removed: bool = False) -> list[Operator]:
        """Registered operators by name (``removed``: removed ones too)."""

    def operator_key(self, name: str, key_id: str) -> bytes | None:
        """The public key ``key_id`` of operator ``name``, removed or not, or ``None``."""

    def create_approval(self, approval: Approval, *, now: int) -> Approval | None:
        """Record a pending approval unless one is live for its request.

        One transaction: if an approval of the same request is pending,
        approved or denied, that one is returned and nothing is written;
        otherwise ``approval`` is written, unless its token already has
        ``LIMITS.approvals_pending_per_token`` unexpired pending approvals
        (then ``None``).

        Raises:
            ValueError: If the approval is malformed (:func:`check_approval`).
        """

    def approval(self, approval_id: str) -> Approval | None:
        """The approval ``approval_id``, or ``None``."""

    def approval_for_request(self, request: str) -> Approval | None:
        """The newest approval of a request hash (64 hex), whatever its state, or ``None``."""

    def approvals(
        self, *, now: int, pending: bool = True, session: tuple[str, str] | None = None
    ) -> list[Approval]:
        """Approvals, newest first, at most ``LIMITS.approvals_listed``.

        Args:
            now: Unix seconds (pending ones that expired by then are left out).
            pending: Only unexpired pending ones; ``False``: every one.
            session: ``(session, repo)``: only that session's unexpired pending ones.
        """

    def decide_approval(
        self, approval_id: str, *, state: str, decision: bytes, decided_by: str,
        decided_at: int, note: str,
    ) -> bool:
        """Record a decision if the approval is still pending and unexpired at ``decided_at``.

        Raises:
            ValueError: If ``state`` is not ``approved`` or ``denied``.
        """

    def use_approval(self, approval_id: str, *, now: int) -> bool:
        """Mark an approved, unexpired approval used; False if it is not (single use)."""

    def restore_approval(self, approval_id: str) -> bool:
        """Put a used approval back to approved (its call was refused after all)."""

    def expire_approval(self, approval_id: str, *, now: int) -> bool:
        """Mark a live approval whose time is up expired; False if it is not one."""
