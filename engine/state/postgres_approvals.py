"""Operators and approvals on PostgreSQL (docs/approvals.md).

Registering an operator and creating an approval are transactions serialised
by an advisory lock (so two engines never both create an approval for one
request, nor register one name twice); decisions, uses and expiries are one
conditional ``UPDATE`` each, so of racing writers exactly one wins.
"""

from __future__ import annotations

import json

from engine.limits import LIMITS
from engine.state._postgres import PostgresBase, advisory_key, guard_errors
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

__all__ = ["PostgresApprovals"]

_SQL = sql_for("%s")
_OPERATORS_LOCK = f"SELECT pg_advisory_xact_lock({advisory_key('chit', 'operators')})"
_APPROVALS_LOCK = f"SELECT pg_advisory_xact_lock({advisory_key('chit', 'approvals')})"


@guard_errors
class PostgresApprovals(PostgresBase):
    """The operators and approvals part of :class:`~engine.state.postgres.PostgresStore`."""

    def add_operator(self, operator: Operator) -> bool:
        """Register an operator key; False if an operator of that name is registered.

        Raises:
            ValueError: If the operator is malformed, or ``LIMITS.operators``
                are registered; nothing is written.
        """
        check_operator(operator)
        with self._tx_begun(_OPERATORS_LOCK) as (conn, _row):
            if conn.execute(_SQL["operator_active"], (operator.name,)).fetchone() is not None:
                return False
            count = conn.execute(_SQL["operator_count"]).fetchone()
            if count is not None and count[0] >= LIMITS.operators:
                raise ValueError(f"the store registers at most {LIMITS.operators} operators")
            conn.execute(
                _SQL["operator_insert"],
                (operator.key_id, operator.name, operator.public,
                 json.dumps(sorted(operator.groups)), operator.added_at),
            )
        return True

    def remove_operator(self, name: str, *, now: int) -> bool:
        """Remove an operator; False if none of that name is registered."""
        with self._conn() as conn:
            return conn.execute(_SQL["operator_remove"], (now, name)).rowcount == 1

    def operators(self, *, removed: bool = False) -> list[Operator]:
        """Registered operators by name; ``removed``: removed ones too."""
        with self._conn() as conn:
            rows = conn.execute(_SQL["operators"]).fetchall()
        found = [op for op in map(operator_of, rows) if op is not None]
        return [op for op in found if removed or not op.removed_at]

    def operator_key(self, name: str, key_id: str) -> bytes | None:
        """The public key ``key_id`` of operator ``name``, removed or not."""
        with self._conn() as conn:
            row = conn.execute(_SQL["operator_key"], (name, key_id)).fetchone()
        return None if row is None else bytes(row[0])

    def create_approval(self, approval: Approval, *, now: int) -> Approval | None:
        """Record a pending approval unless one is live for its request (see the contract)."""
        check_approval(approval)
        with self._tx_begun(_APPROVALS_LOCK) as (conn, _row):
            live = conn.execute(_SQL["approval_live"], (approval.request,)).fetchone()
            if live is not None:
                found = approval_of(live)
                if found is not None:
                    return found
            waiting = conn.execute(
                _SQL["approval_pending_count"], (approval.token_id, now)
            ).fetchone()
            if waiting is not None and waiting[0] >= LIMITS.approvals_pending_per_token:
                return None
            conn.execute(_SQL["approval_insert"], approval_row(approval))
        return approval

    def approval(self, approval_id: str) -> Approval | None:
        """The approval ``approval_id``, or ``None``."""
        with self._conn() as conn:
            row = conn.execute(_SQL["approval"], (approval_id,)).fetchone()
        return None if row is None else approval_of(row)

    def approval_for_request(self, request: str) -> Approval | None:
        """The newest approval of a request hash, or ``None``."""
        with self._conn() as conn:
            row = conn.execute(_SQL["approval_latest"], (request,)).fetchone()
        return None if row is None else approval_of(row)

    def approvals(
        self, *, now: int, pending: bool = True, session: tuple[str, str] | None = None
    ) -> list[Approval]:
        """Approvals newest first, at most ``LIMITS.approvals_listed`` (see the contract)."""
        most = LIMITS.approvals_listed
        with self._conn() as conn:
            if session is not None:
                rows = conn.execute(
                    _SQL["approvals_session"], (*session, now, most)
                ).fetchall()
            elif pending:
                rows = conn.execute(_SQL["approvals_pending"], (now, most)).fetchall()
            else:
                rows = conn.execute(_SQL["approvals_all"], (most,)).fetchall()
        return [a for a in map(approval_of, rows) if a is not None]

    def decide_approval(
        self, approval_id: str, *, state: str, decision: bytes, decided_by: str,
        decided_at: int, note: str,
    ) -> bool:
        """Record a decision if the approval is still pending and unexpired."""
        if state not in ("approved", "denied"):
            raise ValueError("a decision is approved or denied")
        with self._conn() as conn:
            return conn.execute(
                _SQL["approval_decide"],
                (state, decision, decided_by, decided_at, note, approval_id, decided_at),
            ).rowcount == 1

    def use_approval(self, approval_id: str, *, now: int) -> bool:
        """Mark an approved, unexpired approval used; False if it is not."""
        with self._conn() as conn:
            return conn.execute(_SQL["approval_use"], (now, approval_id, now)).rowcount == 1

    def restore_approval(self, approval_id: str) -> bool:
        """Put a used approval back to approved."""
        with self._conn() as conn:
            return conn.execute(_SQL["approval_restore"], (approval_id,)).rowcount == 1

    def expire_approval(self, approval_id: str, *, now: int) -> bool:
        """Mark a live approval whose time is up expired."""
        with self._conn() as conn:
            return conn.execute(_SQL["approval_expire"], (approval_id, now)).rowcount == 1
