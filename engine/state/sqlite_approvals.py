"""Operators and approvals on SQLite (docs/approvals.md).

Each write is one ``BEGIN IMMEDIATE`` transaction or one conditional
statement, so a decision, a use and an expiry of one approval never both win.
"""

from __future__ import annotations

import json

from engine.limits import LIMITS
from engine.state._sqlite import SQLiteBase, guard_errors
from engine.state.approvals import (
    Approval,
    Operator,
    approval_of,
    approval_row,
    check_approval,
    check_operator,
    operator_of,
    sql_for,
)

__all__ = ["SQLiteApprovals"]

_SQL = sql_for("?")


@guard_errors
class SQLiteApprovals(SQLiteBase):
    """The operators and approvals part of :class:`~engine.state.sqlite.SQLiteStore`."""

    def add_operator(self, operator: Operator) -> bool:
        """Register an operator key; False if an operator of that name is registered.

        Raises:
            ValueError: If the operator is malformed, or ``LIMITS.operators``
                are registered; nothing is written.
        """
        check_operator(operator)
        with self._write() as db:
            if db.execute(_SQL["operator_active"], (operator.name,)).fetchone() is not None:
                return False
            if db.execute(_SQL["operator_count"]).fetchone()[0] >= LIMITS.operators:
                raise ValueError(f"the store registers at most {LIMITS.operators} operators")
            db.execute(
                _SQL["operator_insert"],
                (operator.key_id, operator.name, operator.public,
                 json.dumps(sorted(operator.groups)), operator.added_at),
            )
        return True

    def remove_operator(self, name: str, *, now: int) -> bool:
        """Remove an operator; False if none of that name is registered."""
        return self._connect().execute(_SQL["operator_remove"], (now, name)).rowcount == 1

    def operators(self, *, removed: bool = False) -> list[Operator]:
        """Registered operators by name; ``removed``: removed ones too."""
        rows = self._connect().execute(_SQL["operators"]).fetchall()
        found = [op for op in map(operator_of, rows) if op is not None]
        return [op for op in found if removed or not op.removed_at]

    def operator_key(self, name: str, key_id: str) -> bytes | None:
        """The public key ``key_id`` of operator ``name``, removed or not."""
        row = self._connect().execute(_SQL["operator_key"], (name, key_id)).fetchone()
        return None if row is None else bytes(row[0])

    def create_approval(self, approval: Approval, *, now: int) -> Approval | None:
        """Record a pending approval unless one is live for its request (see the contract)."""
        check_approval(approval)
        with self._write() as db:
            live = db.execute(_SQL["approval_live"], (approval.request,)).fetchone()
            if live is not None:
                found = approval_of(live)
                if found is not None:
                    return found
            waiting = db.execute(
                _SQL["approval_pending_count"], (approval.token_id, now)
            ).fetchone()[0]
            if waiting >= LIMITS.approvals_pending_per_token:
                return None
            db.execute(_SQL["approval_insert"], approval_row(approval))
        return approval

    def approval(self, approval_id: str) -> Approval | None:
        """The approval ``approval_id``, or ``None``."""
        row = self._connect().execute(_SQL["approval"], (approval_id,)).fetchone()
        return None if row is None else approval_of(row)

    def approval_for_request(self, request: str) -> Approval | None:
        """The newest approval of a request hash, or ``None``."""
        row = self._connect().execute(_SQL["approval_latest"], (request,)).fetchone()
        return None if row is None else approval_of(row)

    def approvals(
        self, *, now: int, pending: bool = True, session: tuple[str, str] | None = None
    ) -> list[Approval]:
        """Approvals newest first, at most ``LIMITS.approvals_listed`` (see the contract)."""
        most = LIMITS.approvals_listed
        db = self._connect()
        if session is not None:
            rows = db.execute(_SQL["approvals_session"], (*session, now, most)).fetchall()
        elif pending:
            rows = db.execute(_SQL["approvals_pending"], (now, most)).fetchall()
        else:
            rows = db.execute(_SQL["approvals_all"], (most,)).fetchall()
        return [a for a in map(approval_of, rows) if a is not None]

    def decide_approval(
        self, approval_id: str, *, state: str, decision: bytes, decided_by: str,
        decided_at: int, note: str,
    ) -> bool:
        """Record a decision if the approval is still pending and unexpired."""
        if state not in ("approved", "denied"):
            raise ValueError("a decision is approved or denied")
        cursor = self._connect().execute(
            _SQL["approval_decide"],
            (state, decision, decided_by, decided_at, note, approval_id, decided_at),
        )
        return cursor.rowcount == 1

    def use_approval(self, approval_id: str, *, now: int) -> bool:
        """Mark an approved, unexpired approval used; False if it is not."""
        return self._connect().execute(
            _SQL["approval_use"], (now, approval_id, now)
        ).rowcount == 1

    def restore_approval(self, approval_id: str) -> bool:
        """Put a used approval back to approved."""
        return self._connect().execute(_SQL["approval_restore"], (approval_id,)).rowcount == 1

    def expire_approval(self, approval_id: str, *, now: int) -> bool:
        """Mark a live approval whose time is up expired."""
        return self._connect().execute(
            _SQL["approval_expire"], (approval_id, now)
        ).rowcount == 1
