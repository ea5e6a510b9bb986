"""The index of a session's view: per-blob records, cached, merged per view.

:class:`Indexer` (one per :class:`~engine.vcs.Repository`, so one per engine)
keeps two bounded in-memory caches:

* per blob: ``(path, blob id) -> FileIndex``, least recently used first out,
  at most :data:`BLOB_CACHE_ENTRIES` entries. A new commit, or a session's staged
  edit, re-parses only the files whose blob changed; everything else is reused.
  The path is part of the key because records name their path and because a
  sealed blob opens only at its own path (docs/sealing.md);
* per view: ``(tree id, staged paths and blob ids) -> TreeIndex``, the merged
  lookup tables, at most :data:`VIEW_CACHE_ENTRIES`.

Nothing is persisted: an engine process starts cold and indexes on the first
query (docs/semantic.md). Records built from protected (sealed) files live only
in this memory and reach a caller only through the handlers' scope pruning.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from engine import vcs
from engine.errors import RepositoryError
from engine.semantic.extract import extract
from engine.semantic.languages import language_for
from engine.semantic.records import Definition, FileIndex, Import, Occurrence, Role

__all__ = [
    "BLOB_CACHE_ENTRIES",
    "MAX_INDEXED_FILES",
    "VIEW_CACHE_ENTRIES",
    "Indexer",
    "TreeIndex",
    "indexer_for",
]

BLOB_CACHE_ENTRIES = 50_000
VIEW_CACHE_ENTRIES = 16
MAX_INDEXED_FILES = 20_000
MAX_LISTED_FILES = 200_000


@dataclass
class TreeIndex:
    """The union of the file records of one view, with lookup tables.

    Attributes:
        files: Every regular file of the view (path to blob id), indexed or not.
        indexed: Path to record, for files in a known language.
        truncated: True if :data:`MAX_INDEXED_FILES` or a per-file bound cut something.
    """

    files: dict[str, str]
    indexed: dict[str, FileIndex]
    truncated: bool
    by_name: dict[str, list[Definition]] = field(default_factory=dict)
    by_qualname: dict[str, list[Definition]] = field(default_factory=dict)
    by_symbol: dict[str, Definition] = field(default_factory=dict)
    by_place: dict[tuple[str, str], Definition] = field(default_factory=dict)
    uses: dict[str, list[tuple[str, Occurrence]]] = field(default_factory=dict)
    inside: dict[tuple[str, str], list[Occurrence]] = field(default_factory=dict)
    imports: list[tuple[str, Import]] = field(default_factory=list)
    children: dict[str, list[Definition]] = field(default_factory=dict)
    impls: list[tuple[str, str, str, int]] = field(default_factory=list)

    @classmethod
    def build(
        cls, files: dict[str, str], records: Iterable[FileIndex], truncated: bool
    ) -> TreeIndex:
        """Merge file records into one index."""
        by_name: defaultdict[str, list[Definition]] = defaultdict(list)
        by_qual: defaultdict[str, list[Definition]] = defaultdict(list)
        uses: defaultdict[str, list[tuple[str, Occurrence]]] = defaultdict(list)
        inside: defaultdict[tuple[str, str], list[Occurrence]] = defaultdict(list)
        children: defaultdict[str, list[Definition]] = defaultdict(list)
        index = cls(files, {}, truncated)
        for record in records:
            index.indexed[record.path] = record
            index.truncated = index.truncated or record.truncated
            for d in record.definitions:
                by_name[d.name].append(d)
                by_qual[d.qualname].append(d)
                index.by_symbol[d.symbol] = d
                index.by_place.setdefault((d.path, d.qualname), d)
                for base in d.bases:
                    children[base].append(d)
            for occ in record.occurrences:
                uses[occ.name].append((record.path, occ))
                if occ.enclosing is not None:
                    inside[(record.path, occ.enclosing)].append(occ)
            index.imports.extend((record.path, imp) for imp in record.imports)
            index.impls.extend((record.path, t, trait, line) for t, trait, line in record.impls)
        for path, typ, trait, _line in index.impls:
            for d in by_name.get(typ, ()):
                if d.path == path or d.kind in ("struct", "enum", "type"):
                    children[trait].append(d)
        index.by_name, index.by_qualname = dict(by_name), dict(by_qual)
        index.uses, index.inside, index.children = dict(uses), dict(inside), dict(children)
        return index

    def calls_in(self, d: Definition) -> list[Occurrence]:
        """Call occurrences inside a definition (callees), in source order."""
        return [o for o in self.inside.get((d.path, d.qualname), ()) if o.roles & Role.CALL]

    def enclosing(self, path: str, occ: Occurrence) -> Definition | None:
        """The definition an occurrence sits in, or ``None`` at file level."""
        return None if occ.enclosing is None else self.by_place.get((path, occ.enclosing))

    def resolve(self, symbol: str, path: str | None = None) -> list[Definition]:
        """Definitions a symbol argument names, best first.

        ``symbol`` is a SCIP symbol string, a dotted name within a file
        (``Router.add_route``) or a plain name (``add_route``); ``path`` keeps
        definitions in that file or under that folder.
        """
        found: list[Definition]
        if symbol in self.by_symbol:
            found = [self.by_symbol[symbol]]
        else:
            found = list(self.by_qualname.get(symbol, ()))
            if not found and "." in symbol:
                tail = symbol.rsplit(".", 1)[1]
                found = [d for d in self.by_name.get(tail, ()) if d.qualname.endswith(symbol)]
            if not found:
                found = list(self.by_name.get(symbol, ()))
        if path is not None:
            prefix = path.rstrip("/") + "/"
            found = [d for d in found if d.path == path or d.path.startswith(prefix)]
        return sorted(found, key=rank_key)


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


class Indexer:
    """Per-engine index state: the blob and view caches (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blobs = _LRU(BLOB_CACHE_ENTRIES)
        self._views = _LRU(VIEW_CACHE_ENTRIES)
        self.parsed = 0  # files parsed so far (tests and benchmarks read it)

    def file_index(
        self, path: str, blob: str, read: Callable[[str], bytes | None]
    ) -> FileIndex | None:
        """The record of one file, parsed on a cache miss; ``None`` if not indexable."""
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

    def view(self, repo: vcs.Repository, agent: str, staged: vcs.StagedChange | None) -> TreeIndex:
        """The index of a session's view: its lane or base, with its staged edits over it."""
        tree_id, files, read = repo.view_files(agent, staged, limit=MAX_LISTED_FILES)
        changed = sorted(staged.changes) if staged is not None else []
        key = (tree_id, tuple((p, files.get(p)) for p in changed))
        with self._lock:
            cached = self._views.get(key)
        if isinstance(cached, TreeIndex):
            return cached
        records: list[FileIndex] = []
        truncated = len(files) >= MAX_LISTED_FILES
        for path in sorted(files):
            if len(records) >= MAX_INDEXED_FILES:
                truncated = True
                break
            record = self.file_index(path, files[path], read)
            if record is not None:
                records.append(record)
        index = TreeIndex.build(files, records, truncated)
        with self._lock:
            self._views.put(key, index)
        return index


_INDEXERS: weakref.WeakKeyDictionary[vcs.Repository, Indexer] = weakref.WeakKeyDictionary()
_INDEXERS_LOCK = threading.Lock()


def indexer_for(repo: vcs.Repository) -> Indexer:
    """The :class:`Indexer` of a repository object (one per engine), made on first use."""
    with _INDEXERS_LOCK:
        found = _INDEXERS.get(repo)
        if found is None:
            found = Indexer()
            _INDEXERS[repo] = found
        return found
