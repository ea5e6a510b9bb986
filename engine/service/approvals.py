"""The approval step of a call: ``[[approval]]`` tables, looked up by request hash.

After the policy (step 5) and the catalog check, a call that an
``[[approval]]`` table matches runs only under an approved, unexpired, unused
approval of exactly that request; otherwise it is answered
``approval_required``, ``approval_denied`` or ``approval_expired`` and nothing
changes. The approval is marked used before the handler runs and put back if
the handler refuses. Also: the check that a policy names only approvers the
store knows. The flow and the wire shapes: docs/approvals.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pydantic import BaseModel

import policy
from engine.auth import discharge
from engine.auth.verify import VerifiedToken
from engine.catalog.declarations import ToolSpec
from engine.errors import AccessDeniedError, ApprovalError, ProfileError
from engine.limits import LIMITS
from engine.state import Store
from engine.state.approvals import Approval, Operator
from engine.tools.context import Session

__all__ = ["ApprovalGate", "approver_check", "unknown_approvers", "wire"]

_COMMIT = "commit"
_DELEGATE = "issue_sub_token"
_PATHS_SHOWN = 64


def unknown_approvers(
    rules: policy.Policy, operators: Sequence[Operator]
) -> list[tuple[str, str]]:
    """The approvers a policy names that no registered operator is (fail closed).

    Args:
        rules: The policy.
        operators: The store's registered (not removed) operators.

    Returns:
        ``(location, message)`` per unknown name or group, in file order.
    """
    names = {o.name for o in operators}
    groups = {g for o in operators for g in o.groups}
    problems = []
    for i, table in enumerate(rules.approval):
        for j, approver in enumerate(table.approvers):
            where = f"approval[{i}].approvers[{j}]"
            if approver.startswith("group:"):
                group = approver.removeprefix("group:")
                if group not in groups:
                    problems.append((where, f"no operator is in group {group!r}; add one with "
                                            f"`chit operators add NAME --group {group}`"))
            elif approver not in names:
                problems.append((where, f"no operator is named {approver!r}; add it with "
                                        f"`chit operators add {approver}`"))
    return problems


def approver_check(store: Store) -> Callable[[policy.Policy], str | None]:
    """The check a running engine applies to each policy version it loads.

    Returns:
        A function answering why a policy is unusable (it names an approver or
        group no operator of ``store`` is), or ``None``. It raises
        :class:`~engine.errors.StoreError` if the store cannot be read.
    """

    def check(rules: policy.Policy) -> str | None:
        if not rules.approval:
            return None
        problems = unknown_approvers(rules, store.operators())
        return "; ".join(f"{where}: {message}" for where, message in problems) or None

    return check


class ApprovalGate:
    """The approval step of the engine's calls, over its state store.

    Args:
        store: The state store (approvals are shared by every engine on it).
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "ApprovalGate()"

    @contextlib.contextmanager
    def hold(
        self,
        rules: policy.Policy,
        token: VerifiedToken,
        spec: ToolSpec,
        args: BaseModel,
        paths: tuple[str, ...],
        session: Session,
        repo: str,
        *,
        now: int,
        hint: str | None = None,
    ) -> Iterator[str | None]:
        """Let the call run only under an approval, if a table asks for one.

        Run with the session's lock held (a commit's staged change is what is
        approved). The approval is marked used when the block starts and put
        back to approved if the block raises (the handler refused).

        Args:
            rules: The call's policy.
            token: The call's verified token.
            spec: The tool.
            args: Its parsed arguments.
            paths: Its paths, as for the policy.
            session: The session (its staged change, for ``commit``).
            repo: The repository's name.
            now: Unix seconds (the engine's clock).
            hint: The approval id the client echoed, or ``None``. An id that
                names another request is ignored: a call is looked up by its
                own request only.

        Yields:
            The id of the approval the call runs under, or ``None`` if no table
            matches.

        Raises:
            ApprovalError: ``approval_required`` (with the approval),
                ``approval_denied`` (with the note) or ``approval_expired``.
            AccessDeniedError: ``limit_exceeded`` if the token already has
                ``LIMITS.approvals_pending_per_token`` approvals waiting.
            StoreError: If the store fails (the call is refused).
        """
        used = self._admit(rules, token, spec, args, paths, session, repo, now, hint)
        if used is None:
            yield None
            return
        try:
            yield used
        except BaseException:
            self._store.restore_approval(used)
            raise

    def _admit(
        self,
        rules: policy.Policy,
        token: VerifiedToken,
        spec: ToolSpec,
        args: BaseModel,
        paths: tuple[str, ...],
        session: Session,
        repo: str,
        now: int,
        hint: str | None,
    ) -> str | None:
        if not rules.approval:
            return None
        arguments: dict[str, Any] = args.model_dump(mode="json")
        staged = session.staged
        if spec.name == _COMMIT:
            if not all(token.allows_path(p) for p in staged.changes):
                # Staged by a wider token of the session: the commit refuses it
                # without naming those paths, and so must this step.
                return None
            paths = tuple(sorted(staged.changes))
        elif spec.name == _DELEGATE:
            paths = tuple(arguments.get("paths") or ())
        found = policy.approval_match(
            rules.approval,
            policy.Request(agent=token.agent, tool=spec.name, operation=spec.operation,
                           paths=paths),
        )
        if found is None:
            return None
        index, table = found
        change = None
        if spec.name == _COMMIT:
            change = discharge.change_digest(
                (p, None if d is None else staged.modes.get(p, 0o100644), d)
                for p, d in staged.changes.items()
            )
        try:
            request = discharge.request_hash(
                spec.name, arguments, session=session.session_id, token_id=token.token_id,
                repo=repo, change=change,
            ).hex()
        except ProfileError:
            raise AccessDeniedError(
                "policy_denied", "this call needs an approval, and its arguments cannot be "
                "bound to one", rule=f"approval[{index}]",
            ) from None
        del hint  # the request decides; a stale or foreign id changes nothing
        asked = _asked(spec.name, arguments, paths, staged.changes)
        current: Approval | None = None
        for _ in range(3):  # another engine may move the approval between reads
            current = self._store.approval_for_request(request)
            if current is None or current.state in ("used", "expired"):
                current = self._store.create_approval(
                    Approval(
                        discharge.new_approval_id(), request, spec.name, token.agent,
                        token.token_id, session.session_id, repo, asked, table.approvers,
                        table.reason, f"approval[{index}]", now, now + table.ttl,
                    ),
                    now=now,
                )
                if current is None:
                    raise AccessDeniedError(
                        "limit_exceeded",
                        f"{LIMITS.approvals_pending_per_token} approvals of this token are "
                        "already waiting; wait for them to be decided or to expire",
                        rule=f"approval[{index}]",
                    )
            if now >= current.expires_at:
                self._store.expire_approval(current.id, now=now)
                raise _expired(current)
            if current.state == "pending":
                raise _required(current)
            if current.state == "denied":
                raise _denied(current)
            if current.state == "approved" and self._store.use_approval(current.id, now=now):
                return current.id
        if current is None:  # pragma: no cover - every pass sets it or raises
            raise AccessDeniedError("policy_denied", "this call needs an approval")
        raise _required(current)


