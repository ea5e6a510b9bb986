"""Trees and views: a session's staged change, its view, and the staging rules.

A session's writes stage in a :class:`StagedChange` (kept in memory by the
caller) relative to a fixed base commit; a :class:`View` reads the base tree
overlaid with it. A symbolic-link entry is data: its target is read as bytes
and never followed, and a write through one is refused. Every blob read here
goes through the repository's sealing, so callers only see plaintext
(docs/sealing.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

import pygit2

from engine.auth.sealing import NO_SEALING, Sealing, is_sealed
from engine.errors import InvalidRequestError, RepositoryError
from engine.git.handle import Handle, tree_entry, tree_names
from engine.git.refs import head_for

__all__ = [
    "MODE_EXECUTABLE",
    "MODE_FILE",
    "MODE_GITLINK",
    "MODE_SYMLINK",
    "MODE_TREE",
    "Entry",
    "StagedChange",
    "View",
    "blob_data",
    "check_path",
    "check_write_target",
    "normal_mode",
    "opens_to",
    "same_content",
    "same_entry",
    "session_commit",
    "session_view",
    "stage",
]

MODE_FILE: Final = 0o100644
MODE_EXECUTABLE: Final = 0o100755
MODE_SYMLINK: Final = 0o120000
MODE_TREE: Final = 0o040000
MODE_GITLINK: Final = 0o160000

_Kind = Literal["file", "symlink", "tree", "gitlink"]
Entry = tuple[int, pygit2.Oid]
"""``(filemode, object id)`` of a non-tree entry."""

_FILE_DIR_MESSAGE: Final = "would turn a file into a directory or the reverse"


def check_path(path: str) -> None:
    """Re-check the shape of a caller-validated repository path (defence in depth).

    Paths reaching engine/git were validated by the caller (``engine.paths``);
    one that slips through is a programming error, never an agent-facing code.

    Raises:
        ValueError: If ``path`` is not a string, is empty, holds NUL or a
            backslash, or has an empty, ``.``, ``..`` or ``.git`` segment
            (``.git`` in any case, with trailing dots or spaces).
    """
    if not isinstance(path, str) or not path or "\0" in path or "\\" in path:
        raise ValueError("repository path was not validated")
    for segment in path.split("/"):
        if segment in ("", ".", "..") or segment.casefold().rstrip(" .") == ".git":
            raise ValueError("repository path was not validated")


def _kind_of_mode(mode: int) -> _Kind:
    if mode == MODE_TREE:
        return "tree"
    if mode == MODE_SYMLINK:
        return "symlink"
    if mode == MODE_GITLINK:
        return "gitlink"
    return "file"


def normal_mode(mode: int) -> int:
    """Map a blob mode onto what git writes today (legacy 100664 becomes 100644)."""
    if mode in (MODE_SYMLINK, MODE_EXECUTABLE):
        return mode
    return MODE_FILE


def blob_data(entry: pygit2.Object | None) -> bytes | None:
    """The bytes of a blob entry as stored (sealed or not), or ``None`` if not a blob."""
    if entry is None or entry.type_str != "blob":
        return None
    data: bytes = entry.peel(pygit2.Blob).data
    return data


def opens_to(sealing: Sealing, path: str, entry: pygit2.Object | None) -> bytes | None:
    """The plaintext of a sealed blob entry, or ``None`` (not a sealed blob, or it does not open).

    For comparisons only: a sealed blob's id changes with every seal (a fresh
    nonce), so equal content is told by its plaintext. Never raises.
    """
    data = blob_data(entry)
    if data is None or not is_sealed(data):
        return None
    try:
        return sealing.open(path, data)
    except RepositoryError:
        return None


def same_content(
    sealing: Sealing, old_path: str, a: pygit2.Object | None, new_path: str, b: pygit2.Object | None
) -> bool:
    """Whether two blob entries hold the same content in the same mode, ids aside."""
    if a is None or b is None or a.filemode != b.filemode:
        return False
    if a.id == b.id:
        return True
    left = opens_to(sealing, old_path, a)
    right = opens_to(sealing, new_path, b)
    if left is None and right is None:
        return False
    return (left if left is not None else blob_data(a)) == (
        right if right is not None else blob_data(b)
    )


def same_entry(a: pygit2.Object | None, b: pygit2.Object | None) -> bool:
    """Whether two entries are the same object in the same mode (both absent counts)."""
    if a is None or b is None:
        return a is None and b is None
    return bool(a.id == b.id and a.filemode == b.filemode)


@dataclass
class StagedChange:
    """One session's staged change, held in memory until ``commit``.

    Mutable and not thread-safe: the caller serialises calls per session. The
    :class:`~engine.git.Repository` keeps ``changes`` minimal (a write that
    restores the base content, or a delete of something the base does not have,
    removes the entry), so ``is_empty()`` means "nothing would change".

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


