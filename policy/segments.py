"""Patterns over one segment: ``*`` (any run) and ``?`` (one character), matched and contained.

The shared engine of path globs (policy/paths.py, one segment at a time) and of
repository-name globs (engine/auth/reponames.py): matching by bit-parallel
simulation without backtracking, containment by a small dynamic programme that
is sound (true only when certain). Rules: docs/token-format.md, "Paths and
globs" and "Repositories". Pure: strings in, a bool out; callers validate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

__all__ = ["run_automaton", "segment_contained", "segment_matches"]

_STAR = "*"
_ANY_ONE = "?"


def run_automaton(
    pattern: Sequence[str],
    length: int,
    star: str,
    mask_of: Callable[[str], int],
) -> bool:
    """Match ``pattern`` against a sequence of ``length`` items by bit-parallel simulation.

    Bit ``i`` of the state means "the pattern read so far matches the first ``i``
    items". A ``star`` element matches any run of items (it keeps every state from
    the lowest one reached onwards); any other element matches exactly one item
    ``i`` where bit ``i`` of ``mask_of(element)`` is set. There is no backtracking:
    each element costs one big-integer operation on ``length + 1`` bits.

    Args:
        pattern: Pattern elements (characters of a segment pattern, or segment
            patterns of a glob).
        length: Number of items in the subject.
        star: The element that matches any run of items (``*`` or ``**``).
        mask_of: For a non-star element, the bit set of subject positions it
            matches (bits ``0`` to ``length - 1``).

    Returns:
        Whether the whole pattern matches the whole subject.

    """
    every_state = (1 << (length + 1)) - 1
    states = 1
    for element in pattern:
        if element == star:
            lowest = states & -states
            states = every_state & ~(lowest - 1)
        else:
            states = (states & mask_of(element)) << 1
        if not states:
            return False
    return bool(states >> length & 1)


def segment_matches(pattern: str, segment: str) -> bool:
    """Match one segment pattern (``*`` and ``?`` within the segment) against one segment."""
    if _STAR not in pattern and _ANY_ONE not in pattern:
        return pattern == segment
    positions: dict[str, int] = {}
    for index, char in enumerate(segment):
        positions[char] = positions.get(char, 0) | (1 << index)
    any_char = (1 << len(segment)) - 1

    def mask_of(element: str) -> int:
        return any_char if element == _ANY_ONE else positions.get(element, 0)

    return run_automaton(pattern, len(segment), _STAR, mask_of)


@functools.lru_cache(maxsize=16384)
def segment_contained(inner: str, outer: str) -> bool:
    """Whether every segment ``inner`` matches is matched by ``outer`` (sound).

    Patterns over one segment with ``*`` and ``?``. ``outer``'s ``*`` may absorb
    any run of ``inner``'s characters, wildcards included; ``outer``'s ``?``
    absorbs one literal or one ``?``; literals must be equal. ``inner``'s ``*``
    can only be absorbed by ``outer``'s ``*``. If this succeeds, containment holds.
    """
    m, n = len(inner), len(outer)
    # reach[i][j]: inner[:i] can be absorbed by outer[:j].
    reach = [[False] * (n + 1) for _ in range(m + 1)]
    reach[0][0] = True
    for j in range(1, n + 1):
        reach[0][j] = reach[0][j - 1] and outer[j - 1] == _STAR
    for i in range(1, m + 1):
        a = inner[i - 1]
        for j in range(1, n + 1):
            b = outer[j - 1]
            if b == _STAR:
                reach[i][j] = reach[i][j - 1] or reach[i - 1][j]
            elif b == _ANY_ONE:
                reach[i][j] = a != _STAR and reach[i - 1][j - 1]
            else:
                reach[i][j] = a == b and reach[i - 1][j - 1]
    return reach[m][n]
