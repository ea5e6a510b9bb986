"""The index of a session's view, cached: one :class:`Indexer` per repository object.

An :class:`Indexer` keeps the records of each blob (by path and blob id) and
the merged index of each view in bounded memory; below them the persisted
index (engine/semantic/persist.py), then parsing, in worker processes
(engine/semantic/pool.py) when there are many files. Records of protected
files are never persisted. :func:`indexer_for` gives a repository object's
indexer. See docs/semantic.md, "Building and reuse".
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from engine import git, progress
from engine.errors import RepositoryError
from engine.limits import LIMITS
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
from engine.semantic.pool import Item, ParsePool
from engine.semantic.tree import TreeIndex

__all__ = [
    "Indexer",
    "Scope",
    "git_blob_id",
    "indexer_for",
]


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
        self._blobs = _LRU(LIMITS.blob_cache_entries)
        self._views = _LRU(LIMITS.view_cache_entries)
        self._sizes = _LRU(4 * LIMITS.view_cache_entries)  # listing -> over LIMITS.indexed_files?
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
        total = len(items)
        # The view is shared by every scope: its file count is not the
        # caller's to know, so progress is told in steps of 5% of 100.
        what = "indexing the repository"

        def step(done: int) -> None:
            progress.report(done * 20 // total * 5, 100, what)

        if total:
            step(0)
        if len(items) >= LIMITS.pool_min_files:
            pool = self._pool or _shared_pool()
            for done, ((path, blob, data, language), payload) in enumerate(pool.parse(items), 1):
                step(done)
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
            for done, (path, blob, data, language) in enumerate(items, 1):
                step(done)
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
        """Whether a view has more files in a known language than ``LIMITS.indexed_files``.

        Kept per listing (tree id, staged paths and blob ids), so a call on a
        view already seen does not count its files again.
        """
        if len(files) <= LIMITS.indexed_files:
            return False
        with self._lock:
            known = self._sizes.get(listing)
        if isinstance(known, bool):
            return known
        count = sum(1 for path in files if language_for(path) is not None)
        large = count > LIMITS.indexed_files
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

        Past ``LIMITS.indexed_files``, the files ``scope`` matches come first
        (in path order), then the others in path order, so what a caller may
        not see never decides which of its own files are indexed. The files
        indexed are merged in path order.
        """
        indexable = sorted(path for path in files if language_for(path) is not None)
        left_out: list[str] = []
        may_see: Callable[[str], bool] | None = None
        complete = len(indexable) <= LIMITS.indexed_files
        if not complete:
            if scope is None:
                ordered = indexable
                left_out = indexable[LIMITS.indexed_files :]
            else:
                may_see = _InScope(scope)
                matched = [p for p in indexable if may_see(p)]
                if len(matched) < LIMITS.indexed_files:
                    matched_set = set(matched)
                    ordered = matched + [p for p in indexable if p not in matched_set]
                else:
                    ordered = matched
                left_out = matched[LIMITS.indexed_files :]  # the others no caller of it may see
            indexable = sorted(ordered[: LIMITS.indexed_files])
        chosen = {path: files[path] for path in indexable}
        with _gc_paused():
            records = self._records(repo, chosen, read, staged)
            return TreeIndex.build(
                files,
                (records[p] for p in chosen if p in records),
                left_out=left_out,
                unlisted=len(files) >= LIMITS.listed_files,
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
        ``LIMITS.indexed_files`` indexes those ``scope`` matches first (see
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
        tree_id, files, read = repo.view_files(agent, staged, limit=LIMITS.listed_files)
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
                    agent, clean, limit=LIMITS.listed_files
                )
                if not self._large((base_tree, ()), base_files):
                    base = self._build(repo, base_files, base_read, frozenset(), None)
                    if base_tree == tree_id:
                        with self._lock:
                            self._views.put(base_key, base)
            unlisted = len(files) >= LIMITS.listed_files
            if base is None or not base.complete or base.unlisted or unlisted:
                index = self._build(repo, files, read, frozenset(changed), None)
            else:
                present = {p: files[p] for p in changed if p in files}
                records = self._records(repo, present, read, frozenset(changed))
                index = base.derive(files, {p: records.get(p) for p in changed})
        with self._lock:
            self._views.put(key, index)
        if not changed:
            self._note_base(repo, tree_id)
        return index

    def _note_base(self, repo: git.Repository, tree_id: str) -> None:
        """Record in the persisted index that the base head was indexed, if this view is it."""
        if self.persisted is None:
            return
        try:
            head = repo.base_head()
        except RepositoryError:  # a base that cannot be read: nothing to record
            return
        if str(head.tree_id) == tree_id:
            self.persisted.record_indexed(str(head.id), tree_id)


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