def _asked(
    tool: str, arguments: dict[str, Any], paths: tuple[str, ...],
    changes: dict[str, bytes | None],
) -> dict[str, Any]:
    """What the approvers are shown: the tool, its paths, and the change or the grant."""
    asked: dict[str, Any] = {"tool": tool, "paths": list(paths[:_PATHS_SHOWN]),
                             "paths_total": len(paths)}
    if tool == _COMMIT:
        deleted = sum(1 for d in changes.values() if d is None)
        subject = str(arguments.get("message", "")).strip().split("\n", 1)[0][:200]
        asked["summary"] = (f"{len(changes)} path(s): {len(changes) - deleted} written, "
                            f"{deleted} deleted; {subject}")
    elif tool == _DELEGATE:
        asked["grant"] = {k: arguments.get(k) for k in
                          ("agent", "ops", "paths", "ttl_seconds", "delegable", "repos")}
    return asked


def wire(approval: Approval) -> dict[str, Any]:
    """An approval as the ``approval_required`` hint carries it (docs/approvals.md)."""
    shown: dict[str, Any] = {
        "id": approval.id,
        "tool": approval.tool,
        "paths": approval.asked.get("paths", []),
        "approvers": list(approval.approvers),
        "reason": approval.reason,
        "expires_at": approval.expires_at,
    }
    for key in ("summary", "grant"):
        if key in approval.asked:
            shown[key] = approval.asked[key]
    return shown


def _required(approval: Approval) -> ApprovalError:
    return ApprovalError(
        "approval_required",
        f"this call waits for an operator's approval ({', '.join(approval.approvers)}); "
        "nothing was changed. Retry the same call once it is approved",
        approval=wire(approval),
        waits=f"chit approve {approval.id}",
    )


def _denied(approval: Approval) -> ApprovalError:
    return ApprovalError(
        "approval_denied",
        f"an operator denied this call ({approval.decided_by}); nothing was changed",
        approval={"id": approval.id, "note": approval.note, "decided_by": approval.decided_by},
    )


def _expired(approval: Approval) -> ApprovalError:
    return ApprovalError(
        "approval_expired",
        "the approval of this call expired; nothing was changed. Retry to ask again",
        approval={"id": approval.id, "expires_at": approval.expires_at},
    )
