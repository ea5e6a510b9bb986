"""Version control over a real git repository, in git object space only.

This module is the engine's only door to git (docs/architecture.md). It reads and
writes objects and references through pygit2 (libgit2) and nothing else:

* it never touches a working tree or the index file on disk (trees are built
  in an in-memory :class:`pygit2.Index`), so it works the same on bare and
  non-bare repositories;
* it never writes ``refs/heads/main``: an agent's commits land on its lane
  ``refs/heads/agent/<name>``, and content-addressed blobs on ``refs/chit/*``;
* every reference update is a compare-and-swap done while holding the
  reference's lock (a libgit2 reference transaction), a per-reference
  :class:`threading.Lock` in this process and a per-reference ``flock`` shared
  by every process that writes the repository through chit;
* it never opens a host path built from agent input and never hands an agent
  string to git as an option or as revision syntax: revisions go through
  :meth:`Repository.resolve`, which accepts only branch names and hex ids.

Paths reaching this module were validated by the caller (``engine.paths``) and
scope is applied by the caller too: read-side listings take a ``visible``
predicate and prune what it rejects. As a last line of defence the module
re-checks the shape of every path and raises :class:`ValueError` (a programming
error, never an agent-facing code) when one slips through.

A session's writes stage in a :class:`StagedChange` (kept in memory by the
caller) relative to a fixed base commit. A symbolic-link entry in the
repository is data: its target is read as bytes and is never followed, and a
path running through one is refused with ``symlink_in_path``.

Protected content (``docs/sealing.md``): the repository's :class:`~engine.sealing.Sealing`
seals blobs at protected paths as the commit writes them, and every read of a
blob's content here goes through it, so callers only ever see plaintext. Staged
content is plaintext; where sealed blob ids cannot say whether content changed
(every seal has a fresh nonce), plaintexts are compared.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import sys
import threading
import time as _time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import pygit2
from pygit2.enums import FileMode, ObjectType, RepositoryOpenFlag, SortMode

from engine.auth.sealing import NO_SEALING, Sealing, is_sealed
from engine.errors import ConfigurationError, InvalidRequestError, RepositoryError

__all__ = [
    "LANE_PREFIX",
    "LOG_LIMIT_MAX",
    "LOG_SCAN_MAX",
    "MAIN",
    "MODE_EXECUTABLE",
    "MODE_FILE",
    "MODE_SYMLINK",
    "STORE_PREFIX",
    "Repository",
    "StagedChange",
    "commit_trailers",
    "common_dir",
    "lane_ref",
    "private_folder",
]

MAIN: Final = "refs/heads/main"
"""The protected trunk. Read here, never written."""

LANE_PREFIX: Final = "refs/heads/agent/"
STORE_PREFIX: Final = "refs/chit/"

MODE_FILE: Final = 0o100644
MODE_EXECUTABLE: Final = 0o100755
MODE_SYMLINK: Final = 0o120000
_MODE_TREE: Final = 0o040000
_MODE_GITLINK: Final = 0o160000

LOG_LIMIT_MAX: Final = 200
"""Largest ``limit`` accepted by :meth:`Repository.log`."""
LOG_SCAN_MAX: Final = 10_000
"""Commits :meth:`Repository.log` examines at most before it reports truncation."""
LOG_PATHS_MAX: Final = 50
SUMMARY_MAX: Final = 200
_STORE_RETRIES: Final = 8

_Kind = Literal["file", "symlink", "tree", "gitlink"]
_Entry = tuple[int, pygit2.Oid]  # (filemode, object id) of a non-tree entry

_FILE_DIR_MESSAGE: Final = "would turn a file into a directory or the reverse"
_HEX_PREFIX = re.compile(r"[0-9a-fA-F]{7,40}")
_BRANCH_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
_STORE_NAME = re.compile(r"[0-9a-f]{64}")
_AGENT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
_TRAILER = re.compile(r"([A-Za-z0-9-]+):[ \t]*(.*)")


def lane_ref(agent: str) -> str:
    """Return the full reference name of an agent's lane.

    Args:
        agent: The agent name, already validated by the caller (one reference
            component: letters, digits, ``._-``).

    Returns:
        ``"refs/heads/agent/<agent>"``.

    Raises:
        ValueError: If ``agent`` is not a single valid reference component (a
            caller bug; agents never reach this unvalidated).
    """
    ref = LANE_PREFIX + agent
    if not _AGENT_NAME.fullmatch(agent) or not pygit2.reference_is_valid_name(ref):
        raise ValueError("agent name is not a valid lane component")
    return ref


def private_folder(path: str) -> None:
    """Make ``path`` a folder only this user may use (0700), creating it and its parents.

    For chit's folder in the git directory (``<common git dir>/chit``) and the
    folders under it. An existing folder looser than 0700 is tightened; one
    that is a symbolic link, not a folder, or another user's is refused, so
    chit never writes its lock files or its index where someone else chose.
    The check is made on a descriptor opened without following a final link,
    so the folder cannot be swapped between the check and the ``fchmod``.

    Raises:
        OSError: If it cannot be created or opened, or is refused as above.
    """
    os.makedirs(path, mode=0o700, exist_ok=True)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError(path)
        if info.st_uid != os.geteuid():
            raise PermissionError(f"{path} belongs to another user")
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _check_path(path: str) -> None:
    """Re-check the shape of a caller-validated repository path (defence in depth)."""
    if not isinstance(path, str) or not path or "\0" in path or "\\" in path:
        raise ValueError("repository path was not validated")
    for segment in path.split("/"):
        if segment in ("", ".", "..") or segment.casefold().rstrip(" .") == ".git":
            raise ValueError("repository path was not validated")


def _under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or lies inside folder ``prefix`` (whole segments)."""
    return path == prefix or path.startswith(prefix + "/")


def _kind_of_mode(mode: int) -> _Kind:
    if mode == _MODE_TREE:
        return "tree"
    if mode == MODE_SYMLINK:
        return "symlink"
    if mode == _MODE_GITLINK:
        return "gitlink"
    return "file"


def _normal_mode(mode: int) -> int:
    """Map a blob mode onto what git writes today (legacy 100664 becomes 100644)."""
    if mode in (MODE_SYMLINK, MODE_EXECUTABLE):
        return mode
    return MODE_FILE


# pygit2 (1.18 to 1.21 at least) keeps one reference to every ``str`` passed as
# a path or reference name to ``Tree.__getitem__``/``__contains__``/``/`` and to
# ``Repository.lookup_reference`` (``references.get``, ``in references``):
# ``pgit_borrow_fsdefault`` never releases the result of ``PyOS_FSPath``. A fresh
# string per call is a few dozen bytes leaked per call, for the life of the
# process. So the engine never hands pygit2 a path: trees are searched by entry
# *index* through a name index per tree id (trees are immutable, so an index is
# valid forever), and reference names handed to pygit2 are one long-lived
# (interned) object per name, only for names of lanes, chit's store and main.
GIT_OBJECT_CACHE_BYTES: Final = 4 << 20
"""Ceiling of each libgit2 handle's parsed-object cache (``GIT_OPT_SET_CACHE_MAX_SIZE``)."""
_TREE_INDEX_ENTRIES: Final = 32_768
"""Entries of all kept name maps together (about 3 MiB); least recently used go first."""
_tree_index: OrderedDict[pygit2.Oid, dict[str, int]] = OrderedDict()
_tree_index_size = 0
_tree_index_lock = threading.Lock()
_huge_tree: tuple[pygit2.Oid, dict[str, int]] | None = None
"""The name map of the last folder too big for the shared budget, kept alone."""


def _tree_names(tree: pygit2.Tree) -> dict[str, int]:
    """``{entry name: entry index}`` of ``tree``, kept per tree id within a budget.

    A folder of more than a quarter of the budget is not kept with the others
    (it would push them all out) but alone, in one slot of its own: reading
    many files of one huge folder (indexing it) builds its map once, not once
    per file.
    """
    global _tree_index_size, _huge_tree
    key = tree.id
    with _tree_index_lock:
        names = _tree_index.get(key)
        if names is not None:
            _tree_index.move_to_end(key)
            return names
        huge = _huge_tree
        if huge is not None and huge[0] == key:
            return huge[1]
    names = {entry.name: i for i, entry in enumerate(tree) if entry.name is not None}
    if len(names) > _TREE_INDEX_ENTRIES // 4:
        with _tree_index_lock:
            _huge_tree = (key, names)
        return names
    with _tree_index_lock:
        if key not in _tree_index:
            _tree_index[key] = names
            _tree_index_size += len(names)
            while _tree_index_size > _TREE_INDEX_ENTRIES:
                _old, dropped = _tree_index.popitem(last=False)
                _tree_index_size -= len(dropped)
    return names


