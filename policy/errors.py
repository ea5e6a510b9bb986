"""Errors of the policy package."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policy.model import Decision

__all__ = ["PolicyDeniedError", "PolicyError"]


class PolicyError(ValueError):
    """A policy document is invalid. ``problems`` lists ``(location, message)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in problems))
        self.problems = problems


class PolicyDeniedError(Exception):
    """Raised by :func:`policy.enforce` when the Decision is a refusal."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.code, decision.rule)
        self.decision = decision