class View:
    """A session's view: a base tree overlaid with staged changes (read-only).

    Invariant kept by the staging operations: when a staged file sits at a path
    that the base tree has as a folder, every base entry under it is staged as
    deleted. So an exact lookup in ``changes`` first, then in the base tree, is
    the whole truth for any single path.

    Args:
        tree: The base tree.
        changes: Staged content by path (``None``: deleted), as in
            :attr:`StagedChange.changes`.
        modes: Staged modes by path, as in :attr:`StagedChange.modes`.
        sealing: Opens sealed blobs of the base tree.
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
        """``tree_entry(self.tree, path)``, keeping the last folder's tree object.

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
            parent = tree_entry(self.tree, folder) if folder else self.tree
            if not isinstance(parent, pygit2.Tree):
                return None
            self._folder = (folder, parent)
        if not isinstance(parent, pygit2.Tree):
            return None
        index = tree_names(parent).get(name)
        return None if index is None else parent[index]

    def entry(self, path: str) -> Entry | None:
        """Return ``(mode, id)`` of the non-tree entry at ``path``, or ``None``."""
        if path in self.changes:
            data = self.changes[path]
            if data is None:
                return None
            return self.modes.get(path, MODE_FILE), pygit2.hash(data)
        obj = self._base_entry(path)
        if obj is None or obj.filemode == MODE_TREE:
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
        obj = tree_entry(self.tree, path)
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


def session_commit(handle: Handle, agent: str, staged: StagedChange | None) -> pygit2.Commit:
    """The commit a session's view is based on: ``staged.base``, else the agent's head.

    Raises:
        RepositoryError: ``not_found`` if ``staged.base`` names no object, or
            the agent's lane names no commit, or the base branch is missing.
    """
    if staged is not None and staged.base is not None:
        return handle.commit(staged.base)
    return head_for(handle, agent)


def session_view(handle: Handle, agent: str, staged: StagedChange | None) -> View:
    """The session's view, sharing ``staged``'s dictionaries (read it, never stage on it).

    Raises:
        RepositoryError: ``not_found`` as :func:`session_commit`.
    """
    tree = session_commit(handle, agent, staged).tree
    if staged is None:
        return View(tree, {}, {}, handle.sealing)
    return View(tree, staged.changes, staged.modes, handle.sealing)


def stage(view: View, path: str, data: bytes | None, mode: int = MODE_FILE) -> None:
    """Record a write (``data``) or deletion (``None``) in ``view``, keeping it minimal."""
    base = tree_entry(view.tree, path)
    base_entry = None if base is None or base.filemode == MODE_TREE else base
    view.changes.pop(path, None)
    view.modes.pop(path, None)
    if data is None:
        if base_entry is not None:
            view.changes[path] = None
        return
    if (
        base_entry is not None
        and base_entry.filemode == mode
        and (base_entry.id == pygit2.hash(data) or opens_to(view.sealing, path, base_entry) == data)
    ):
        return
    view.changes[path] = data
    if mode != MODE_FILE:
        view.modes[path] = mode


def check_write_target(view: View, path: str) -> None:
    """Refuse a write at ``path`` that would cross a symlink or change file/folder shape.

    Raises:
        InvalidRequestError: ``symlink_in_path`` if a leading component of
            ``path`` is a symbolic link; ``invalid_argument`` if one is a file
            or a submodule, or ``path`` is a folder or a submodule.
    """
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
