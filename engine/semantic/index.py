"""The index of a session's view: per-blob records, cached, merged per view.

:class:`Indexer` (one per :class:`~engine.vcs.Repository`, so one per engine)
keeps two bounded in-memory caches:

* per blob: ``(path, blob id) -> FileIndex``, least recently used first out,
  at most :data:`BLOB_CACHE_ENTRIES` entries. A new commit, or a session's staged
  edit, re-parses only the files whose blob changed; everything else is reused.
  The path is part of the key because records name their path and because a
  sealed blob opens only at its own path (docs/sealing.md);
* per view: ``(tree id, staged paths and blob ids) -> TreeIndex``, the merged
  lookup tables, at most :data:`VIEW_CACHE_ENTRIES`; a view with more files
  than :data:`MAX_INDEXED_FILES` is kept per caller scope too (it indexes the
  files that scope matches first).

Below the memory caches sits the persisted index (engine/semantic/persist.py),
shared by the engine processes of the repository, so a new process on a tree
indexed before parses nothing; files missing from both are parsed in worker
processes (engine/semantic/pool.py). Records built from protected (sealed)
files are never persisted: they live only in this memory and reach a caller
only through the handlers' scope pruning (docs/semantic.md).
"""

from __future__ import annotations

import atexit
import bisect
import difflib
import gc
import hashlib
import threading
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial

from engine import git
from engine.errors import RepositoryError
from engine.paths import glob_may_match_below, in_scope
from engine.semantic.codec import (
    CodecError,
    decode_lazily,
    decode_stored,
    encode,
    encode_outline,
)
from engine.semantic.extract import extract
from engine.semantic.fileindex import FileIndex, Repair
from engine.semantic.languages import language_for
from engine.semantic.persist import PersistedIndex
from engine.semantic.pool import MIN_POOL_FILES, Item, ParsePool
from engine.semantic.records import Definition, Import, Occurrence, Role

__all__ = [
    "BLOB_CACHE_ENTRIES",
    "FUZZY_CANDIDATES",
    "MAX_INDEXED_FILES",
    "VIEW_CACHE_ENTRIES",
    "Indexer",
    "NameIndex",
    "TreeIndex",
    "git_blob_id",
    "indexer_for",
]

BLOB_CACHE_ENTRIES = 50_000
VIEW_CACHE_ENTRIES = 16
MAX_INDEXED_FILES = 20_000
MAX_LISTED_FILES = 200_000


_NO_PATHS: list[str] = []

Scope = Sequence[Sequence[str]]
"""Path scopes: one glob list per token block (``VerifiedToken.path_scopes``)."""


class _InScope:
    """Whether a path is in a scope, as ``VerifiedToken.allows_path`` says.

    Every list of the scope must have a glob matching the path (an empty scope
    matches nothing). A folder no glob of a list can match below is
    remembered, so the files of a folder out of scope are refused without
    matching each (the index tests every file of a large view).
    """

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
        self._folders: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        scope = self._scope
        if not scope:
            return False
        folder = path.rpartition("/")[0]
        if folder:
            below = self._folders.get(folder)
            if below is None:
                below = self._folders[folder] = all(
                    any(glob_may_match_below(glob, folder) for glob in globs) for globs in scope
                )
            if not below:
                return False
        return all(in_scope(path, globs) for globs in scope)


class _Definitions(Mapping[str, list[Definition]]):
    """Definitions by a key (name or qualname), made from the files on first lookup.

    Holds each key's files (in the view's file order); a lookup makes the list
    from those files' records (so only the files a query touches are decoded)
    and keeps it. The lists are shared: do not change them.
    """

    __slots__ = ("_indexed", "_made", "_qualified", "paths")

    def __init__(
        self, paths: dict[str, list[str]], indexed: dict[str, FileIndex], *, qualified: bool
    ) -> None:
        self.paths = paths  # key -> the files defining it, in the view's file order
        self._indexed = indexed
        self._qualified = qualified
        self._made: dict[str, list[Definition]] = {}

    def __getitem__(self, key: str) -> list[Definition]:
        made = self._made.get(key)
        if made is None:
            paths = self.paths[key]  # KeyError for a key no file defines
            indexed = self._indexed
            if self._qualified:
                made = [d for p in paths for d in indexed[p].qualified(key)]
            else:
                made = [d for p in paths for d in indexed[p].defined(key)]
            self._made[key] = made
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __contains__(self, key: object) -> bool:
        return key in self.paths


