"""The repository's libgit2 handles, and lookups that never hand pygit2 an agent's string.

What every part of engine/git shares: one libgit2 handle per thread with a
capped object cache, the git directories and chit's folder in them, the
sealing, and the tree and reference lookups that work around pygit2 keeping
the strings it is given (docs/architecture.md, "Version control").
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections import OrderedDict

import pygit2
from pygit2.enums import RepositoryOpenFlag

from engine.auth.sealing import Sealing
from engine.errors import ConfigurationError, RepositoryError
from engine.limits import LIMITS

__all__ = [
    "Handle",
    "bounded_blob",
    "common_dir",
    "private_folder",
    "reference",
    "tree_entry",
    "tree_names",
]

# pygit2 (1.18 to 1.21 at least) keeps one reference to every ``str`` passed as
# a path or reference name to ``Tree.__getitem__``/``__contains__``/``/`` and to
# ``Repository.lookup_reference`` (``references.get``, ``in references``):
# ``pgit_borrow_fsdefault`` never releases the result of ``PyOS_FSPath``. A fresh
# string per call is a few dozen bytes leaked per call, for the life of the
# process. So the engine never hands pygit2 a path: trees are searched by entry
# *index* through a name index per tree id (trees are immutable, so an index is
# valid forever), and reference names handed to pygit2 are one long-lived
# (interned) object per name, only for names of lanes, chit's store and the base.
_tree_index: OrderedDict[pygit2.Oid, dict[str, int]] = OrderedDict()
_tree_index_size = 0
_tree_index_lock = threading.Lock()
_huge_tree: tuple[pygit2.Oid, dict[str, int]] | None = None
"""The name map of the last folder too big for the shared budget, kept alone."""


def tree_names(tree: pygit2.Tree) -> dict[str, int]:
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
    if len(names) > LIMITS.tree_index_entries // 4:
        with _tree_index_lock:
            _huge_tree = (key, names)
        return names
    with _tree_index_lock:
        if key not in _tree_index:
            _tree_index[key] = names
            _tree_index_size += len(names)
            while _tree_index_size > LIMITS.tree_index_entries:
                _old, dropped = _tree_index.popitem(last=False)
                _tree_index_size -= len(dropped)
    return names


def tree_entry(tree: pygit2.Tree, path: str) -> pygit2.Object | None:
    """The entry at ``/``-separated ``path`` under ``tree`` (with its ``filemode``), or ``None``.

    The same answer as ``tree[path]`` (``git_tree_entry_bypath``), found segment by
    segment through :func:`tree_names` and ``tree[index]``, which leaks nothing.
    """
    current = tree
    parts = path.split("/")
    last = len(parts) - 1
    for depth, name in enumerate(parts):
        index = tree_names(current).get(name)
        if index is None:
            return None
        entry: pygit2.Object = current[index]
        if depth == last:
            return entry
        if not isinstance(entry, pygit2.Tree):
            return None
        current = entry
    return None


def bounded_blob(repo: pygit2.Repository, entry: pygit2.Object | None, limit: int) -> bytes | None:
    """The bytes of a blob entry no longer than ``limit``, or ``None``.

    The size is read from the object's header (``git_odb_read_header``) before
    the blob is loaded, so an oversized one (a record fetched from a remote)
    costs no memory.

    Args:
        repo: The repository holding the entry.
        entry: A tree entry (:func:`tree_entry`), or ``None``.
        limit: The most bytes accepted.

    Returns:
        The blob's bytes; ``None`` when ``entry`` is missing, not a blob, longer
        than ``limit``, or its object cannot be read.
    """
    if not isinstance(entry, pygit2.Blob):
        return None
    try:
        _kind, size = repo.odb.read_header(entry.id)
    except (KeyError, pygit2.GitError, ValueError):
        return None
    if size > limit:
        return None
    return bytes(entry.data)


def reference(repo: pygit2.Repository, name: str) -> pygit2.Reference | None:
    """``repo.references.get(name)`` with one long-lived ``str`` per name (see above).

    Only for names from a bounded set: the base, lanes and chit's store refs
    (agents come from verified tokens); an agent's own text is never looked up.
    """
    return repo.references.get(sys.intern(name))


def common_dir(gitdir: str) -> str:
    """The repository's common git directory (a linked worktree's main ``.git``)."""
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as fh:
            named = fh.read().strip()
    except FileNotFoundError:
        return gitdir
    return os.path.normpath(os.path.join(gitdir, named))


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


class Handle:
    """One git repository's libgit2 handles (one per thread) and its sealing.

    libgit2 objects are not meant to be shared between threads, so each thread
    opens its own handle on first use. Every part of engine/git works through
    one :class:`Handle`.

    Args:
        path: The repository's git directory or working directory (operator
            configuration, not agent input). No upward search is done.
        sealing: Seals protected content on commit and opens sealed blobs on
            read (``engine.auth.sealing``).

    Raises:
        ConfigurationError: If ``path`` is not a git repository.
    """

    def __init__(self, path: str | os.PathLike[str], sealing: Sealing) -> None:
        self.sealing = sealing
        # Each thread's handle has its own parsed-object cache, each allowed
        # libgit2's process-wide ceiling (256 MiB by default): under steady
        # commits the engine's memory would climb for many minutes. The hot set
        # (lane heads and the base, their trees) is small.
        pygit2.settings.cache_max_size(LIMITS.git_object_cache_bytes)
        try:
            repo = pygit2.Repository(os.fspath(path), RepositoryOpenFlag.NO_SEARCH)
        except (pygit2.GitError, KeyError, OSError) as exc:
            raise ConfigurationError("not a git repository") from exc
        self.gitdir: str = repo.path
        # Refs, objects and chit's lock files live in the common directory, which
        # a linked worktree's git directory names in its ``commondir`` file.
        self.commondir: str = common_dir(repo.path)
        self._local = threading.local()
        self._local.repo = repo
        self.base_ref: str = "refs/heads/main"
        """The base branch's full name (set by the facade from its ``base``)."""
        self.upstream_ref: str | None = None
        """Where the remote's base is kept when last fetched; ``None`` without a remote."""

    @property
    def repo(self) -> pygit2.Repository:
        """This thread's libgit2 handle on the repository, opened on first use."""
        repo: pygit2.Repository | None = getattr(self._local, "repo", None)
        if repo is None:
            repo = pygit2.Repository(self.gitdir, RepositoryOpenFlag.NO_SEARCH)
            self._local.repo = repo
        return repo

    @property
    def chit_dir(self) -> str:
        """``<common git dir>/chit``: chit's files shared by every engine on this repository.

        The lane lock files live under it (``locks/``), and the persisted
        semantic index (``semantic.db``, engine/semantic/persist.py). It may not
        exist yet.
        """
        return os.path.join(self.commondir, "chit")

    def commit(self, oid: pygit2.Oid) -> pygit2.Commit:
        """Return the commit ``oid`` names.

        Raises:
            RepositoryError: ``not_found`` if there is no object ``oid``.
        """
        obj = self.repo.get(oid)
        if obj is None:
            raise RepositoryError("not_found", "commit not found")
        return obj.peel(pygit2.Commit)

    def read_raw(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        """An object's type and raw bytes, as stored (for the auditor).

        Raises:
            KeyError: If the object does not exist.
        """
        kind, data = self.repo.odb.read(oid)
        return int(kind), bytes(data)
