"""Name lookups over one view's definitions, and the order among definitions of a name.

:class:`NameIndex` finds names exactly, case-insensitively, by prefix, by
substring and fuzzily (``difflib`` over the names sharing most bigrams);
:func:`rank_key` orders the definitions a name has (docs/semantic.md).
"""

from __future__ import annotations

import bisect
import difflib
from collections import defaultdict
from collections.abc import Callable, Mapping

from engine.limits import LIMITS
from engine.semantic.records import Definition

__all__ = ["NameIndex", "rank_key"]


class NameIndex:
    """Lookup structures over the names of one index, made once per index.

    * exact and case-insensitive: a dict from each lower-cased name to its spellings;
    * prefix: the lower-cased names sorted, searched by bisection;
    * substring: every lower-cased name in one newline-joined string, searched
      with ``str.find`` (in C);
    * fuzzy: names by the bigrams of their lower-cased form; a query compares
      (``difflib`` ratio) only the ``LIMITS.fuzzy_candidates`` names sharing the
      most bigrams with it (at least a third of the query's), of a length
      within the cutoff's reach.

    Args:
        by_name: Definitions by name (``TreeIndex.by_name``).
    """

    def __init__(self, by_name: Mapping[str, list[Definition]]) -> None:
        lower: defaultdict[str, list[str]] = defaultdict(list)
        for name in by_name:
            lower[name.lower()].append(name)
        self.lower: dict[str, list[str]] = dict(lower)
        self.sorted: list[str] = sorted(self.lower)
        self.joined = "\n" + "\n".join(self.sorted) + "\n"
        self._starts: list[int] = []
        at = 1
        for low in self.sorted:
            self._starts.append(at)
            at += len(low) + 1
        grams: defaultdict[str, list[int]] = defaultdict(list)
        for i, low in enumerate(self.sorted):
            for gram in {low[k : k + 2] for k in range(max(1, len(low) - 1))}:
                grams[gram].append(i)
        self.grams: dict[str, list[int]] = dict(grams)

    def with_prefix(self, prefix: str) -> list[str]:
        """Lower-cased names starting with ``prefix`` (lower-cased), in order."""
        start = bisect.bisect_left(self.sorted, prefix)
        end = bisect.bisect_left(self.sorted, prefix + "\U0010ffff", lo=start)
        return self.sorted[start:end]

    def containing(self, part: str) -> list[str]:
        """Lower-cased names that contain ``part`` (lower-cased, no newline)."""
        if not part or "\n" in part:
            return []
        out: list[str] = []
        seen = -1
        at = self.joined.find(part)
        while at >= 0:
            i = bisect.bisect_right(self._starts, at) - 1
            if i != seen and 0 <= i < len(self.sorted):
                out.append(self.sorted[i])
                seen = i
            at = self.joined.find(part, at + 1)
        return out

    def close_to(
        self,
        query: str,
        cutoff: float = 0.7,
        n: int = 50,
        keep: Callable[[str], bool] | None = None,
    ) -> list[tuple[float, str]]:
        """Lower-cased names whose ``difflib`` ratio to ``query`` is at least ``cutoff``.

        Args:
            query: The lower-cased query.
            cutoff: The least ratio, 0 to 1.
            n: At most this many results.
            keep: If given, only lower-cased names it accepts are candidates;
                applied before the ``LIMITS.fuzzy_candidates`` cut, so names it
                refuses never push others out.

        Returns:
            ``(ratio, name)`` best first, at most ``n``.
        """
        counts: defaultdict[int, int] = defaultdict(int)
        query_grams = {query[k : k + 2] for k in range(max(1, len(query) - 1))}
        for gram in query_grams:
            for i in self.grams.get(gram, ()):
                counts[i] += 1
        size = len(query)
        least = max(1, len(query_grams) // 3)
        # ratio = 2M / (a + b) <= 2 min(a, b) / (a + b): lengths out of reach are skipped.
        reach = [
            (c, i)
            for i, c in counts.items()
            if c >= least
            and 2 * min(size, len(self.sorted[i])) >= cutoff * (size + len(self.sorted[i]))
        ]
        reach.sort(key=lambda pair: -pair[0])
        matcher = difflib.SequenceMatcher()
        matcher.set_seq2(query)
        out: list[tuple[float, str]] = []
        taken = 0
        for _count, i in reach:
            if taken >= LIMITS.fuzzy_candidates:
                break
            if keep is not None and not keep(self.sorted[i]):
                continue  # refused names take no candidate's place
            taken += 1
            matcher.set_seq1(self.sorted[i])
            if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff:
                ratio = matcher.ratio()
                if ratio >= cutoff:
                    out.append((ratio, self.sorted[i]))
        out.sort(key=lambda pair: (-pair[0], pair[1]))
        return out[:n]


_KIND_RANK = {
    "class": 0,
    "interface": 0,
    "struct": 0,
    "trait": 0,
    "enum": 1,
    "type": 1,
    "function": 1,
    "method": 2,
    "constructor": 2,
    "macro": 2,
    "module": 3,
    "constant": 3,
    "field": 4,
    "variable": 4,
}


def rank_key(d: Definition) -> tuple[int, int, str, int]:
    """Order among definitions of one name: types and functions first, shallow, then place."""
    return (_KIND_RANK.get(d.kind, 5), d.qualname.count("."), d.path, d.range.start_line)