class _BySymbol(Mapping[str, Definition]):
    """SCIP symbol to its definition (the last of a repeated one), through its file."""

    __slots__ = ("_index",)

    def __init__(self, index: TreeIndex) -> None:
        self._index = index

    def __getitem__(self, symbol: str) -> Definition:
        path = self._index._symbol_paths().get(symbol)
        record = self._index.indexed.get(path) if path is not None else None
        found = record.symbol(symbol) if record is not None else None
        if found is None:
            raise KeyError(symbol)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._index._symbol_paths())

    def __len__(self) -> int:
        return len(self._index._symbol_paths())


class _ByPlace(Mapping[tuple[str, str], Definition]):
    """``(path, qualname)`` to the first definition of that qualname in that file."""

    __slots__ = ("_indexed",)

    def __init__(self, indexed: dict[str, FileIndex]) -> None:
        self._indexed = indexed

    def __getitem__(self, place: tuple[str, str]) -> Definition:
        path, qualname = place
        record = self._indexed.get(path)
        found = record.qualified(qualname) if record is not None else ()
        if not found:
            raise KeyError(place)
        return found[0]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for path, record in self._indexed.items():
            for qualname in dict.fromkeys(record.outline.qualnames):
                yield path, qualname

    def __len__(self) -> int:
        return sum(len(set(r.outline.qualnames)) for r in self._indexed.values())


class _Children(Mapping[str, list[Definition]]):
    """Base name to the definitions naming it as a base, then Rust types implementing it.

    Order: definitions by their name's place among the view's names
    (``by_name`` order), then in file order; then ``impl`` blocks in order.
    """

    __slots__ = ("_index", "_made")

    def __init__(self, index: TreeIndex) -> None:
        self._index = index
        self._made: dict[str, list[Definition]] = {}

    def _find(self, base: str) -> list[Definition]:
        index = self._index
        found = [
            d
            for p in index._base_paths().get(base, ())
            for d in index.indexed[p].definitions
            for b in d.bases
            if b == base
        ]
        rank = index._name_rank()
        found.sort(key=lambda d: rank.get(d.name, len(rank)))  # stable: file order kept
        for path, typ, trait, _line in index.impls:
            if trait == base:
                found.extend(
                    d
                    for d in index.by_name.get(typ, ())
                    if d.path == path or d.kind in ("struct", "enum", "type")
                )
        return found

    def __getitem__(self, base: str) -> list[Definition]:
        made = self._made.get(base)
        if made is None:
            made = self._made[base] = self._find(base)
        if not made:
            raise KeyError(base)
        return made

    def _keys(self) -> list[str]:
        index = self._index
        keys = dict.fromkeys(index._base_paths())
        keys.update(dict.fromkeys(trait for _p, _t, trait, _l in index.impls))
        return [k for k in keys if k in self]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


