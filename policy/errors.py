"""Errors of the policy package: an invalid document, a refused call (docs/policy.md)."""

from __future__ import annotations

from policy.decision import Decision

__all__ = ["PolicyDeniedError", "PolicyError"]


class PolicyError(ValueError):
    """A policy document is invalid.

    Attributes:
        problems: ``(location, message)`` pairs, one per problem; a location is a
            field in the document (``rules[3].agents[0]``, ``limits.file_bytes``)
            or ``toml`` for a syntax error.
        lines: For each problem, its 1-based line in the text when known, else None.
    """

    def __init__(
        self, problems: list[tuple[str, str]], *, lines: list[int | None] | None = None
    ) -> None:
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in problems))
        self.problems = problems
        self.lines = lines if lines is not None else [None] * len(problems)


class PolicyDeniedError(Exception):
    """Raised by :func:`policy.enforce` when the Decision is a refusal."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.code, decision.rule)
        self.decision = decision
