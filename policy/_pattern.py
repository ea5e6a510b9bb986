"""Commit message patterns: a regular-expression subset that cannot run away (pure).

Python's ``re`` backtracks and has no timeout, so a pattern is held to a subset
whose worst case is bounded (at most :data:`MAX_CHOICES` ways to split a subject
of at most :data:`MAX_SUBJECT_CHARS` characters) and is only matched against the
message's first line. The subset and why the bound holds: docs/policy.md,
"Commit message requirements".
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass

__all__ = [
    "MAX_ALTERNATIVES",
    "MAX_CHOICES",
    "MAX_PATTERN_CHARS",
    "MAX_SUBJECT_CHARS",
    "compile_message_pattern",
]

MAX_PATTERN_CHARS = 256
"""Longest message pattern accepted, in characters."""

MAX_SUBJECT_CHARS = 256
"""Longest subject a message pattern is matched against; longer subjects are refused."""

MAX_CHOICES = 4_000_000
"""Most backtracking choices a pattern may have (docs/policy.md, "Commit message requirements")."""

MAX_ALTERNATIVES = 4096
"""Most ways a pattern may choose among ``|`` branches and optional parts."""

_CLASS_ESCAPES = frozenset("dDwWsSbBAZnt")
_QUANTIFIER = re.compile(r"\{(\d{0,4})(?:(,)(\d{0,4}))?\}")


@dataclass
class _Group:
    """A group being read: what it holds so far."""

    branches: int = 1
    has_quantifier: bool = False
    has_group: bool = False


def _quantifier_at(pattern: str, i: int) -> tuple[int, int | None, int] | None:
    """Read a quantifier at ``pattern[i]``: ``(min, max or None, length)``, or None."""
    char = pattern[i]
    if char == "*":
        return 0, None, 1
    if char == "+":
        return 1, None, 1
    if char == "?":
        return 0, 1, 1
    if char != "{":
        return None
    found = _QUANTIFIER.match(pattern, i)
    if found is None or (not found.group(1) and not found.group(2)):
        raise ValueError("a literal '{' must be written '\\{'")
    low = int(found.group(1) or 0)
    if found.group(2) is None:
        high: int | None = low
    else:
        high = int(found.group(3)) if found.group(3) else None
    return low, high, found.end() - i


def _splits(ranges: list[int]) -> int:
    """Ways repeated quantifiers with these range sizes can share one subject.

    Each quantifier picks one of its ``r`` repetition counts, and together they
    consume at most :data:`MAX_SUBJECT_CHARS` characters, so the count is at most
    both the product of the ranges and ``C(MAX_SUBJECT_CHARS + k, k)``.
    """
    product = math.prod(ranges)
    return min(product, math.comb(MAX_SUBJECT_CHARS + len(ranges), len(ranges)))


def _class_end(pattern: str, i: int) -> int:
    """Index just past the character class that starts at ``pattern[i] == '['``."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _check_structure(pattern: str) -> None:
    """Walk a pattern ``re`` already compiled and enforce the subset's rules.

    Raises:
        ValueError: Naming the first rule the pattern breaks.
    """
    stack = [_Group()]
    alternatives = 1  # product of every '|' group's branches and 2 per optional
    ranges: list[int] = []  # range sizes of quantifiers that may repeat more than once
    i = 0
    last: _Group | str | None = None  # what a quantifier here would repeat
    while i < len(pattern):
        char = pattern[i]
        top = stack[-1]
        if char == "\\":
            nxt = pattern[i + 1]
            if nxt.isalnum() and nxt not in _CLASS_ESCAPES:
                raise ValueError(
                    f"the escape '\\{nxt}' is not allowed (backreferences and character "
                    "codes are not supported)"
                )
            last, i = "atom", i + 2
        elif char == "[":
            last, i = "atom", _class_end(pattern, i)
        elif char == "(":
            if pattern.startswith("(?", i) and not pattern.startswith("(?:", i):
                raise ValueError(
                    "only (...) and (?:...) groups are allowed: no lookaround, named "
                    "groups, conditionals or inline flags"
                )
            top.has_group = True
            stack.append(_Group())
            last, i = None, i + (3 if pattern.startswith("(?:", i) else 1)
        elif char == ")":
            last, i = stack.pop(), i + 1
            alternatives *= last.branches
        elif char == "|":
            top.branches += 1
            last, i = None, i + 1
        else:
            quantifier = _quantifier_at(pattern, i)
            if quantifier is None:
                last, i = "atom", i + 1
                continue
            low, high, length = quantifier
            i += length
            if i < len(pattern) and pattern[i] in "?+":
                i += 1  # lazy or possessive: the same choices in the worst case
            repeats = high is None or high > 1
            if (
                repeats
                and isinstance(last, _Group)
                and (last.has_quantifier or last.branches > 1 or last.has_group)
            ):
                raise ValueError(
                    "a group repeated more than once may hold only characters, classes "
                    "and '.': no quantifier, '|' or group inside (use a character class)"
                )
            top.has_quantifier = True
            if repeats:
                top_count = MAX_SUBJECT_CHARS if high is None else min(high, MAX_SUBJECT_CHARS)
                ranges.append(max(1, top_count - low + 1))
            elif high == 1 and low == 0:
                alternatives *= 2
            last = None
        if alternatives > MAX_ALTERNATIVES:
            raise ValueError(_TOO_MANY)
    root = stack[0]
    alternatives *= root.branches
    if alternatives > MAX_ALTERNATIVES or alternatives * _splits(ranges) > MAX_CHOICES:
        raise ValueError(_TOO_MANY)


_TOO_MANY = (
    f"the pattern has more than {MAX_CHOICES:,} ways to split a subject (too many "
    "unbounded quantifiers or alternatives); bound them, e.g. '.{1,72}' instead of '.*'"
)


def compile_message_pattern(pattern: object) -> re.Pattern[str]:
    """Validate a commit message pattern and compile it.

    Args:
        pattern: The candidate from the policy document (any type).

    Returns:
        The compiled pattern, to be used with ``fullmatch`` on a subject of at
        most :data:`MAX_SUBJECT_CHARS` characters.

    Raises:
        ValueError: If it is not a string, is empty or too long, does not compile,
            or breaks a rule of the subset (docs/policy.md, "Commit message
            requirements").
    """
    if not isinstance(pattern, str):
        raise ValueError("must be a string")
    if not pattern:
        raise ValueError("is empty; leave the key out for no pattern")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"is longer than {MAX_PATTERN_CHARS} characters")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "possible nested set" and kin are errors here
        try:
            compiled = re.compile(pattern)
        except (re.error, FutureWarning, DeprecationWarning, OverflowError) as exc:
            # OverflowError: a repetition count past re's limit ("a{99999999999}").
            raise ValueError(f"is not a valid regular expression: {exc}") from None
    _check_structure(pattern)
    return compiled