def _tree_entry(tree: pygit2.Tree, path: str) -> pygit2.Object | None:
    """The entry at ``/``-separated ``path`` under ``tree`` (with its ``filemode``), or ``None``.

    The same answer as ``tree[path]`` (``git_tree_entry_bypath``), found segment by
    segment through :func:`_tree_names` and ``tree[index]``, which leaks nothing.
    """
    current = tree
    parts = path.split("/")
    last = len(parts) - 1
    for depth, name in enumerate(parts):
        index = _tree_names(current).get(name)
        if index is None:
            return None
        entry: pygit2.Object = current[index]
        if depth == last:
            return entry
        if not isinstance(entry, pygit2.Tree):
            return None
        current = entry
    return None


def _reference(repo: pygit2.Repository, name: str) -> pygit2.Reference | None:
    """``repo.references.get(name)`` with one long-lived ``str`` per name (see above).

    Only for names from a bounded set: ``main``, lanes and chit's store refs
    (agents come from verified tokens); an agent's own text is never looked up.
    """
    return repo.references.get(sys.intern(name))


def _blob_data(entry: pygit2.Object | None) -> bytes | None:
    if entry is None or entry.type_str != "blob":
        return None
    data: bytes = entry.peel(pygit2.Blob).data
    return data


def _opens_to(sealing: Sealing, path: str, entry: pygit2.Object | None) -> bytes | None:
    """The plaintext of a sealed blob entry, or ``None`` (not a sealed blob, or it does not open).

    For comparisons only: a sealed blob's id changes with every seal (a fresh
    nonce), so equal content is told by its plaintext. Never raises.
    """
    data = _blob_data(entry)
    if data is None or not is_sealed(data):
        return None
    try:
        return sealing.open(path, data)
    except RepositoryError:
        return None


def _same_content(
    sealing: Sealing, old_path: str, a: pygit2.Object | None, new_path: str, b: pygit2.Object | None
) -> bool:
    """Whether two blob entries hold the same content in the same mode, ids aside."""
    if a is None or b is None or a.filemode != b.filemode:
        return False
    if a.id == b.id:
        return True
    left = _opens_to(sealing, old_path, a)
    right = _opens_to(sealing, new_path, b)
    if left is None and right is None:
        return False
    return (left if left is not None else _blob_data(a)) == (
        right if right is not None else _blob_data(b)
    )


def _same_entry(a: pygit2.Object | None, b: pygit2.Object | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(a.id == b.id and a.filemode == b.filemode)


def common_dir(gitdir: str) -> str:
    """The repository's common git directory (a linked worktree's main ``.git``)."""
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as fh:
            named = fh.read().strip()
    except FileNotFoundError:
        return gitdir
    return os.path.normpath(os.path.join(gitdir, named))


def _equals(expected: pygit2.Oid | None) -> Callable[[pygit2.Oid | None], bool]:
    """Return a compare-and-swap predicate accepting exactly ``expected``."""
    return lambda current: current == expected


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _message(commit: pygit2.Commit) -> str:
    return _text(commit.raw_message)


@dataclass
class StagedChange:
    """One session's staged change, held in memory until ``commit``.

    Mutable and not thread-safe: the caller serialises calls per session. The
    :class:`Repository` keeps ``changes`` minimal (a write that restores the
    base content, or a delete of something the base does not have, removes the
    entry), so ``is_empty()`` means "nothing would change".

    Attributes:
        base: The commit the session's view is based on, set by the first
            staged write and after each commit; ``None`` until then.
        changes: Path to new content, or ``None`` for a deletion, in
            insertion order.
        modes: Git file mode of staged writes that are not a plain
            ``0o100644`` file (``0o100755`` or ``0o120000``).
        conflicts: Paths a merge onto the lane could not settle, each with
            ``(base, ours, theirs)`` content (``None``: absent). ``commit`` is
            refused until each is resolved.
        conflict_modes: For each conflict, the git file modes of ours and theirs
            (``None``: absent), so a resolution keeps the chosen side's type.
    """

    base: pygit2.Oid | None = None
    changes: dict[str, bytes | None] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    conflicts: dict[str, tuple[bytes | None, bytes | None, bytes | None]] = field(
        default_factory=dict
    )
    conflict_modes: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)

    def byte_size(self) -> int:
        """Return the sum of staged content sizes in bytes (deletions count 0)."""
        return sum(len(data) for data in self.changes.values() if data is not None)

    def is_empty(self) -> bool:
        """Return whether nothing is staged."""
        return not self.changes


class _View:
    """A session's view: a base tree overlaid with staged changes (read-only).

    Invariant kept by the staging operations: when a staged file sits at a path
    that the base tree has as a folder, every base entry under it is staged as
    deleted. So an exact lookup in ``changes`` first, then in the base tree, is
    the whole truth for any single path.
    """

    def __init__(
        self,
        tree: pygit2.Tree,
        changes: dict[str, bytes | None],
        modes: dict[str, int],
        sealing: Sealing = NO_SEALING,
    ) -> None:
        self.tree = tree
        self.changes = changes
        self.modes = modes
        self.sealing = sealing
        self._folder: tuple[str, pygit2.Tree] | None = None  # the last folder read, loaded

    def _base_entry(self, path: str) -> pygit2.Object | None:
        """``_tree_entry(self.tree, path)``, keeping the last folder's tree object.

        libgit2 caches no tree over 4 KiB, so a folder reached from its parent is
        read and parsed again on every lookup: reading its files one by one (the
        semantic index, in path order) would cost the folder's size per file.
        The folder's object, once loaded, serves the next lookup in the same
        folder; one folder per view is kept.
        """
        folder, _, name = path.rpartition("/")
        last = self._folder
        if last is not None and last[0] == folder:
            parent: pygit2.Object | None = last[1]
        else:
            parent = _tree_entry(self.tree, folder) if folder else self.tree
            if not isinstance(parent, pygit2.Tree):
                return None
            self._folder = (folder, parent)
        if not isinstance(parent, pygit2.Tree):
            return None
        index = _tree_names(parent).get(name)
        return None if index is None else parent[index]

    def entry(self, path: str) -> _Entry | None:
        """Return ``(mode, id)`` of the non-tree entry at ``path``, or ``None``."""
        if path in self.changes:
            data = self.changes[path]
            if data is None:
                return None
            return self.modes.get(path, MODE_FILE), pygit2.hash(data)
        obj = self._base_entry(path)
        if obj is None or obj.filemode == _MODE_TREE:
            return None
        return int(obj.filemode), obj.id

    def data(self, path: str) -> bytes | None:
        """Return the content of the file or symlink entry at ``path``, or ``None``.

        Raises:
            RepositoryError: ``seal_invalid`` if the blob is sealed and does not open.
        """
        if path in self.changes:
            return self.changes[path]
        obj = self._base_entry(path)
        if isinstance(obj, pygit2.Blob):
            return self.sealing.open(path, obj.data)
        return None

    def _staged_write_under(self, path: str) -> bool:
        prefix = path + "/"
        return any(
            data is not None and name.startswith(prefix) for name, data in self.changes.items()
        )

    def _base_folder_survives(self, folder: pygit2.Tree, path: str) -> bool:
        stack: list[tuple[pygit2.Tree, str]] = [(folder, path + "/")]
        while stack:
            tree, prefix = stack.pop()
            for child in tree:
                full = prefix + (child.name or "")
                if isinstance(child, pygit2.Tree):
                    stack.append((child, full + "/"))
                elif full not in self.changes or self.changes[full] is not None:
                    return True
        return False

    def kind(self, path: str) -> _Kind | None:
        """Return what ``path`` names in the view, or ``None`` if nothing."""
        if path in self.changes:
            if self.changes[path] is not None:
                return _kind_of_mode(self.modes.get(path, MODE_FILE))
            return "tree" if self._staged_write_under(path) else None
        obj = _tree_entry(self.tree, path)
        if obj is None:
            return "tree" if self._staged_write_under(path) else None
        if isinstance(obj, pygit2.Tree):
            prefix = path + "/"
            if self._staged_write_under(path) or not any(
                n.startswith(prefix) for n in self.changes
            ):
                return "tree"
            return "tree" if self._base_folder_survives(obj, path) else None
        return _kind_of_mode(obj.filemode)


def _stage(view: _View, path: str, data: bytes | None, mode: int = MODE_FILE) -> None:
    """Record a write (``data``) or deletion (``None``) in ``view``, keeping it minimal."""
    base = _tree_entry(view.tree, path)
    base_entry = None if base is None or base.filemode == _MODE_TREE else base
    view.changes.pop(path, None)
    view.modes.pop(path, None)
    if data is None:
        if base_entry is not None:
            view.changes[path] = None
        return
    if (
        base_entry is not None
        and base_entry.filemode == mode
        and (
            base_entry.id == pygit2.hash(data) or _opens_to(view.sealing, path, base_entry) == data
        )
    ):
        return
    view.changes[path] = data
    if mode != MODE_FILE:
        view.modes[path] = mode


