"""Whether two path globs could match one path: refuse only what is provably empty.

Used where a request must not be answered with nothing (an approval table that
can never match, an attenuation that leaves no path): docs/policy.md,
docs/token-format.md.
"""

from __future__ import annotations

import functools

from policy.paths import _fold_glob, fold_path

__all__ = ["globs_may_overlap"]

_WILD = frozenset("*?[")


def globs_may_overlap(a: str, b: str, *, fold: bool = True) -> bool:
    """Whether some path could match both globs; ``True`` when unsure (fail safe).

    ``**`` is taken to match zero or more segments and a segment with a
    wildcard to match any segment, which only widens the answer; literal
    segments are compared case- and spelling-folded, as the deny side
    matches. So ``**`` or ``*/prod.toml`` meets ``deploy/**``, and
    ``src/**`` never meets ``docs/**``.

    Args:
        a: A valid glob (``policy.paths.validate_glob``).
        b: Another.
        fold: Compare literal segments case- and spelling-folded, as deny
            rules match (default); ``False`` compares them exactly, as scope
            globs match.

    Returns:
        ``False`` only if no path can match both.
    """
    if not fold:
        return _overlap(tuple(a.split("/")), tuple(b.split("/")), False)
    return _overlap(tuple(_fold_glob(a).split("/")), tuple(_fold_glob(b).split("/")))


@functools.lru_cache(maxsize=4096)
def _overlap(a: tuple[str, ...], b: tuple[str, ...], fold: bool = True) -> bool:
    if not a or not b:
        return all(s == "**" for s in a + b)
    if a[0] == "**":
        return _overlap(a[1:], b, fold) or _overlap(a, b[1:], fold)
    if b[0] == "**":
        return _overlap(a, b[1:], fold) or _overlap(a[1:], b, fold)
    same = _fold_segment(a[0]) == _fold_segment(b[0]) if fold else a[0] == b[0]
    head = bool(_WILD & set(a[0])) or bool(_WILD & set(b[0])) or same
    return head and _overlap(a[1:], b[1:], fold)


def _fold_segment(segment: str) -> str:
    return fold_path(segment) if segment not in ("", ".", "..") else segment