class TreeIndex:
    """The union of the file records of one view, with lookup tables.

    The tables are built from each file's outline (names, qualnames, symbols and
    bases of its definitions) and the names its occurrences spell, so building
    a view makes no definition: the definitions a lookup returns are made from
    their files' records on first use (a file read from the persisted index is
    then checked; see :class:`~engine.semantic.fileindex.FileIndex`).

    Attributes:
        files: Every regular file of the view (path to blob id), indexed or not.
        indexed: Path to record, for files in a known language.
        cut: Paths of files this view indexed in part or not at all, among those
            a caller of the view may see (sorted): files over 1 MB or over a
            per-file bound (their records say ``truncated``), and files in a
            known language beyond :data:`MAX_INDEXED_FILES` that the view's
            scope matches. A result says ``truncated`` for a caller only if it
            may see one of them (:meth:`truncated_for`), so a file it cannot
            see tells it nothing.
        unlisted: True if the view has more than :data:`MAX_LISTED_FILES`
            files: the listing stopped, and which files it missed is unknown,
            so every caller is told its results may be cut.
        complete: False if :data:`MAX_INDEXED_FILES` left files out (whoever
            may see them): a view with staged edits is then built in full,
            never derived from this one.
        by_name: Definitions by name (a read-only mapping to lists, made per
            name on first lookup); ``by_qualname``, ``by_symbol`` and
            ``by_place`` (``(path, qualname)``) likewise.
        uses: Name to the paths of the files with an occurrence of it (the
            occurrences themselves through :meth:`uses_of`, made lazily).
        imports: ``(path, Import)`` for every import (made on first use).
        children: Base name to the definitions naming it as a base (and Rust
            types implementing a trait of that name).
        impls: ``(path, type, trait, line)`` for Rust ``impl Trait for Type``.
        derived: Lookup structures other modules make from this index on
            first use, by name.

    An index is never changed once built (:meth:`derive` makes a new one), so
    every session with the same view shares it across threads; what it makes
    on first use is made the same by any thread.
    """

    def __init__(
        self,
        files: dict[str, str],
        indexed: dict[str, FileIndex],
        *,
        cut: tuple[str, ...] = (),
        unlisted: bool = False,
        complete: bool = True,
        names: dict[str, list[str]],
        qualnames: dict[str, list[str]],
        uses: dict[str, list[str]],
        impls: list[tuple[str, str, str, int]],
    ) -> None:
        self.files = files
        self.indexed = indexed
        self.cut = cut
        self.unlisted = unlisted
        self.complete = complete
        self.by_name: Mapping[str, list[Definition]] = _Definitions(
            names, indexed, qualified=False
        )
        self.by_qualname: Mapping[str, list[Definition]] = _Definitions(
            qualnames, indexed, qualified=True
        )
        self.by_symbol: Mapping[str, Definition] = _BySymbol(self)
        self.by_place: Mapping[tuple[str, str], Definition] = _ByPlace(indexed)
        self.uses = uses
        self.impls = impls
        self.children: Mapping[str, list[Definition]] = _Children(self)
        self._name_paths = names
        self._qualname_paths = qualnames
        self._imports: list[tuple[str, Import]] | None = None
        self._symbols: dict[str, str] | None = None
        self._bases: dict[str, list[str]] | None = None
        self._ranks: dict[str, int] | None = None
        self._names: NameIndex | None = None
        self.derived: dict[str, object] = {}

    def __repr__(self) -> str:
        return f"TreeIndex({len(self.files)} files, {len(self.indexed)} indexed)"

    @classmethod
    def build(
        cls,
        files: dict[str, str],
        records: Iterable[FileIndex],
        *,
        left_out: Iterable[str] = (),
        unlisted: bool = False,
        complete: bool = True,
        may_see: Callable[[str], bool] | None = None,
    ) -> TreeIndex:
        """Merge file records into one index (from their outlines; no definition is made).

        Args:
            files: Every regular file of the view (path to blob id).
            records: The records of the files indexed, in the view's file order.
            left_out: Files in a known language the view does not index (beyond
                :data:`MAX_INDEXED_FILES`) that a caller of the view may see.
            unlisted: The listing of ``files`` stopped at :data:`MAX_LISTED_FILES`.
            complete: No file was left out by :data:`MAX_INDEXED_FILES`.
            may_see: If given, only paths it accepts can be seen by a caller of
                this view: a record cut by a per-file bound elsewhere is not
                kept in :attr:`cut`.

        Returns:
            The :class:`TreeIndex`.
        """
        cut = set(left_out)
        by_name: defaultdict[str, list[str]] = defaultdict(list)
        by_qual: defaultdict[str, list[str]] = defaultdict(list)
        uses: defaultdict[str, list[str]] = defaultdict(list)
        indexed: dict[str, FileIndex] = {}
        impls: list[tuple[str, str, str, int]] = []
        for record in records:
            path = record.path
            indexed[path] = record
            if record.truncated and (may_see is None or may_see(path)):
                cut.add(path)
            outline = record.outline
            for name in dict.fromkeys(outline.names):
                by_name[name].append(path)
            for qualname in dict.fromkeys(outline.qualnames):
                by_qual[qualname].append(path)
            for name in record.names:
                uses[name].append(path)
            impls.extend((path, t, trait, line) for t, trait, line in record.impls)
        return cls(
            files,
            indexed,
            cut=tuple(sorted(cut)),
            unlisted=unlisted,
            complete=complete,
            names=dict(by_name),
            qualnames=dict(by_qual),
            uses=dict(uses),
            impls=impls,
        )

    def derive(self, files: dict[str, str], replaced: dict[str, FileIndex | None]) -> TreeIndex:
        """A new index: this one with some files' records replaced (this one is unchanged).

        Tables are copied shallowly; only the entries the replaced files touch
        (their names and qualnames, and the names they use) are rebuilt, so a
        staged edit costs about its own file, not the tree.

        Args:
            files: Every regular file of the new view (path to blob id).
            replaced: Path to its new records, or ``None`` where the file is gone
                or not indexed.

        Returns:
            The new :class:`TreeIndex`.
        """
        paths = set(replaced)
        old = [self.indexed[p] for p in paths if p in self.indexed]
        new = [r for r in replaced.values() if r is not None]
        cut = {p for p in self.cut if p not in paths} | {r.path for r in new if r.truncated}
        indexed = dict(self.indexed)
        for p in paths:
            indexed.pop(p, None)
        for r in new:
            indexed[r.path] = r

        def rebuilt(table: dict[str, list[str]], column: Callable[[FileIndex], Iterable[str]]
                    ) -> dict[str, list[str]]:
            # Files by key: dropping a file's entries costs the files sharing the key.
            out = dict(table)
            added: defaultdict[str, list[str]] = defaultdict(list)
            for r in new:
                for key in dict.fromkeys(column(r)):
                    added[key].append(r.path)
            for key in {k for r in old for k in column(r)} | set(added):
                kept = [p for p in table.get(key, ()) if p not in paths]
                kept += added.get(key, ())
                if kept:
                    out[key] = kept
                else:
                    out.pop(key, None)
            return out

        impls = [x for x in self.impls if x[0] not in paths]
        for r in new:
            impls.extend((r.path, t, trait, line) for t, trait, line in r.impls)
        index = TreeIndex(
            files,
            indexed,
            cut=tuple(sorted(cut)),
            unlisted=self.unlisted,
            complete=self.complete,
            names=rebuilt(self._name_paths, lambda r: r.outline.names),
            qualnames=rebuilt(self._qualname_paths, lambda r: r.outline.qualnames),
            uses=rebuilt(self.uses, lambda r: r.names),
            impls=impls,
        )
        symbols = self._symbols
        if symbols is not None:  # else made on first use
            symbols = dict(symbols)
            for r in old:
                for symbol in r.outline.symbols:
                    if symbols.get(symbol) == r.path:
                        del symbols[symbol]
            for r in new:
                symbols.update(dict.fromkeys(r.outline.symbols, r.path))
            index._symbols = symbols
        return index

    def truncated_for(self, visible: Callable[[str], bool]) -> bool:
        """Whether this view's index was cut where a caller may see.

        Args:
            visible: Whether the caller may see a path (``CallContext.visible``);
                called for the paths of :attr:`cut` in order, until one is seen.

        Returns:
            True if the listing stopped (:attr:`unlisted`) or the caller may see
            a file the view indexed in part or not at all; a file it cannot see
            never makes this True.
        """
        return self.unlisted or any(visible(path) for path in self.cut)

    @property
    def imports(self) -> list[tuple[str, Import]]:
        """``(path, Import)`` for every import, file by file (made on first use)."""
        found = self._imports
        if found is None:
            found = self._imports = [
                (path, imp) for path, record in self.indexed.items() for imp in record.imports
            ]
        return found

    def _symbol_paths(self) -> dict[str, str]:
        """SCIP symbol to the path of its file (made on first use)."""
        found = self._symbols
        if found is None:
            found = {}
            for path, record in self.indexed.items():
                found.update(dict.fromkeys(record.outline.symbols, path))
            self._symbols = found
        return found

    def _base_paths(self) -> dict[str, list[str]]:
        """Base name to the files with a definition naming it (made on first use)."""
        found = self._bases
        if found is None:
            table: defaultdict[str, list[str]] = defaultdict(list)
            for path, record in self.indexed.items():
                for base in record.outline.bases:
                    table[base].append(path)
            found = self._bases = dict(table)
        return found

    def _name_rank(self) -> dict[str, int]:
        """Each defined name's place in ``by_name`` (made on first use)."""
        found = self._ranks
        if found is None:
            found = self._ranks = {name: i for i, name in enumerate(self._name_paths)}
        return found

    def defined_in(self, name: str) -> list[str]:
        """Paths of the files defining ``name``, in view order, without making definitions.

        Do not change the list.
        """
        return self._name_paths.get(name, _NO_PATHS)

    def names(self) -> NameIndex:
        """The name lookup structures of this index (made on first use, then kept)."""
        found = self._names
        if found is None:
            found = self._names = NameIndex(self.by_name)
        return found

    def uses_of(self, name: str) -> Iterator[tuple[str, Occurrence]]:
        """Every occurrence of a name (references and calls) with its file's path, file by file."""
        for path in self.uses.get(name, ()):
            for occ in self.indexed[path].named(name):
                yield path, occ

    def occurrence_count(self) -> int:
        """How many occurrences the index holds (without making them)."""
        return sum(r.occurrence_count for r in self.indexed.values())

    def calls_in(self, d: Definition) -> list[Occurrence]:
        """Call occurrences inside a definition (callees), in source order."""
        record = self.indexed.get(d.path)
        if record is None:
            return []
        return [o for o in record.inside(d.qualname) if o.roles & Role.CALL]

    def enclosing(self, path: str, occ: Occurrence) -> Definition | None:
        """The definition an occurrence sits in, or ``None`` at file level."""
        return None if occ.enclosing is None else self.by_place.get((path, occ.enclosing))

    def resolve(
        self,
        symbol: str,
        path: str | None = None,
        visible: Callable[[str], bool] | None = None,
    ) -> list[Definition]:
        """Definitions a symbol argument names, best first.

        Args:
            symbol: A SCIP symbol string, a dotted name within a file
                (``Router.add_route``) or a plain name (``add_route``); each
                form is tried in that order until one finds something.
            path: Keep only definitions in that file or under that folder.
            visible: Keep only definitions whose path this accepts, at every
                step, so a definition it refuses never changes which form is
                used (a name defined only where the caller cannot see is not
                found, exactly as one defined nowhere).

        Returns:
            The definitions, ordered by :func:`rank_key`; empty if none.
        """
        prefix = None if path is None else path.rstrip("/") + "/"

        def kept(defs: Iterable[Definition]) -> list[Definition]:
            return [
                d
                for d in defs
                if (prefix is None or d.path == path or d.path.startswith(prefix))
                and (visible is None or visible(d.path))
            ]

        found: list[Definition] = []
        by_symbol = self.by_symbol.get(symbol)
        if by_symbol is not None:
            found = kept([by_symbol])
        if not found:
            found = kept(self.by_qualname.get(symbol, ()))
        if not found and "." in symbol:
            tail = symbol.rsplit(".", 1)[1]
            found = kept(d for d in self.by_name.get(tail, ()) if d.qualname.endswith(symbol))
        if not found:
            found = kept(self.by_name.get(symbol, ()))
        return sorted(found, key=rank_key)


