"""Which deny-side glob groups match a path, without running every glob (pure).

:class:`DenyIndex` files each deny glob under a literal anchor and runs
:func:`policy.paths.deny_matches` only on the globs a path could match: the
answer is exactly ``deny_matches``'s, only cheaper (docs/policy.md, "What
evaluation remembers").
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from policy.paths import _fold_glob, _is_valid_glob, deny_matches, fold_path

__all__ = ["DenyIndex"]

_Key = TypeVar("_Key", bound=Hashable)
_MAX_REMEMBERED = 16384
_WILD = ("*", "?")
_SEP = "/"


def _anchor(glob: str) -> tuple[str, str] | None:
    """``("seg", text)``, ``("tail", text)``, ``("head", text)`` or None (no anchor).

    The longest literal segment if there is one; else the longest literal tail
    (after the last wildcard) or head (before the first) of a wildcard segment.
    """
    segments = [s for s in glob.split(_SEP) if s != "**"]
    literals = [s for s in segments if not any(w in s for w in _WILD)]
    if literals:
        return "seg", max(literals, key=len)
    best: tuple[str, str] | None = None
    for segment in segments:
        first = min(segment.find(w) for w in _WILD if w in segment)
        last = max(segment.rfind(w) for w in _WILD if w in segment)
        for kind, text in (("tail", segment[last + 1 :]), ("head", segment[:first])):
            if text and (best is None or len(text) > len(best[1])):
                best = kind, text
    return best


def _literals(glob: str) -> frozenset[str]:
    """The glob's literal segments: each must be one of a matching path's segments."""
    return frozenset(s for s in glob.split(_SEP) if not any(w in s for w in _WILD))


_Filed = tuple[tuple[_Key, str], frozenset[str]]  # (key, glob), the spelling's literals


@dataclass
class _Anchors(Generic[_Key]):
    """Globs filed by anchor, for one spelling (written or folded)."""

    segs: dict[str, list[_Filed[_Key]]] = field(default_factory=dict)
    tails: dict[str, list[_Filed[_Key]]] = field(default_factory=dict)
    heads: dict[str, list[_Filed[_Key]]] = field(default_factory=dict)
    tail_lengths: set[int] = field(default_factory=set)
    head_lengths: set[int] = field(default_factory=set)

    def file(self, anchor: tuple[str, str], filed: _Filed[_Key]) -> None:
        kind, text = anchor
        if kind == "seg":
            self.segs.setdefault(text, []).append(filed)
        elif kind == "tail":
            self.tails.setdefault(text, []).append(filed)
            self.tail_lengths.add(len(text))
        else:
            self.heads.setdefault(text, []).append(filed)
            self.head_lengths.add(len(text))

    def candidates(self, segments: list[str], into: set[tuple[_Key, str]]) -> None:
        """Add every glob whose anchor, and every literal segment, the path holds."""
        present = set(segments)
        found: list[_Filed[_Key]] = []
        for segment in segments:
            found += self.segs.get(segment, ())
            for n in self.tail_lengths:
                found += self.tails.get(segment[-n:], ())
            for n in self.head_lengths:
                found += self.heads.get(segment[:n], ())
        into.update(item for item, literals in found if literals <= present)


class DenyIndex(Generic[_Key]):
    """Deny glob groups (a key and its globs) and which of them match a path.

    Args:
        groups: ``key -> globs``; a group matches a path when
            ``deny_matches(path, globs)`` would say so.
    """

    def __init__(self, groups: Mapping[_Key, Iterable[str]]) -> None:
        self._written: _Anchors[_Key] = _Anchors()
        self._folded: _Anchors[_Key] = _Anchors()
        self._always: set[tuple[_Key, str]] = set()
        self._remembered: dict[str, frozenset[_Key]] = {}
        for key, globs in groups.items():
            for glob in globs:
                item = (key, glob)
                folded = _fold_glob(glob)
                spellings = [(self._written, glob)]
                if _is_valid_glob(folded):  # an invalid folded glob never matches
                    spellings.append((self._folded, folded))
                for anchors_of, spelling in spellings:
                    anchor = _anchor(spelling)
                    if anchor is None:
                        self._always.add(item)
                    else:
                        anchors_of.file(anchor, (item, _literals(spelling)))

    def hits(self, path: str) -> frozenset[_Key]:
        """The keys of the groups that deny ``path`` (as :func:`deny_matches` would).

        Args:
            path: A valid repository path.

        Returns:
            The matching keys (memoised per path, bounded).
        """
        found = self._remembered.get(path)
        if found is None:
            candidates = set(self._always)
            self._written.candidates(path.split(_SEP), candidates)
            self._folded.candidates(fold_path(path).split(_SEP), candidates)
            by_key: dict[_Key, list[str]] = {}
            for key, glob in candidates:
                by_key.setdefault(key, []).append(glob)
            found = frozenset(
                key for key, globs in by_key.items() if deny_matches(path, tuple(sorted(globs)))
            )
            if len(self._remembered) >= _MAX_REMEMBERED:
                self._remembered.clear()
            self._remembered[path] = found
        return found