def _check_write_target(view: _View, path: str) -> None:
    """Refuse a write at ``path`` that would cross a symlink or change file/folder shape."""
    segments = path.split("/")
    for depth in range(1, len(segments)):
        kind = view.kind("/".join(segments[:depth]))
        if kind == "symlink":
            raise InvalidRequestError(
                "symlink_in_path", "a leading component of the path is a symbolic link"
            )
        if kind in ("file", "gitlink"):
            raise InvalidRequestError("invalid_argument", _FILE_DIR_MESSAGE)
    kind = view.kind(path)
    if kind == "tree":
        raise InvalidRequestError("invalid_argument", _FILE_DIR_MESSAGE)
    if kind == "gitlink":
        raise InvalidRequestError("invalid_argument", "the path is a submodule")


def commit_trailers(commit: pygit2.Commit | str) -> dict[str, str]:
    """Parse the trailers of a commit message.

    A strict subset of ``git interpret-trailers --parse``: the trailer block is
    the message's last paragraph, which must not be its first (the title), and
    every line in it must be ``Key: value`` (key ``[A-Za-z0-9-]+``) or a
    continuation line starting with whitespace, else there are no trailers.
    A key that repeats keeps its first value.

    Args:
        commit: A commit, or a message string.

    Returns:
        Trailer key to value, in message order; empty if there is no block.
    """
    message = commit if isinstance(commit, str) else _message(commit)
    paragraphs: list[list[str]] = [[]]
    for line in message.splitlines():
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    paragraphs = [p for p in paragraphs if p]
    if len(paragraphs) < 2:
        return {}
    trailers: dict[str, str] = {}
    current: str | None = None  # key whose value a continuation line extends
    for line in paragraphs[-1]:
        if line[0] in " \t":
            if current is None and not trailers:
                return {}
            if current is not None:
                trailers[current] += " " + line.strip()
            continue
        match = _TRAILER.fullmatch(line)
        if match is None:
            return {}
        key, value = match.group(1), match.group(2).strip()
        if key in trailers:
            current = None
        else:
            trailers[key] = value
            current = key
    return trailers


class _MemoryBlobs(pygit2.OdbBackend):
    """A read-only object database backend holding a few blobs in memory (for merges)."""

    def __init__(self, blobs: dict[str, bytes]) -> None:
        super().__init__()
        self._blobs = blobs

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return int(ObjectType.BLOB), self._blobs[str(oid)]

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        return int(ObjectType.BLOB), len(self._blobs[str(oid)])

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return str(oid) in self._blobs

    def refresh_cb(self) -> None:
        return None


