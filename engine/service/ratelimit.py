"""Rate limits of the organisation policy, counted in this engine process's memory.

The pure policy only says which ``[[rate_limits]]`` apply to a call
(:func:`policy.rate_limits_for`); :class:`RateLimiter` keeps, per entry and
agent, the times of the calls it admitted (a sliding window log) and admits a
call only if every applicable entry has room (docs/policy.md, "Rate limits").
"""

from __future__ import annotations

import math
import threading
from collections import deque

import policy
from engine.limits import LIMITS

__all__ = ["RateLimiter"]

_Key = tuple[int, policy.RateLimit, str]


class RateLimiter:
    """Sliding-window call counts per (rate limit entry, agent); thread-safe."""

    def __init__(self) -> None:
        self._windows: dict[_Key, deque[float]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RateLimiter({len(self._windows)} windows)"

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
        """
        entries = policy.rate_limits_for(pol, agent, tool)
        if not entries:
            return None
        with self._lock:
            windows = []
            for index, limit in entries:
                key = (index, limit, agent)
                window = self._windows.get(key)
                if window is None:
                    window = self._windows[key] = deque()
                cutoff = now - limit.per_seconds
                while window and window[0] <= cutoff:
                    window.popleft()
                if len(window) >= limit.calls:
                    wait = math.ceil(window[0] + limit.per_seconds - now)
                    retry_after = min(max(1, wait), limit.per_seconds)  # a clock set back
                    return _refusal(index, limit, retry_after)
                windows.append(window)
            for window in windows:
                window.append(now)
            if len(self._windows) > LIMITS.rate_limit_sweep_entries:
                self._sweep(now)
        return None

    def _sweep(self, now: float) -> None:
        """Drop windows whose every call has left (agents that stopped calling)."""
        for key in [
            k for k, w in self._windows.items() if not w or w[-1] <= now - k[1].per_seconds
        ]:
            del self._windows[key]


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
