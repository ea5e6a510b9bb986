"""Pure policy evaluation: a Request in, a Decision out. No I/O, no clock."""

from __future__ import annotations

from policy.errors import PolicyDeniedError
from policy.model import Decision, Policy, Request
from policy.paths import deny_matches

__all__ = ["enforce", "evaluate"]

_ALLOW = Decision(allowed=True)


def evaluate(policy: Policy, request: Request) -> Decision:
    """Decide a request. Never raises on a refusal.

    Order: forbidden paths, protected paths, then limits; the first refusal wins.

    Args:
        policy: The organisation policy.
        request: The call being decided.

    Returns:
        The :class:`Decision` (``allowed`` with no rule when nothing refused).
    """
    for path in request.paths:
        if deny_matches(path, policy.paths.forbidden):
            return Decision(
                allowed=False,
                code="path_forbidden",
                rule="paths.forbidden",
                reasons=(f"{path!r} is forbidden by the organisation policy",),
            )
        if deny_matches(path, policy.paths.protected):
            return Decision(
                allowed=False,
                code="path_forbidden",
                rule="paths.protected",
                reasons=(f"{path!r} is protected; sealed access is not available yet",),
            )
    limits = policy.limits
    checks = (
        ("limits.file_bytes", request.content_bytes, limits.file_bytes, "file size"),
        ("limits.staged_bytes", request.staged_bytes, limits.staged_bytes, "staged bytes"),
        ("limits.staged_files", request.staged_files, limits.staged_files, "staged files"),
    )
    for rule, value, limit, what in checks:
        if value > limit:
            return Decision(
                allowed=False,
                code="limit_exceeded",
                rule=rule,
                reasons=(f"{what} {value} exceeds the limit of {limit}",),
            )
    return _ALLOW


def enforce(policy: Policy, request: Request) -> Decision:
    """Like :func:`evaluate`, but raise on a refusal.

    Raises:
        PolicyDeniedError: Carrying the refusing Decision.
    """
    decision = evaluate(policy, request)
    if not decision.allowed:
        raise PolicyDeniedError(decision)
    return decision