FUZZY_CANDIDATES = 150
"""Names compared by edit ratio at most, per fuzzy query (those sharing most bigrams)."""


class NameIndex:
    """Lookup structures over the names of one index, made once per index.

    * exact and case-insensitive: a dict from each lower-cased name to its spellings;
    * prefix: the lower-cased names sorted, searched by bisection;
    * substring: every lower-cased name in one newline-joined string, searched
      with ``str.find`` (in C);
    * fuzzy: names by the bigrams of their lower-cased form; a query compares
      (``difflib`` ratio) only the :data:`FUZZY_CANDIDATES` names sharing the
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
                applied before the :data:`FUZZY_CANDIDATES` cut, so names it
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
            if taken >= FUZZY_CANDIDATES:
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


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[object, object] = OrderedDict()

    def get(self, key: object) -> object | None:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: object, value: object) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while records are built in bulk.

    Records hold no reference cycles, but each collection scans every live
    object: building a large index with the collector on spends about half its
    time there. Nested and concurrent pauses share one switch; the collector is
    back on when the last one ends (reference counting frees memory meanwhile).
    """
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


def git_blob_id(data: bytes) -> str:
    """The git blob id of some content.

    Args:
        data: The content.

    Returns:
        40 hex digits: SHA-1 of ``blob <size in decimal>``, a NUL, then ``data``.
    """
    head = b"blob %d\0" % len(data)
    return hashlib.sha1(head + data, usedforsecurity=False).hexdigest()


