"""``[[approval]]`` tables: calls a person must approve first, and who may (docs/policy.md).

A table selects calls as a ``[[rules]]`` entry does (``agents``, ``tools``,
``operations``, ``paths``, same validators) and names its ``approvers``
(operator names or ``group:NAME``), the approval's ``ttl`` and an optional
``reason``. :func:`approval_for` gives the first table that matches a request,
in file order. Pure; the engine runs the approval itself (docs/approvals.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from policy._agents import agent_matches
from policy._fields import (
    MAX_REASON_CHARS,
    MAX_SELECTORS,
    _Agents,
    _array,
    _distinct,
    _non_empty,
    _Operations,
    _RuleGlobs,
    _safe_text,
    _Tools,
    check_can_match,
)
from policy.decision import Request
from policy.overlap import globs_may_overlap
from policy.paths import deny_matches

__all__ = [
    "APPROVER",
    "MAX_APPROVALS",
    "MAX_APPROVAL_TTL_SECONDS",
    "MIN_APPROVAL_TTL_SECONDS",
    "ApprovalRule",
    "approval_for",
    "approval_match",
]

MAX_APPROVALS = 256
"""Most ``[[approval]]`` tables in one policy."""
MIN_APPROVAL_TTL_SECONDS = 60
"""Shortest ``ttl`` of an approval: one minute."""
MAX_APPROVAL_TTL_SECONDS = 604_800
"""Longest ``ttl`` of an approval: seven days."""

APPROVER = re.compile(r"(group:)?([a-z0-9][a-z0-9._-]{0,63})", re.ASCII)
"""An approver: an operator's name, or ``group:`` and a group's name."""


def _approver(value: str) -> str:
    if APPROVER.fullmatch(value) is None:
        raise ValueError(
            "an approver is an operator name or group:NAME (a-z 0-9 . _ -, at most 64, "
            "starting with a letter or digit)"
        )
    return value


_Approvers = Annotated[
    tuple[Annotated[str, AfterValidator(_approver)], ...],
    BeforeValidator(_array),
    AfterValidator(_distinct),
    AfterValidator(_non_empty),
    Field(max_length=MAX_SELECTORS),
]


class ApprovalRule(BaseModel):
    """One ``[[approval]]`` table.

    Attributes:
        agents: Agent patterns, as for rules; absent: every agent.
        tools: Tool names; absent: every tool.
        operations: Operations; absent: every operation.
        paths: Globs; the table matches a call when *any* of the call's paths
            is matched (deny-side matching: case and spelling folded, folders
            cover what is below them); a call without paths does not match a
            table that has ``paths``. Absent: every call.
        approvers: Operator names or ``group:NAME``; any one of them may decide.
        ttl: Seconds from the request until the approval expires (60..604800).
        reason: Shown with the request and to the approvers; one plain line.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    agents: _Agents = None
    tools: _Tools = None
    operations: _Operations = None
    paths: _RuleGlobs = None
    approvers: _Approvers
    ttl: int = Field(ge=MIN_APPROVAL_TTL_SECONDS, le=MAX_APPROVAL_TTL_SECONDS)
    reason: Annotated[str, AfterValidator(_safe_text)] = Field(
        default="", max_length=MAX_REASON_CHARS
    )

    @model_validator(mode="after")
    def _can_match(self) -> ApprovalRule:
        check_can_match(self.tools, self.operations, "table")
        return self

    def operators(self) -> tuple[str, ...]:
        """The operator names the table lists (without ``group:`` entries)."""
        return tuple(a for a in self.approvers if not a.startswith("group:"))

    def groups(self) -> tuple[str, ...]:
        """The group names the table lists (``group:NAME`` entries, without the prefix)."""
        return tuple(a.removeprefix("group:") for a in self.approvers if a.startswith("group:"))

    def allows(self, operator: str, groups: tuple[str, ...] | frozenset[str]) -> bool:
        """Whether ``operator``, member of ``groups``, is among the approvers."""
        return operator in self.operators() or any(g in groups for g in self.groups())

    def matches(self, request: Request) -> bool:
        """Whether the table selects ``request`` (see the attributes for paths)."""
        if self.tools is not None and request.tool not in self.tools:
            return False
        if self.operations is not None and request.operation not in self.operations:
            return False
        if self.agents is not None and not any(
            agent_matches(p, request.agent) for p in self.agents
        ):
            return False
        if self.paths is None:
            return True
        if request.tool == _DELEGATION_TOOL:  # the requested scope: globs, not paths
            return any(globs_may_overlap(g, t) for g in request.paths for t in self.paths)
        return any(deny_matches(path, self.paths) for path in request.paths)


_DELEGATION_TOOL = "issue_sub_token"


def approval_match(
    approvals: tuple[ApprovalRule, ...], request: Request
) -> tuple[int, ApprovalRule] | None:
    """The first ``[[approval]]`` table that matches, with its index.

    Args:
        approvals: The policy's tables, in file order.
        request: The call (its paths: as for rules; for ``commit`` the staged
            change's paths, for ``issue_sub_token`` the requested scope's).

    Returns:
        ``(index, table)``, or ``None`` if no table matches.
    """
    for index, rule in enumerate(approvals):
        if rule.matches(request):
            return index, rule
    return None


class _WithApprovals(Protocol):
    """A :class:`~policy.model.Policy` as :func:`approval_for` reads it."""

    @property
    def approval(self) -> tuple[ApprovalRule, ...]: ...


def approval_for(policy: _WithApprovals, request: Request) -> ApprovalRule | None:
    """The first ``[[approval]]`` table of ``policy`` that matches ``request``, or ``None``.

    Args:
        policy: A :class:`~policy.model.Policy`.
        request: The call, as for :func:`approval_match`.
    """
    found = approval_match(policy.approval, request)
    return None if found is None else found[1]
