"""Rate limits of the organisation policy, counted in the state store.

The pure policy only says which ``[[rate_limits]]`` apply to a call
(:func:`policy.rate_limits_for`); :class:`RateLimiter` names one sliding window
per entry and agent and asks the store to count the call in every applicable
window, or in none if one is full, in one transaction. Every engine sharing the
store counts in the same windows, so N engines together admit what the policy
allows, not N times it (docs/policy.md, "Rate limits").
"""

from __future__ import annotations

import hashlib
import json
import math

import policy
from engine.state import RateWindow, Store

__all__ = ["RateLimiter", "window_key"]


def window_key(index: int, limit: policy.RateLimit, agent: str) -> str:
    """The store's name for the window of entry ``index`` (``limit``) and ``agent``.

    A digest of the entry's place and value and of the agent, so a changed
    entry starts a fresh window and no agent name reaches the store's keys.

    Returns:
        64 lowercase hex digits.
    """
    spelled = json.dumps(
        [index, limit.model_dump(mode="json"), agent], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(spelled.encode("utf-8")).hexdigest()


class RateLimiter:
    """Sliding-window call counts per (rate limit entry, agent), kept in the state store.

    Args:
        store: The engine's state store.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "RateLimiter()"

    def admit(
        self, pol: policy.Policy, agent: str, tool: str, now: float
    ) -> policy.Decision | None:
        """Count a call the policy allowed, or refuse it if a budget is spent.

        Args:
            pol: The policy the call is decided under.
            agent: The calling agent.
            tool: The tool called.
            now: The engine's clock, unix seconds.

        Returns:
            None if the call is admitted (and now counted), else the refusing
            Decision: ``limit_exceeded``, rule ``rate_limits[i]`` of the first
            entry without room, and ``retry_after``, whole seconds (at least 1)
            until its oldest counted call leaves the window.

        Raises:
            StoreError: If the store fails (the call is then refused as
                ``internal_error``: a limit that cannot be counted is not applied
                open).
        """
        entries = policy.rate_limits_for(pol, agent, tool)
        if not entries:
            return None
        windows = [
            RateWindow(window_key(index, limit, agent), limit.calls, limit.per_seconds)
            for index, limit in entries
        ]
        full = self._store.admit_rate(windows, now=now)
        if full is None:
            return None
        at, oldest = full
        index, limit = entries[at]
        wait = math.ceil(oldest + limit.per_seconds - now)
        retry_after = min(max(1, wait), limit.per_seconds)  # a clock set back
        return _refusal(index, limit, retry_after)


def _refusal(index: int, limit: policy.RateLimit, retry_after: int) -> policy.Decision:
    tools = ", ".join(limit.tools) if limit.tools is not None else "any tool"
    return policy.Decision(
        allowed=False,
        code="limit_exceeded",
        rule=f"rate_limits[{index}]",
        reasons=(
            f"rate limit: at most {limit.calls} calls to {tools} per {limit.per_seconds} s "
            f"for this agent; retry in {retry_after} s",
        ),
        retry_after=retry_after,
    )