class _Fetch:
    """Reads one file's records row from the persisted index, when first called."""

    __slots__ = ("_blob", "_path", "_persisted", "found")

    def __init__(self, persisted: PersistedIndex, path: str, blob: str) -> None:
        self._persisted = persisted
        self._path = path
        self._blob = blob
        self.found = False  # a verified row was read (a later failure is then its check's)

    def __call__(self) -> bytes | None:
        """The row's verified bytes (still untrusted input), or ``None``."""
        data = self._persisted.load([(self._path, self._blob)]).get((self._path, self._blob))
        self.found = data is not None
        return data


_POOL: ParsePool | None = None
_POOL_LOCK = threading.Lock()


def _shared_pool() -> ParsePool:
    """The process's worker pool (one for every indexer of the process)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ParsePool()
            # Stopped before the interpreter tears its modules down, not during.
            atexit.register(_POOL.close)
        return _POOL


class Indexer:
    """Per-engine index state: the blob and view caches, the persisted rows (thread-safe).

    Args:
        persisted: Where encoded records are kept between processes
            (engine/semantic/persist.py), or ``None`` to keep nothing.
        pool: Worker processes that parse; default the process's shared pool.
    """

    def __init__(
        self, persisted: PersistedIndex | None = None, pool: ParsePool | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._blobs = _LRU(BLOB_CACHE_ENTRIES)
        self._views = _LRU(VIEW_CACHE_ENTRIES)
        self._sizes = _LRU(4 * VIEW_CACHE_ENTRIES)  # listing -> over MAX_INDEXED_FILES?
        self._pool = pool
        self.persisted = persisted
        self.parsed = 0  # files parsed so far (tests and benchmarks read it)
        self.loaded = 0  # files whose records came from the persisted index

    def persist_to(self, persisted: PersistedIndex | None) -> None:
        """Keep records in (and read them from) ``persisted`` from now on."""
        self.persisted = persisted

    def file_index(
        self, path: str, blob: str, read: Callable[[str], bytes | None]
    ) -> FileIndex | None:
        """The record of one file, parsed on a cache miss; ``None`` if not indexable.

        Args:
            path: A repository path.
            blob: An id of the content (the git blob id, or :func:`git_blob_id`
                of the plaintext): records are cached under ``(path, blob)``.
            read: Returns the plaintext at a path, ``None`` if there is none;
                may raise :class:`RepositoryError` (the file is then left out).

        Returns:
            The records, or ``None`` for a path in no known language or unreadable.
        """
        language = language_for(path)
        if language is None:
            return None
        key = (path, blob)
        with self._lock:
            cached = self._blobs.get(key)
        if isinstance(cached, FileIndex):
            return cached
        try:
            data = read(path)
        except RepositoryError:  # a seal that does not open: not indexed
            return None
        if data is None:
            return None
        record = extract(path, blob, data, language)
        with self._lock:
            self._blobs.put(key, record)
            self.parsed += 1
        return record

    def _records(
        self,
        repo: git.Repository,
        files: dict[str, str],
        read: Callable[[str], bytes | None],
        staged: frozenset[str],
    ) -> dict[str, FileIndex]:
        """Records of some files of one view: from memory, the persisted rows, or parsed.

        Only files of the commit's tree (not ``staged``) whose path the policy
        does not protect and whose blob is not sealed (git holds the plaintext:
        it hashes to the blob id) are persisted.
        """
        found: dict[str, FileIndex] = {}
        missing: list[tuple[str, str, str]] = []
        with self._lock:
            for path, blob in files.items():
                language = language_for(path)
                if language is None:
                    continue
                cached = self._blobs.get((path, blob))
                if isinstance(cached, FileIndex):
                    found[path] = cached
                else:
                    missing.append((path, blob, language))
        if not missing:
            return found
        persisted = self.persisted
        loaded: dict[tuple[str, str], bytes] = {}
        if persisted is not None:
            loaded = persisted.load_outlines((p, b) for p, b, _l in missing if p not in staged)

        def keep(path: str, blob: str, data: bytes) -> bool:
            # The blob is in git in the clear exactly when the plaintext hashes to
            # its id: a sealed blob's id is the hash of its ciphertext.
            return (
                persisted is not None
                and path not in staged
                and not repo.protects(path)
                and git_blob_id(data) == blob
            )

        def repair(path: str, blob: str, language: str, fetch: _Fetch | None = None) -> Repair:
            return partial(self._repair, path, blob, language, read, keep, fetch)

        items: list[Item] = []
        fresh: list[FileIndex] = []
        for path, blob, language in missing:
            outline = loaded.get((path, blob))
            if outline is not None and persisted is not None:
                fetch = _Fetch(persisted, path, blob)
                mend = repair(path, blob, language, fetch)
                try:
                    fresh.append(decode_stored(outline, fetch, path, blob, language, mend))
                    continue
                except CodecError:
                    persisted.rejected += 1
            try:
                data = read(path)
            except RepositoryError:  # a seal that does not open: not indexed
                continue
            if data is not None:
                items.append((path, blob, data, language))
        loaded_count = len(fresh)
        rows: list[tuple[str, str, bytes, bytes]] = []
        if len(items) >= MIN_POOL_FILES:
            pool = self._pool or _shared_pool()
            for (path, blob, data, language), payload in pool.parse(items):
                try:
                    record = decode_lazily(
                        payload, path, blob, language, repair(path, blob, language)
                    )
                except CodecError:  # not from a worker of this code: parse it here
                    fresh.append(extract(path, blob, data, language))
                    continue
                fresh.append(record)
                if keep(path, blob, data):
                    rows.append((path, blob, encode_outline(record), payload))
        else:  # a few files (a staged edit, a new commit): here, no encoding unless kept
            for path, blob, data, language in items:
                record = extract(path, blob, data, language)
                fresh.append(record)
                if keep(path, blob, data):
                    rows.append((path, blob, encode_outline(record), encode(record)))
        if persisted is not None and rows:
            persisted.store(rows)
        with self._lock:
            for record in fresh:
                self._blobs.put((record.path, record.blob), record)
                found[record.path] = record
            self.parsed += len(fresh) - loaded_count
            self.loaded += loaded_count
        return found

    def _repair(
        self,
        path: str,
        blob: str,
        language: str,
        read: Callable[[str], bytes | None],
        keep: Callable[[str, str, bytes], bool],
        fetch: _Fetch | None,
    ) -> FileIndex | None:
        """Parse a file again whose encoded records failed a check at first use.

        The rows count as missing, as if they had failed when read: the file is
        parsed from its content in the view it was first read for (the same
        blob), its rows rewritten if it may be kept, and every cached view
        dropped (their tables came from the outline; they are merged again on
        next use). ``None`` if the file can no longer be read (it is dropped
        from the cache too). ``fetch``: how the records were read from the
        persisted index, if they were (they then count as parsed, no longer as
        loaded; a row read and verified but failing a check counts as rejected,
        as a row failing its MAC already did when read).
        """
        persisted = self.persisted
        if persisted is not None and (fetch is None or fetch.found):
            persisted.rejected += 1
        if fetch is not None:
            with self._lock:
                self.loaded -= 1
        try:
            data = read(path)
        except RepositoryError:
            data = None
        record = extract(path, blob, data, language) if data is not None else None
        if record is not None and persisted is not None and keep(path, blob, data or b""):
            persisted.store([(path, blob, encode_outline(record), encode(record))])
        with self._lock:
            # Dropped last, so a view merged meanwhile (from the outline) goes too;
            # the caller takes the new records at once.
            self._views.items.clear()
            if record is None:
                self._blobs.items.pop((path, blob), None)
            else:
                self.parsed += 1
        return record

    def _large(self, listing: object, files: dict[str, str]) -> bool:
        """Whether a view has more files in a known language than :data:`MAX_INDEXED_FILES`.

        Kept per listing (tree id, staged paths and blob ids), so a call on a
        view already seen does not count its files again.
        """
        if len(files) <= MAX_INDEXED_FILES:
            return False
        with self._lock:
            known = self._sizes.get(listing)
        if isinstance(known, bool):
            return known
        count = sum(1 for path in files if language_for(path) is not None)
        large = count > MAX_INDEXED_FILES
        with self._lock:
            self._sizes.put(listing, large)
        return large

    def _build(
        self,
        repo: git.Repository,
        files: dict[str, str],
        read: Callable[[str], bytes | None],
        staged: frozenset[str],
        scope: Scope | None,
    ) -> TreeIndex:
        """Index a view's files: all of them in a known language, up to the bound.

        Past :data:`MAX_INDEXED_FILES`, the files ``scope`` matches come first
        (in path order), then the others in path order, so what a caller may
        not see never decides which of its own files are indexed. The files
        indexed are merged in path order.
        """
        indexable = sorted(path for path in files if language_for(path) is not None)
        left_out: list[str] = []
        may_see: Callable[[str], bool] | None = None
        complete = len(indexable) <= MAX_INDEXED_FILES
        if not complete:
            if scope is None:
                ordered = indexable
                left_out = indexable[MAX_INDEXED_FILES:]
            else:
                may_see = _InScope(scope)
                matched = [p for p in indexable if may_see(p)]
                if len(matched) < MAX_INDEXED_FILES:
                    matched_set = set(matched)
                    ordered = matched + [p for p in indexable if p not in matched_set]
                else:
                    ordered = matched
                left_out = matched[MAX_INDEXED_FILES:]  # the others no caller of it may see
            indexable = sorted(ordered[:MAX_INDEXED_FILES])
        chosen = {path: files[path] for path in indexable}
        with _gc_paused():
            records = self._records(repo, chosen, read, staged)
            return TreeIndex.build(
                files,
                (records[p] for p in chosen if p in records),
                left_out=left_out,
                unlisted=len(files) >= MAX_LISTED_FILES,
                complete=complete,
                may_see=may_see,
            )

    def view(
        self,
        repo: git.Repository,
        agent: str,
        staged: git.StagedChange | None,
        scope: Scope | None = None,
    ) -> TreeIndex:
        """The index of a session's view: its lane or base, with its staged edits over it.

        A view with staged edits is derived from its base tree's view (cached,
        or built first): only the staged files are parsed and only the tables
        their names touch are rebuilt.

        A view with more files in a known language than
        :data:`MAX_INDEXED_FILES` indexes those ``scope`` matches first (see
        :meth:`_build`); it is then kept per scope, and built in full for a
        staged change. Any other view is the same for every scope.

        Args:
            repo: The engine's repository.
            agent: A validated agent name.
            staged: The session's staged change, or ``None``.
            scope: The caller's path scopes (``VerifiedToken.path_scopes``: a
                path is in scope iff every list has a glob matching it), or
                ``None`` to index in path order alone (every path may be seen).

        Returns:
            The view's :class:`TreeIndex`, shared by every session with the same
            view (and, for a view over the bound, the same scope).
        """
        tree_id, files, read = repo.view_files(agent, staged, limit=MAX_LISTED_FILES)
        changed = sorted(staged.changes) if staged is not None else []
        listing = (tree_id, tuple((p, files.get(p)) for p in changed))
        large = self._large(listing, files)
        if large and scope is not None:
            scope = tuple(tuple(globs) for globs in scope)
            key: tuple[object, ...] = (listing, scope)
        else:
            scope = None
            key = (listing, None)
        with self._lock:
            cached = self._views.get(key)
        if isinstance(cached, TreeIndex):
            return cached
        if large or not changed or staged is None:
            index = self._build(repo, files, read, frozenset(changed), scope)
        else:
            base_key = ((tree_id, ()), None)
            with self._lock:
                found = self._views.get(base_key)
            base = found if isinstance(found, TreeIndex) else None
            if base is None:
                clean = git.StagedChange(base=staged.base)
                base_tree, base_files, base_read = repo.view_files(
                    agent, clean, limit=MAX_LISTED_FILES
                )
                if not self._large((base_tree, ()), base_files):
                    base = self._build(repo, base_files, base_read, frozenset(), None)
                    if base_tree == tree_id:
                        with self._lock:
                            self._views.put(base_key, base)
            if base is None or not base.complete or base.unlisted or len(files) >= MAX_LISTED_FILES:
                index = self._build(repo, files, read, frozenset(changed), None)
            else:
                present = {p: files[p] for p in changed if p in files}
                records = self._records(repo, present, read, frozenset(changed))
                index = base.derive(files, {p: records.get(p) for p in changed})
        with self._lock:
            self._views.put(key, index)
        return index


_INDEXERS: weakref.WeakKeyDictionary[git.Repository, Indexer] = weakref.WeakKeyDictionary()
_INDEXERS_LOCK = threading.Lock()


def indexer_for(repo: git.Repository) -> Indexer:
    """The :class:`Indexer` of a repository object (one per engine), made on first use."""
    with _INDEXERS_LOCK:
        found = _INDEXERS.get(repo)
        if found is None:
            found = Indexer()
            _INDEXERS[repo] = found
        return found
