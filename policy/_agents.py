"""Agent name patterns for policy rules (pure).

A pattern is matched one dot-separated label at a time with the glob rules of
repository paths (:mod:`policy.paths`), the dot in the place of ``/``
(docs/policy.md, "Matching").
"""

from __future__ import annotations

import functools

from policy.paths import glob_matches

__all__ = ["MAX_AGENT_PATTERN_CHARS", "agent_matches", "validate_agent_pattern"]

MAX_AGENT_PATTERN_CHARS = 128
"""Longest agent pattern accepted."""

_PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.*?")


def validate_agent_pattern(pattern: object) -> str:
    """Check an agent pattern and return it unchanged.

    Args:
        pattern: The candidate from a policy document (any type).

    Returns:
        ``pattern`` itself.

    Raises:
        ValueError: If it is not a string of 1 to :data:`MAX_AGENT_PATTERN_CHARS`
            characters from ``a-z 0-9 - _ . * ?``, has an empty label (``a..b``,
            a leading or trailing dot), or uses ``**`` inside a label.
    """
    if not isinstance(pattern, str):
        raise ValueError("must be a string")
    if not 1 <= len(pattern) <= MAX_AGENT_PATTERN_CHARS:
        raise ValueError(f"must be 1 to {MAX_AGENT_PATTERN_CHARS} characters")
    if not set(pattern) <= _PATTERN_CHARS:
        raise ValueError(
            "agent patterns use a-z, 0-9, '-', '_', '.' between labels, and the "
            "wildcards '*', '?' and '**' (agent names are lower case)"
        )
    for label in pattern.split("."):
        if not label:
            raise ValueError("has an empty label (a leading, trailing or doubled '.')")
        if "**" in label and label != "**":
            raise ValueError("uses '**' inside a label; it must be a whole label")
    return pattern


@functools.lru_cache(maxsize=65536)
def agent_matches(pattern: str, agent: str) -> bool:
    """Whether an agent pattern matches an agent name, one label at a time.

    Fails closed: an invalid pattern or a name that is not dot-separated labels
    matches nothing.

    Args:
        pattern: A pattern (see :func:`validate_agent_pattern`).
        agent: An agent name.

    Returns:
        True iff ``pattern`` matches all of ``agent``.
    """
    try:
        validate_agent_pattern(pattern)
    except ValueError:
        return False
    if not agent or "/" in agent:
        return False
    return glob_matches(pattern.replace(".", "/"), agent.replace(".", "/"))