class Repository:
    """A git repository worked on in object space, shared by every session.

    Thread-safe: each thread gets its own libgit2 handle (libgit2 objects are
    not meant to be shared between threads) and reference updates are
    serialised per reference, across threads and across processes: a writer
    holds this process's per-reference lock, then an exclusive ``flock`` on
    ``<common git dir>/chit/locks/<sha256 of the ref name>.flock`` (the same
    file from every linked worktree; the kernel releases it when a writer
    dies), and the compare-and-swap itself runs while
    holding git's own reference lock file, so a writer outside chit (``git``
    itself) is still detected.

    Args:
        path: The repository's git directory or working directory (operator
            configuration, not agent input). No upward search is done.
        sealing: Seals protected content on commit and opens sealed blobs on
            read (``engine.sealing``); without it nothing is sealed and a
            sealed blob never opens (``seal_invalid``), as for an auditor.

    Raises:
        ConfigurationError: If ``path`` is not a git repository or has no
            ``refs/heads/main`` pointing at a commit.
    """

    def __init__(self, path: str | os.PathLike[str], *, sealing: Sealing | None = None) -> None:
        self._sealing = NO_SEALING if sealing is None else sealing
        # Each thread's handle has its own parsed-object cache, each allowed
        # libgit2's process-wide ceiling (256 MiB by default): under steady
        # commits the engine's memory would climb for many minutes. The hot set
        # (lane heads and main, their trees) is small.
        pygit2.settings.cache_max_size(GIT_OBJECT_CACHE_BYTES)
        try:
            repo = pygit2.Repository(os.fspath(path), RepositoryOpenFlag.NO_SEARCH)
        except (pygit2.GitError, KeyError, OSError) as exc:
            raise ConfigurationError("not a git repository") from exc
        self._gitdir: str = repo.path
        # Refs, objects and chit's lock files live in the common directory, which
        # a linked worktree's git directory names in its ``commondir`` file.
        self._commondir: str = common_dir(repo.path)
        self._local = threading.local()
        self._local.repo = repo
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._lock_folder_checked = False
        try:
            self._main_head(repo)
        except RepositoryError as exc:
            raise ConfigurationError("repository has no refs/heads/main commit") from exc

    # -- plumbing ---------------------------------------------------------

    @property
    def _repo(self) -> pygit2.Repository:
        repo: pygit2.Repository | None = getattr(self._local, "repo", None)
        if repo is None:
            repo = pygit2.Repository(self._gitdir, RepositoryOpenFlag.NO_SEARCH)
            self._local.repo = repo
        return repo

    @contextmanager
    def _ref_lock(self, ref: str) -> Iterator[None]:
        """Hold ``ref``'s writer lock: this process's, then every chit process's.

        The cross-process lock is a blocking ``flock(LOCK_EX)`` on a lock file
        named by the SHA-256 of the reference name under ``<git dir>/chit/locks``
        (created 0600 on first use). It waits with the interpreter lock released,
        and the kernel drops it when its holder exits, so a killed engine never
        leaves a lane locked.

        Raises:
            RepositoryError: ``internal_error`` if the lock file cannot be opened.
        """
        with self._locks_guard:
            lock = self._locks.setdefault(ref, threading.Lock())
        with lock:
            fd = self._open_lock_file(ref)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock

    def _open_lock_file(self, ref: str) -> int:
        folder = os.path.join(self.chit_dir, "locks")
        path = os.path.join(folder, hashlib.sha256(ref.encode()).hexdigest() + ".flock")
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            if not self._lock_folder_checked:
                private_folder(self.chit_dir)
                private_folder(folder)
                self._lock_folder_checked = True
            return os.open(path, flags, 0o600)
        except OSError as exc:
            raise RepositoryError("internal_error", "cannot open the lane's lock file") from exc

    @staticmethod
    def _ref_target(repo: pygit2.Repository, ref: str) -> pygit2.Oid | None:
        reference = _reference(repo, ref)
        if reference is None:
            return None
        target = reference.target
        if not isinstance(target, pygit2.Oid):
            raise RepositoryError("conflict", "the reference is not a direct reference")
        return target

    @staticmethod
    def _main_head(repo: pygit2.Repository) -> pygit2.Commit:
        reference = _reference(repo, MAIN)
        try:
            if reference is not None:
                return reference.peel(pygit2.Commit)
        except (pygit2.GitError, KeyError, ValueError):
            pass
        raise RepositoryError("not_found", "the main branch is missing")

    @staticmethod
    def _cas_update(
        repo: pygit2.Repository,
        ref: str,
        new: pygit2.Oid,
        expected: Callable[[pygit2.Oid | None], bool],
        reflog: str,
    ) -> None:
        """Point ``ref`` at ``new`` iff ``expected(current)`` holds under git's ref lock.

        Raises:
            RepositoryError: ``conflict`` if the current target is not the
                expected one or the reference is locked by someone else.
        """
        if ref == MAIN or not ref.startswith((LANE_PREFIX, STORE_PREFIX)):
            raise ValueError("refusing to update a reference outside lanes and the chit store")
        try:
            with repo.transaction() as txn:
                txn.lock_ref(ref)
                if not expected(Repository._ref_target(repo, ref)):
                    raise RepositoryError(
                        "conflict", "the branch moved since this change was based on it"
                    )
                txn.set_target(ref, new, message=reflog)
        except pygit2.GitError as exc:
            raise RepositoryError(
                "conflict",
                "the branch is locked by another update; retry. If it stays locked, a "
                "writer died holding it: an operator removes the ref's .lock file",
            ) from exc

    def _commit(self, oid: pygit2.Oid) -> pygit2.Commit:
        obj = self._repo.get(oid)
        if obj is None:
            raise RepositoryError("not_found", "commit not found")
        return obj.peel(pygit2.Commit)

    def _session_commit(self, agent: str, staged: StagedChange | None) -> pygit2.Commit:
        if staged is not None and staged.base is not None:
            return self._commit(staged.base)
        return self.head_for(agent)

    def _view(self, agent: str, staged: StagedChange | None) -> _View:
        tree = self._session_commit(agent, staged).tree
        if staged is None:
            return _View(tree, {}, {}, self._sealing)
        return _View(tree, staged.changes, staged.modes, self._sealing)

    # -- refs and revisions -------------------------------------------------

    def head_for(self, agent: str) -> pygit2.Commit:
        """Return the commit an agent's fresh session starts from.

        Args:
            agent: A validated agent name.

        Returns:
            The head of ``refs/heads/agent/<agent>`` if the lane exists, else
            the head of ``main``.

        Raises:
            RepositoryError: ``not_found`` if ``main`` has disappeared.
        """
        repo = self._repo
        reference = _reference(repo, lane_ref(agent))
        if reference is not None:
            try:
                return reference.peel(pygit2.Commit)
            except (pygit2.GitError, KeyError, ValueError):
                raise RepositoryError("not_found", "the lane does not point at a commit") from None
        return self._main_head(repo)

    def resolve(self, rev: str) -> pygit2.Commit:
        """Resolve a revision given by an agent, accepting no revision syntax.

        Accepted forms: a branch short name (``main``, ``agent/x``), a full
        ``refs/heads/...`` name, or a 7 to 40 digit hex commit id prefix. A
        branch wins over a hex prefix that spells the same name, as in git.

        Args:
            rev: The agent's string.

        Returns:
            The commit it names (an annotated tag object is peeled).

        Raises:
            InvalidRequestError: ``invalid_argument`` for anything else
                (options such as ``-x``, ranges ``a..b``, ``@{...}``, ``^``,
                ``~``, ``:``, whitespace, NUL) or an ambiguous hex prefix.
            RepositoryError: ``not_found`` if the name or id names no commit.
        """
        if not isinstance(rev, str):
            raise InvalidRequestError("invalid_argument", "revision must be a string")
        full = rev if rev.startswith("refs/heads/") else "refs/heads/" + rev
        is_branch = (
            _BRANCH_NAME.fullmatch(rev) is not None
            and (rev.startswith("refs/heads/") or not rev.startswith("refs/"))
            and pygit2.reference_is_valid_name(full)
        )
        is_hex = _HEX_PREFIX.fullmatch(rev) is not None
        if not (is_branch or is_hex):
            raise InvalidRequestError(
                "invalid_argument", "revision must be a branch name or a hex commit id"
            )
        repo = self._repo
        if is_branch:
            # Found by listing, not by a lookup with the agent's string (see
            # _reference): a revision is an occasional log or diff argument.
            reference = next((r for r in repo.references.iterator() if r.name == full), None)
            if reference is not None:
                try:
                    return reference.peel(pygit2.Commit)
                except (pygit2.GitError, KeyError, ValueError):
                    raise RepositoryError("not_found", "revision not found") from None
        if is_hex:
            try:
                obj = repo.get(rev.lower())
            except pygit2.AmbiguousError:
                raise InvalidRequestError(
                    "invalid_argument", "commit id prefix is ambiguous"
                ) from None
            except (pygit2.GitError, ValueError):
                obj = None
            if obj is not None:
                try:
                    return obj.peel(pygit2.Commit)
                except (pygit2.GitError, KeyError, ValueError):
                    pass
        raise RepositoryError("not_found", "revision not found")

    def lanes(self) -> list[str]:
        """Return the names of agents that have a lane, sorted.

        Returns:
            Each ``<agent>`` with a ``refs/heads/agent/<agent>`` reference
            (nested names that :func:`lane_ref` would refuse are left out).
        """
        names = []
        for ref in self._repo.references:
            if ref.startswith(LANE_PREFIX):
                agent = ref[len(LANE_PREFIX) :]
                if _AGENT_NAME.fullmatch(agent):
                    names.append(agent)
        return sorted(names)

    def lane_exists(self, agent: str) -> bool:
        """True iff ``refs/heads/agent/<agent>`` exists."""
        return _reference(self._repo, lane_ref(agent)) is not None

    def foreign_lane_refs(self) -> list[str]:
        """Return refs under ``refs/heads/agent/`` that name no valid lane, sorted.

        chit never creates them (agent names are single, validated components),
        so an auditor treats each one as a finding.
        """
        return sorted(
            ref
            for ref in self._repo.references
            if ref.startswith(LANE_PREFIX) and not _AGENT_NAME.fullmatch(ref[len(LANE_PREFIX) :])
        )

    def lane_commits(self, agent: str, since: str | None = None) -> list[pygit2.Commit]:
        """Return the commits on an agent's lane that ``main`` does not have.

        Args:
            agent: A validated agent name.
            since: A revision (:meth:`resolve` forms) whose history is left out
                too, as in ``git log since..agent/<agent>``.

        Returns:
            Commits reachable from the lane and not from ``main`` (nor from
            ``since``), newest first (topological, then time order); empty if
            there is no lane.

        Raises:
            InvalidRequestError, RepositoryError: If ``since`` does not resolve.
        """
        repo = self._repo
        head = self._ref_target(repo, lane_ref(agent))
        if head is None:
            return []
        walker = repo.walk(head, SortMode.TOPOLOGICAL | SortMode.TIME)
        walker.hide(self._main_head(repo).id)
        if since is not None:
            walker.hide(self.resolve(since).id)
        return list(walker)

    # -- reading ------------------------------------------------------------

    @property
    def chit_dir(self) -> str:
        """``<common git dir>/chit``: chit's files shared by every engine on this repository.

        The lane lock files live under it (``locks/``), and the persisted
        semantic index (``semantic.db``, engine/semantic/persist.py). It may not
        exist yet.
        """
        return os.path.join(self._commondir, "chit")

    def protects(self, path: str) -> bool:
        """Whether the current policy protects ``path`` (its content is sealed on commit)."""
        return self._sealing.protects(path)

    def view_read(self, agent: str, staged: StagedChange | None, path: str) -> bytes:
        """Read a file as the session sees it.

        Args:
            agent: A validated agent name.
            staged: The session's staged change, or ``None``.
            path: A validated repository path.

        Returns:
            The staged content if ``path`` is staged, else the blob at ``path``
            in the session's base (``staged.base``, or the agent's head). A
            symbolic-link entry yields its target bytes; it is never followed.

        Raises:
            RepositoryError: ``not_found`` if ``path`` is missing, deleted, a
                folder or a submodule; ``seal_invalid`` if it is sealed and
                does not open.
        """
        _check_path(path)
        data = self._view(agent, staged).data(path)
        if data is None:
            raise RepositoryError("not_found", "file not found")
        return data

    def view_files(
        self, agent: str, staged: StagedChange | None, *, limit: int = 100_000
    ) -> tuple[str, dict[str, str], Callable[[str], bytes | None]]:
        """List the regular files of a session's view and bind a reader to that view.

        For the semantic index (engine/semantic): it keys parsed files by blob
        id, so only changed files are parsed again.

        Args:
            agent: A validated agent name.
            staged: The session's staged change, or ``None``.
            limit: Most files listed (the walk stops there).

        Returns:
            ``(tree id, {path: blob id (hex)}, read)``: the base tree's id, every
            regular file (``0o100644`` or ``0o100755``; symlinks and submodules
            are left out) with staged writes and deletions applied (a staged
            file's id is its content's blob id), and ``read(path)``, which
            returns the plaintext in that same view (sealed blobs opened, as
            :meth:`view_read`) or ``None`` if there is none. ``read`` raises
            :class:`RepositoryError` ``seal_invalid`` for a seal that does not open.
        """
        tree = self._session_commit(agent, staged).tree
        changes = dict(staged.changes) if staged is not None else {}
        modes = dict(staged.modes) if staged is not None else {}
        view = _View(tree, changes, modes, self._sealing)
        files: dict[str, str] = {}
        stack: list[tuple[pygit2.Tree, str]] = [(tree, "")]
        while stack and len(files) < limit:
            folder, prefix = stack.pop()
            for child in folder:
                full = prefix + (child.name or "")
                if isinstance(child, pygit2.Tree):
                    stack.append((child, full + "/"))
                elif child.filemode in (MODE_FILE, MODE_EXECUTABLE) and len(files) < limit:
                    files[full] = str(child.id)
        for path, data in changes.items():
            if data is None or modes.get(path, MODE_FILE) not in (MODE_FILE, MODE_EXECUTABLE):
                files.pop(path, None)
            else:
                files[path] = str(pygit2.hash(data))
        return str(tree.id), files, view.data

    def read_at(self, rev: str, path: str) -> bytes:
        """Read a file at a revision given by an agent.

        Args:
            rev: A revision as accepted by :meth:`resolve`.
            path: A validated repository path.

        Returns:
            The blob content, opened if sealed (a symbolic-link entry yields its
            target bytes).

        Raises:
            InvalidRequestError: ``invalid_argument`` for a malformed ``rev``.
            RepositoryError: ``not_found`` for an unknown ``rev`` or if
                ``path`` is missing, a folder or a submodule; ``seal_invalid``
                if it is sealed and does not open.
        """
        _check_path(path)
        obj = _tree_entry(self.resolve(rev).tree, path)
        if not isinstance(obj, pygit2.Blob):
            raise RepositoryError("not_found", "file not found")
        return self._sealing.open(path, obj.data)

    def exists(self, agent: str, staged: StagedChange | None, path: str) -> bool:
        """Return whether a file or symbolic-link entry exists in the session's view.

        Args:
            agent: A validated agent name.
            staged: The session's staged change, or ``None``.
            path: A validated repository path.

        Returns:
            ``True`` for a file or symlink entry, ``False`` for nothing, a
            folder or a submodule.
        """
        _check_path(path)
        entry = self._view(agent, staged).entry(path)
        return entry is not None and entry[0] != _MODE_GITLINK

    # -- staging ------------------------------------------------------------

    def _stage_on_copy(
        self, agent: str, staged: StagedChange, apply: Callable[[_View], None]
    ) -> None:
        """Run ``apply`` on a copy of the staged state and keep it only if it succeeds."""
        base = self._session_commit(agent, staged)
        view = _View(base.tree, dict(staged.changes), dict(staged.modes), self._sealing)
        apply(view)
        staged.base = base.id
        staged.changes = view.changes
        staged.modes = view.modes

    def stage_write(self, agent: str, staged: StagedChange, path: str, data: bytes) -> None:
        """Stage a file's new content.

        The file becomes a regular file: writing at a symbolic-link entry
        replaces the link (it is not followed) and an executable file stays
        executable.

        Args:
            agent: A validated agent name.
            staged: The session's staged change; its ``base`` is set to the
                agent's head if still ``None``.
            path: A validated repository path.
            data: The new content.

        Raises:
            InvalidRequestError: ``symlink_in_path`` if a leading component of
                ``path`` is a symbolic link in the view; ``invalid_argument``
                if a leading component is a file or submodule, or ``path`` is
                a folder or submodule. Nothing changes then.
        """
        _check_path(path)
        content = bytes(data)

        def apply(view: _View) -> None:
            _check_write_target(view, path)
            current = view.entry(path)
            mode = MODE_EXECUTABLE if current and current[0] == MODE_EXECUTABLE else MODE_FILE
            _stage(view, path, content, mode)

        self._stage_on_copy(agent, staged, apply)

    def stage_delete(self, agent: str, staged: StagedChange, path: str) -> None:
        """Stage the deletion of a file or symbolic-link entry.

        Args:
            agent: A validated agent name.
            staged: The session's staged change (``base`` set if ``None``).
            path: A validated repository path.

        Raises:
            RepositoryError: ``not_found`` if ``path`` is not a file or symlink
                entry in the view. Nothing changes then.
        """
        _check_path(path)

        def apply(view: _View) -> None:
            entry = view.entry(path)
            if entry is None or entry[0] == _MODE_GITLINK:
                raise RepositoryError("not_found", "file not found")
            _stage(view, path, None)

        self._stage_on_copy(agent, staged, apply)

    def stage_move(self, agent: str, staged: StagedChange, source: str, destination: str) -> None:
        """Stage a move as a deletion plus a write of the same content and mode.

        A symbolic-link entry stays a link and an executable stays executable.
        ``destination`` is checked against the view with ``source`` already
        removed, so ``a/b -> a`` works when ``a/b`` was alone in ``a``.

        Args:
            agent: A validated agent name.
            staged: The session's staged change (``base`` set if ``None``).
            source: A validated path of an existing file or symlink entry.
            destination: A validated path that must not exist.

        Raises:
            RepositoryError: ``not_found`` if ``source`` is not a file or
                symlink entry in the view.
            InvalidRequestError: ``invalid_argument`` if ``destination`` equals
                ``source`` or exists, or would turn a file into a folder or the
                reverse; ``symlink_in_path`` if a leading component of
                ``destination`` is a symbolic link. Nothing changes then.
        """
        _check_path(source)
        _check_path(destination)

        def apply(view: _View) -> None:
            entry = view.entry(source)
            data = view.data(source)
            if entry is None or entry[0] == _MODE_GITLINK or data is None:
                raise RepositoryError("not_found", "source file not found")
            if source == destination:
                raise InvalidRequestError("invalid_argument", "source and destination are the same")
            if view.entry(destination) is not None:
                raise InvalidRequestError("invalid_argument", "destination exists")
            _stage(view, source, None)
            _check_write_target(view, destination)
            _stage(view, destination, data, _normal_mode(entry[0]))

        self._stage_on_copy(agent, staged, apply)

    # -- reporting ----------------------------------------------------------

    def status(self, agent: str, staged: StagedChange | None) -> dict[str, Any]:
        """Summarise the agent's lane and the session's staged change.

        Args:
            agent: A validated agent name.
            staged: The session's staged change, or ``None``.

        Returns:
            ``{"lane": "agent/<a>", "lane_exists", "lane_head" (hex or None),
            "base" (hex or None), "main_head" (hex), "ahead", "behind" (lane
            versus main; 0 and 0 without a lane), "staged": [{"path",
            "change": "added"|"modified"|"deleted"}] sorted by path}``.
        """
        repo = self._repo
        lane = lane_ref(agent)
        lane_head = self._ref_target(repo, lane)
        main_head = self._main_head(repo).id
        ahead, behind = (0, 0) if lane_head is None else repo.ahead_behind(lane_head, main_head)
        entries: list[dict[str, str]] = []
        if staged is not None and staged.base is not None and staged.changes:
            base_tree = self._commit(staged.base).tree
            for path in sorted(staged.changes):
                if staged.changes[path] is None:
                    change = "deleted"
                else:
                    obj = _tree_entry(base_tree, path)
                    exists = obj is not None and obj.filemode != _MODE_TREE
                    change = "modified" if exists else "added"
                entries.append({"path": path, "change": change})
        return {
            "lane": lane[len("refs/heads/") :],
            "lane_exists": lane_head is not None,
            "lane_head": None if lane_head is None else str(lane_head),
            "base": None if staged is None or staged.base is None else str(staged.base),
            "main_head": str(main_head),
            "ahead": ahead,
            "behind": behind,
            "staged": entries,
        }

    @staticmethod
    def _changed_paths(repo: pygit2.Repository, commit: pygit2.Commit) -> list[str]:
        """Paths changed by ``commit`` against its first parent (all paths for a root)."""
        parent = repo.get(commit.parent_ids[0]) if commit.parent_ids else None
        if isinstance(parent, pygit2.Commit):
            diff = parent.tree.diff_to_tree(commit.tree)
        else:
            diff = commit.tree.diff_to_tree(swap=True)
        paths: set[str] = set()
        for delta in diff.deltas:
            paths.add(delta.old_file.path)
            paths.add(delta.new_file.path)
        return sorted(paths)

    def log(
        self,
        rev: str | None,
        agent: str,
        path: str | None,
        limit: int,
        visible: Callable[[str], bool],
    ) -> dict[str, Any]:
        """List commits, pruning those that changed only what the caller cannot see.

        Walks history in topological, then time order. A commit is listed when
        it changed a visible path (inside ``path`` if given; ``path`` is a file
        or folder, matched by whole segments); one whose matching changes are
        all invisible is counted in ``pruned`` and its message is not shown.
        At most :data:`LOG_SCAN_MAX` commits are examined.

        Args:
            rev: A revision as accepted by :meth:`resolve`, or ``None`` for the
                agent's head.
            agent: A validated agent name.
            path: A validated path restricting the listing, or ``None``.
            limit: How many commits to list, 1 to :data:`LOG_LIMIT_MAX`.
            visible: The caller's scope predicate over repository paths.

        Returns:
            ``{"commits": [{"id", "summary", "author", "time", "paths",
            "paths_truncated", "trailers"}], "pruned": int, "truncated":
            bool}``; ``summary`` is the first message line (at most 200
            characters), ``author`` the author name, ``time`` the author time
            in Unix seconds, ``paths`` the visible changed paths (at most 50).

        Raises:
            InvalidRequestError: ``invalid_argument`` for a bad ``limit`` or
                ``rev``.
            RepositoryError: ``not_found`` for an unknown ``rev``.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LOG_LIMIT_MAX:
            raise InvalidRequestError("invalid_argument", f"limit must be 1 to {LOG_LIMIT_MAX}")
        if path is not None:
            _check_path(path)
        start = self.head_for(agent) if rev is None else self.resolve(rev)
        repo = self._repo
        commits: list[dict[str, Any]] = []
        pruned = 0
        truncated = False
        for scanned, commit in enumerate(repo.walk(start.id, SortMode.TOPOLOGICAL | SortMode.TIME)):
            if scanned >= LOG_SCAN_MAX:
                truncated = True
                break
            changed = self._changed_paths(repo, commit)
            if path is not None:
                changed = [p for p in changed if _under(p, path)]
            shown = [p for p in changed if visible(p)]
            if not shown:
                if changed and len(commits) < limit:
                    pruned += 1
                continue
            if len(commits) == limit:
                truncated = True
                break
            message = _message(commit)
            lines = message.splitlines()
            commits.append(
                {
                    "id": str(commit.id),
                    "summary": (lines[0] if lines else "")[:SUMMARY_MAX],
                    "author": _text(commit.author.raw_name),
                    "time": int(commit.author.time),
                    "paths": shown[:LOG_PATHS_MAX],
                    "paths_truncated": len(shown) > LOG_PATHS_MAX,
                    "trailers": commit_trailers(message),
                }
            )
        return {"commits": commits, "pruned": pruned, "truncated": truncated}

    def diff(
        self,
        agent: str,
        staged: StagedChange | None,
        rev: str | None,
        path: str | None,
        visible: Callable[[str], bool],
    ) -> dict[str, Any]:
        """Show what differs, file by file, with unified patches.

        Args:
            agent: A validated agent name.
            staged: The session's staged change, or ``None``.
            rev: ``None`` for the staged change against its base; else a
                revision (as for :meth:`resolve`) whose tree is compared with
                the session's view (base plus staged change).
            path: A validated file or folder restricting the output, or ``None``.
            visible: The caller's scope predicate over repository paths.

        Returns:
            ``{"files": [{"path", "change": "added"|"modified"|"deleted",
            "old_mode", "new_mode" (int or None), "binary": bool, "patch":
            str or None (None when binary)}] sorted by path, "pruned": number
            of changed paths hidden by ``visible``}``. Submodule entries show
            as ``Subproject commit <id>`` lines, as git prints them.

        Raises:
            InvalidRequestError: ``invalid_argument`` for a malformed ``rev``.
            RepositoryError: ``not_found`` for an unknown ``rev``.
        """
        if path is not None:
            _check_path(path)
        view = self._view(agent, staged)
        staged_paths: Iterable[str] = () if staged is None else staged.changes
        if rev is None:
            old = view.tree
            candidates = set(staged_paths)
        else:
            old = self.resolve(rev).tree
            candidates = set(staged_paths)
            for delta in old.diff_to_tree(view.tree).deltas:
                candidates.add(delta.old_file.path)
                candidates.add(delta.new_file.path)
        old_view = _View(old, {}, {}, self._sealing)
        files: list[dict[str, Any]] = []
        pruned = 0
        for name in sorted(candidates):
            if path is not None and not _under(name, path):
                continue
            before, after = old_view.entry(name), view.entry(name)
            if before == after:
                continue
            if name not in view.changes and _same_content(
                self._sealing, name, _tree_entry(old, name), name, _tree_entry(view.tree, name)
            ):
                continue  # sealed twice with the same content (fresh nonces, new ids)
            if not visible(name):
                pruned += 1
                continue
            try:
                files.append(self._file_patch(name, old_view, before, view, after))
            except RepositoryError as exc:
                if exc.code == "seal_invalid":
                    raise RepositoryError(exc.code, exc.message, path=name) from None
                raise
        return {"files": files, "pruned": pruned}

    @staticmethod
    def _entry_bytes(view: _View, name: str, entry: _Entry | None) -> bytes | None:
        if entry is None:
            return None
        if entry[0] == _MODE_GITLINK:
            return f"Subproject commit {entry[1]}\n".encode()
        return view.data(name)

    def _file_patch(
        self, name: str, old: _View, before: _Entry | None, new: _View, after: _Entry | None
    ) -> dict[str, Any]:
        # Both sides are plaintext: _View.data opens sealed blobs (or raises).
        old_bytes = self._entry_bytes(old, name, before)
        new_bytes = self._entry_bytes(new, name, after)
        change = "added" if before is None else "deleted" if after is None else "modified"
        patch = pygit2.Patch.create_from(old_bytes, new_bytes, old_as_path=name, new_as_path=name)
        binary = bool(patch.delta.is_binary)
        return {
            "path": name,
            "change": change,
            "old_mode": None if before is None else before[0],
            "new_mode": None if after is None else after[0],
            "binary": binary,
            "patch": None if binary else (patch.text or ""),
        }

    # -- writing ------------------------------------------------------------

    def _build_tree(
        self, repo: pygit2.Repository, base: pygit2.Tree, staged: StagedChange
    ) -> pygit2.Oid:
        """Write the blobs of ``staged`` (sealed where :class:`Sealing` says) and the tree.

        Raises:
            InvalidRequestError: ``invalid_argument`` for a symbolic link at a
                protected path (its target would be sealed into a name no
                checkout can create). Nothing is written then.
        """
        sealing = self._sealing
        for name, data in staged.changes.items():
            mode = staged.modes.get(name, MODE_FILE)
            if data is not None and mode == MODE_SYMLINK and sealing.protects(name):
                raise InvalidRequestError(
                    "invalid_argument", "a protected path cannot hold a symbolic link"
                )
        index = pygit2.Index()  # in memory; the repository's index file is never read
        index.read_tree(base)
        for name, data in staged.changes.items():
            if data is None and name in index:
                index.remove(name)
        for name, data in staged.changes.items():
            if data is not None:
                # Only what goes into git is sealed; staged content stays plaintext.
                stored = sealing.seal(name, data) if sealing.must_seal(name, data) else data
                blob = repo.create_blob(stored)
                mode = FileMode(staged.modes.get(name, MODE_FILE))
                index.add(pygit2.IndexEntry(name, blob, mode))
        return index.write_tree(repo)

    def commit(
        self,
        agent: str,
        staged: StagedChange,
        message: str,
        *,
        author_name: str,
        author_email: str,
        time: int,
        merge: bool = False,
        seal: Callable[[dict[str, Any]], bytes] | None = None,
    ) -> pygit2.Oid:
        """Land the staged change as one commit on the agent's lane.

        The new commit's tree is ``staged.base``'s tree plus the staged change
        and its parent is ``staged.base``. The lane is updated by compare and
        swap under git's reference lock, holding the lane's writer lock (this
        process's and every chit process's, see :meth:`_ref_lock`): it must
        still point at ``staged.base`` or, when the lane does not exist yet,
        ``staged.base`` must be ``main``'s head or one of its ancestors (a new
        lane never appears over a concurrently created one). Otherwise the
        commit is refused with ``conflict``, unless ``merge`` first moved the
        change onto the lane head. ``refs/heads/main`` is never written.

        Args:
            agent: A validated agent name.
            staged: The session's staged change. Cleared on success (``base``
                becomes the new commit); untouched on failure.
            message: The complete commit message (trailers included).
            author_name: Author and committer name.
            author_email: Author and committer email.
            time: Author and committer time, Unix seconds (offset 0).
            merge: First three-way merge the staged change onto the lane head if
                the lane moved (:meth:`merge_onto_lane`), under the lane lock.
                Conflicts are recorded in ``staged.conflicts`` and refused with
                ``conflict``; any other failure leaves ``staged`` untouched.
            seal: Makes the commit's provenance envelope, under the lane lock
                once the tree is known. Called with the commit's facts
                ``{"tree", "parents", "author", "committer", "message", "change"}``
                (``message`` is ``message`` as given, to be hashed; ``change`` the
                paths with old and new blob ids and modes, sorted by path), it
                returns the envelope bytes. The message then gets a last line
                ``Chit-Provenance: sha256:<hex of SHA-256 of the envelope>``, and
                the envelope is stored in :meth:`provenance_ref` under the new
                commit's id (git-notes layout) before the lane moves.

        Returns:
            The new commit's id.

        Raises:
            InvalidRequestError: ``invalid_argument`` if nothing is staged or
                the message is empty or holds NUL.
            RepositoryError: ``conflict`` if the lane moved or is locked by a
                concurrent update; the lane and ``staged`` are unchanged.
            ValueError: For an author identity git cannot record (caller bug).
        """
        ref = lane_ref(agent)
        if staged.is_empty() or staged.base is None:
            raise InvalidRequestError("invalid_argument", "nothing staged")
        if not message.strip() or "\0" in message:
            raise InvalidRequestError("invalid_argument", "commit message is empty or malformed")
        for part in (author_name, author_email):
            if not part.strip() or any(c in part for c in "<>\n\0"):
                raise ValueError("author identity cannot be recorded")
        with self._ref_lock(ref):
            repo = self._repo
            work = staged
            if merge:
                # Merge under the lane lock, so no session of this process can move
                # the lane between the merge and the ref update (no wasted work).
                work = StagedChange(
                    base=staged.base,
                    changes=dict(staged.changes),
                    modes=dict(staged.modes),
                    conflicts=dict(staged.conflicts),
                    conflict_modes=dict(staged.conflict_modes),
                )
                self.merge_onto_lane(agent, work)
                if work.conflicts:
                    staged.base, staged.changes = work.base, work.changes
                    staged.modes, staged.conflicts = work.modes, work.conflicts
                    staged.conflict_modes = work.conflict_modes
                    raise RepositoryError("conflict", "staged paths changed on the lane too")
                if work.is_empty():
                    raise InvalidRequestError(
                        "invalid_argument", "nothing is left to commit after merging"
                    )
            if work.base is None:
                raise InvalidRequestError("invalid_argument", "nothing staged")
            base = self._commit(work.base)
            tree = self._build_tree(repo, base.tree, work)  # seals protected content
            if tree == base.tree.id:
                raise InvalidRequestError("invalid_argument", "nothing staged")
            signature = pygit2.Signature(author_name, author_email, int(time), 0)
            envelope = None
            if seal is not None:
                who = {"name": author_name, "email": author_email, "time": int(time), "offset": 0}
                envelope = seal(
                    {
                        "tree": str(tree),
                        "parents": [str(base.id)],
                        "author": who,
                        "committer": dict(who),
                        "message": message,
                        "change": self._change_list(repo, base.tree, tree, work),
                    }
                )
                digest = hashlib.sha256(envelope).hexdigest()
                message = f"{message}Chit-Provenance: sha256:{digest}\n"
            new = repo.create_commit(None, signature, signature, message, tree, [base.id])
            main_head = self._main_head(repo).id
            if envelope is not None:
                self._store_record(repo, agent, new, envelope, int(time))

            def expected(current: pygit2.Oid | None) -> bool:
                if current is not None:
                    return current == base.id
                return base.id == main_head or repo.descendant_of(main_head, base.id)

            self._cas_update(repo, ref, new, expected, "chit: commit")
        staged.changes = {}
        staged.modes = {}
        staged.conflicts = {}
        staged.conflict_modes = {}
        staged.base = new
        return new

    @staticmethod
    def _change_list(
        repo: pygit2.Repository, old: pygit2.Tree, new_id: pygit2.Oid, work: StagedChange
    ) -> list[dict[str, Any]]:
        new = repo[new_id].peel(pygit2.Tree)
        out = []
        for path in sorted(work.changes):
            entry: dict[str, Any] = {"path": path}
            for side, tree in (("old", old), ("new", new)):
                found = _tree_entry(tree, path)
                if found is not None and found.type_str == "blob":
                    entry[side] = str(found.id)
                    entry[f"{side}_mode"] = int(found.filemode)
            out.append(entry)
        return out

    @staticmethod
    def provenance_ref(agent: str) -> str:
        """The reference holding ``agent``'s provenance records: ``refs/chit/provenance/<agent>``.

        It points at a commit whose tree maps ``<first 2 hex>/<other 38 hex>`` of
        each commit id on the lane to a blob holding that commit's envelope (the
        fan-out layout of ``git notes``); each record adds a commit on top.
        """
        return f"{STORE_PREFIX}provenance/{agent}"

    def _store_record(
        self, repo: pygit2.Repository, agent: str, commit: pygit2.Oid, envelope: bytes, when: int
    ) -> None:
        """Add ``envelope`` under ``commit`` to the agent's provenance ref (lane lock held).

        Only chit writes this reference, and only while holding the lane's
        writer lock (:meth:`_ref_lock`), which this caller holds: a git ``.lock``
        file left on it can only be from a chit writer that died mid-update, so
        it is removed rather than wedging the lane for ever.
        """
        ref = self.provenance_ref(agent)
        stale = os.path.join(self._commondir, ref + ".lock")
        if os.path.lexists(stale):
            os.unlink(stale)
        current = self._ref_target(repo, ref)
        parent = None if current is None else self._commit(current)
        key = str(commit)
        blob = repo.create_blob(envelope)
        root = repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
        fan = _tree_entry(parent.tree, key[:2]) if parent is not None else None
        sub = repo.TreeBuilder(fan.peel(pygit2.Tree)) if fan is not None else repo.TreeBuilder()
        sub.insert(key[2:], blob, MODE_FILE)
        root.insert(key[:2], sub.write(), FileMode.TREE)
        signature = pygit2.Signature("chit", "chit@localhost", when, 0)
        record_commit = repo.create_commit(
            None, signature, signature, f"chit: provenance of {key}\n", root.write(),
            [] if parent is None else [parent.id],
        )
        self._cas_update(repo, ref, record_commit, _equals(current), "chit: provenance")

    def read_raw(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        """An object's type and raw bytes, as stored (for the auditor).

        Raises:
            KeyError: If the object does not exist.
        """
        kind, data = self._repo.odb.read(oid)
        return int(kind), bytes(data)

    def provenance_record(self, agent: str, commit: str) -> bytes | None:
        """The stored envelope for ``commit`` on ``agent``'s lane, or ``None``.

        Args:
            agent: A validated agent name.
            commit: A full 40-hex commit id.

        Returns:
            The envelope bytes as stored (untrusted until verified).
        """
        if not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise ValueError("not a commit id")
        repo = self._repo
        target = self._ref_target(repo, self.provenance_ref(agent))
        if target is None:
            return None
        try:
            tree = repo[target].peel(pygit2.Tree)
        except (pygit2.GitError, KeyError, ValueError):
            return None
        entry = _tree_entry(tree, f"{commit[:2]}/{commit[2:]}")
        if entry is None or entry.type_str != "blob":
            return None
        return bytes(entry.peel(pygit2.Blob).data)

    def staged_paths_changed_on_lane(self, agent: str, staged: StagedChange) -> list[str]:
        """Staged paths that changed on the lane since ``staged.base``, sorted.

        A path counts when its entry, or the entry of a leading folder that is
        not a folder on both sides, differs between ``staged.base`` and the lane
        head; a sealed file whose plaintext and mode are unchanged does not count
        (its blob id differs with every seal). Empty when nothing is staged or the
        lane has not moved.

        Args:
            agent: A validated agent name.
            staged: The session's staged change.

        Returns:
            The staged paths a commit onto the lane head would have to merge.
        """
        if staged.base is None or staged.is_empty():
            return []
        head = self.head_for(agent)
        if head.id == staged.base:
            return []
        old, new = self._commit(staged.base).tree, head.tree
        changed = []
        for path in staged.changes:
            parts = path.split("/")
            for i in range(1, len(parts) + 1):
                a = _tree_entry(old, "/".join(parts[:i]))
                b = _tree_entry(new, "/".join(parts[:i]))
                if a is None and b is None:
                    break
                if a is None or b is None or (a.id, a.filemode) != (b.id, b.filemode):
                    if i < len(parts) and a is not None and b is not None:
                        if a.type_str == "tree" and b.type_str == "tree":
                            continue  # a folder whose other contents changed
                    if i == len(parts) and _same_content(self._sealing, path, a, path, b):
                        break  # sealed again with the same content: not a change
                    changed.append(path)
                    break
        return sorted(changed)

    def merge_onto_lane(self, agent: str, staged: StagedChange) -> bool:
        """Three-way merge the staged change onto the lane head, if the lane moved.

        For each staged path, with base = ``staged.base``, theirs = the lane head
        and ours = the staged content: unchanged on the lane, ours stands; equal
        on both sides, nothing is left to stage; both changed a text file, the
        line-level merge of libgit2 (``git_merge_file``) decides; anything else
        (binary, delete against modify, add against add, a file against a
        folder) is a conflict. Clean results replace the staged content,
        conflicting paths keep ours staged and are recorded in
        ``staged.conflicts``; ``staged.base`` moves to the lane head. No reference
        is touched.

        Args:
            agent: A validated agent name.
            staged: The session's staged change (updated in place).

        Returns:
            True iff ``staged.base`` moved (a merge happened).
        """
        if staged.base is None or staged.is_empty():
            return False
        repo = self._repo
        head = self.head_for(agent)
        if head.id == staged.base or not repo.descendant_of(head.id, staged.base):
            return False
        old, new = self._commit(staged.base).tree, head.tree
        changes: dict[str, bytes | None] = {}
        modes: dict[str, int] = {}
        conflicts = dict(staged.conflicts)
        conflict_modes = dict(staged.conflict_modes)
        for path, ours in staged.changes.items():
            mode = staged.modes.get(path, MODE_FILE)
            base_entry, theirs_entry = _tree_entry(old, path), _tree_entry(new, path)
            # Plaintexts: sealed sides are opened (seal_invalid if one does not),
            # so ciphertext is never compared or merged; the commit seals again.
            base_data, theirs_data = self._plain(path, base_entry), self._plain(path, theirs_entry)
            base_mode: int | None = None if base_entry is None else int(base_entry.filemode)
            theirs_mode: int | None = None if theirs_entry is None else int(theirs_entry.filemode)
            blocked = self._folder_clash(new, path)
            if not blocked and (
                _same_entry(base_entry, theirs_entry)
                or _same_content(self._sealing, path, base_entry, path, theirs_entry)
            ):
                changes[path] = ours
            elif not blocked and ours == theirs_data and (ours is None or mode == theirs_mode):
                continue  # the lane already has exactly this
            else:
                merged = None if blocked else self._merge_text(path, base_data, ours, theirs_data)
                # The file's type (plain, executable, symlink) merges too: a change
                # on one side stands; changes on both sides, or any symlink, conflict.
                merged_mode: int | None
                if mode == base_mode:
                    merged_mode = theirs_mode
                elif theirs_mode == base_mode or theirs_mode == mode:
                    merged_mode = mode
                else:
                    merged_mode = None
                if MODE_SYMLINK in (mode, base_mode, theirs_mode):
                    merged = None
                if merged is None or merged_mode is None:
                    conflicts[path] = (base_data, ours, theirs_data)
                    conflict_modes[path] = (mode if ours is not None else None, theirs_mode)
                    changes[path] = ours
                else:
                    mode = merged_mode
                    if merged != theirs_data or merged_mode != theirs_mode:
                        changes[path] = merged
            if path in changes and mode != MODE_FILE:
                modes[path] = mode
        staged.base, staged.changes, staged.modes = head.id, changes, modes
        staged.conflicts, staged.conflict_modes = conflicts, conflict_modes
        return True

    def _folder_clash(self, tree: pygit2.Tree, path: str) -> bool:
        parts = path.split("/")
        for i in range(1, len(parts)):
            entry = _tree_entry(tree, "/".join(parts[:i]))
            if entry is not None and entry.type_str != "tree":
                return True
        entry = _tree_entry(tree, path)
        return entry is not None and entry.type_str == "tree"

    def _plain(self, path: str, entry: pygit2.Object | None) -> bytes | None:
        """The content of a blob entry, opened if sealed; ``None`` if not a blob.

        Raises:
            RepositoryError: ``seal_invalid`` if it is sealed and does not open.
        """
        data = _blob_data(entry)
        return None if data is None else self._sealing.open(path, data)

    @staticmethod
    def _merge_text(
        path: str, base: bytes | None, ours: bytes | None, theirs: bytes | None
    ) -> bytes | None:
        """libgit2's line-level file merge (``git_merge_file``) of three plaintexts.

        The inputs live in an in-memory object database for the merge only: no
        blob is written to the repository, so merging protected content never
        leaves its plaintext in git's objects.
        """
        if base is None or ours is None or theirs is None:
            return None
        try:
            for data in (base, ours, theirs):
                data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        objects = {str(pygit2.hash(data)): data for data in (base, ours, theirs)}
        odb = pygit2.Odb()
        odb.add_backend(_MemoryBlobs(objects), 1)
        scratch = pygit2.Repository()
        scratch.set_odb(odb)
        entries = [
            pygit2.IndexEntry(path, pygit2.hash(data), FileMode.BLOB)
            for data in (base, ours, theirs)
        ]
        result = scratch.merge_file_from_index(entries[0], entries[1], entries[2])
        if not result.automergeable or result.contents is None:
            return None
        return result.contents.encode("utf-8")

    def conflicts_with_main(
        self, agent: str, visible: Callable[[str], bool] | None = None
    ) -> list[dict[str, Any]]:
        """Paths where merging the lane into ``main`` would conflict. Changes nothing.

        This is git's own tree merge, which sees sealed blobs as binary: a sealed
        file changed on both sides always conflicts. Its sides are shown opened
        (plaintext), never as ciphertext.

        Args:
            agent: A validated agent name.
            visible: The caller's scope predicate; a conflict is left out unless
                every side's path is visible (so nothing invisible is opened).

        Returns:
            ``[{"path", "base", "ours", "theirs"}]`` with content as bytes or
            ``None``, ours being the lane's side; empty if the lane does not exist.

        Raises:
            RepositoryError: ``seal_invalid`` (with ``path``) if a visible sealed
                side does not open.
        """
        repo = self._repo
        reference = _reference(repo, lane_ref(agent))
        if reference is None:
            return []
        lane = reference.peel(pygit2.Commit)
        main = self._main_head(repo)
        index = repo.merge_commits(lane, main)
        if index.conflicts is None:
            return []
        out = []
        for ancestor, ours, theirs in index.conflicts:
            sides = (ancestor, ours, theirs)
            path = next(e.path for e in (ours, theirs, ancestor) if e is not None)
            if visible is not None and not all(visible(e.path) for e in sides if e is not None):
                continue
            try:
                data = [None if e is None else self._plain(e.path, repo[e.id]) for e in sides]
            except RepositoryError as exc:
                raise RepositoryError(exc.code, exc.message, path=path) from None
            out.append({"path": path, "base": data[0], "ours": data[1], "theirs": data[2]})
        return sorted(out, key=lambda c: str(c["path"]))

    def rebase_if_clean(self, agent: str, staged: StagedChange) -> bool:
        """Move a staged change onto the lane head when that cannot change its meaning.

        When another session of the same agent committed after this session based
        its view, the lane head is a descendant of ``staged.base``. If no staged
        path changed there (:meth:`staged_paths_changed_on_lane`), the change
        applies to the new head exactly as it did to the old one (the trivial
        clean case of a three-way merge), so ``staged.base`` moves there.
        Anything else is left for the merge of later work: nothing is touched.

        Args:
            agent: A validated agent name.
            staged: The session's staged change.

        Returns:
            True iff ``staged.base`` moved.
        """
        if staged.base is None or staged.is_empty():
            return False
        head = self.head_for(agent)
        if head.id == staged.base or not self._repo.descendant_of(head.id, staged.base):
            return False
        if self.staged_paths_changed_on_lane(agent, staged):
            return False
        staged.base = head.id
        return True

    # -- content-addressed store --------------------------------------------

    @staticmethod
    def _check_store(store_ref: str, name: str) -> None:
        if not (
            isinstance(store_ref, str)
            and store_ref.startswith(STORE_PREFIX)
            and pygit2.reference_is_valid_name(store_ref)
        ):
            raise ValueError("store reference must be a valid name under refs/chit/")
        if not isinstance(name, str) or not _STORE_NAME.fullmatch(name):
            raise ValueError("store entry name must be 64 lowercase hex digits")

    def put_blob_in_store(
        self, store_ref: str, name: str, data: bytes, *, now: int | None = None
    ) -> pygit2.Oid:
        """Keep ``data`` reachable under ``name`` in a content-addressed store.

        The store reference points at a commit whose tree maps each name to a
        blob; adding an entry makes a new commit whose parent is the old one,
        updated by compare and swap (retried if another writer got there
        first, since additions commute). The store is append-only: a name
        already bound to other content is refused, never rebound.

        Args:
            store_ref: A reference under ``refs/chit/`` (for example
                ``refs/chit/catalogs``).
            name: 64 lowercase hex digits (typically a SHA-256 of ``data``).
            data: The bytes to keep.
            now: Commit time in Unix seconds; the current time if ``None``.

        Returns:
            The blob id of ``data``.

        Raises:
            ValueError: If ``store_ref`` or ``name`` is malformed.
            RepositoryError: ``conflict`` if ``name`` is bound to different
                content, or the store stayed contended through every retry.
        """
        self._check_store(store_ref, name)
        content = bytes(data)
        when = int(_time.time()) if now is None else int(now)
        with self._ref_lock(store_ref):
            repo = self._repo
            blob = pygit2.hash(content)
            for _ in range(_STORE_RETRIES):
                current = self._ref_target(repo, store_ref)
                parent = None if current is None else self._commit(current)
                if parent is not None:
                    existing = _tree_entry(parent.tree, name)
                    if existing is not None:
                        if existing.id == blob and existing.filemode == MODE_FILE:
                            return blob
                        raise RepositoryError("conflict", "store entry holds other content")
                repo.create_blob(content)
                builder = (
                    repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
                )
                builder.insert(name, blob, MODE_FILE)
                signature = pygit2.Signature("chit", "chit@localhost", when, 0)
                commit = repo.create_commit(
                    None,
                    signature,
                    signature,
                    f"chit store: add {name}\n",
                    builder.write(),
                    [] if parent is None else [parent.id],
                )
                try:
                    self._cas_update(
                        repo,
                        store_ref,
                        commit,
                        _equals(current),
                        "chit: store",
                    )
                except RepositoryError:
                    _time.sleep(0.005)
                    continue
                return blob
        raise RepositoryError("conflict", "the store is busy; retry")

    def get_blob_from_store(self, store_ref: str, name: str) -> bytes | None:
        """Return the bytes stored under ``name``, or ``None`` if absent.

        Args:
            store_ref: A reference under ``refs/chit/``.
            name: 64 lowercase hex digits.

        Returns:
            The stored bytes, or ``None`` if the store or the entry is missing.

        Raises:
            ValueError: If ``store_ref`` or ``name`` is malformed.
        """
        self._check_store(store_ref, name)
        repo = self._repo
        current = self._ref_target(repo, store_ref)
        if current is None:
            return None
        obj = _tree_entry(self._commit(current).tree, name)
        return obj.data if isinstance(obj, pygit2.Blob) else None
