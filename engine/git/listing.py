"""Walking a session's view in path order: what ``list_files`` and ``search_text`` read.

The view is the session's base tree overlaid with its staged change, as
:class:`~engine.git.views.View` reads it; the walk yields every entry in one
fixed order, and can start after a position and leave folders unentered, so
a caller pages through a large tree without reading what it skips
(docs/tools.md, "Listing and searching").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import pygit2

from engine.git.handle import Handle
from engine.git.views import (
    MODE_FILE,
    MODE_GITLINK,
    MODE_SYMLINK,
    MODE_TREE,
    StagedChange,
    View,
    session_commit,
)

__all__ = ["ViewEntry", "sort_key", "walk_view"]

Kind = Literal["file", "folder", "symlink", "submodule"]


@dataclass(frozen=True)
class ViewEntry:
    """One entry of a view.

    Attributes:
        path: Its repository path.
        kind: ``file`` (also executable), ``folder``, ``symlink`` or ``submodule``.
        size: Bytes of a file's content as stored (a sealed file's sealed
            size; a staged one's plaintext size); ``None`` for the other kinds.
    """

    path: str
    kind: Kind
    size: int | None = None


def sort_key(path: str, kind: str) -> str:
    """The walk's order: a folder sorts as its path with a trailing ``/``, as git sorts trees.

    In this order a folder comes right before everything inside it, and every
    path inside it comes before the next entry beside it.
    """
    return path + "/" if kind == "folder" else path


def _kind(mode: int) -> Kind:
    if mode == MODE_SYMLINK:
        return "symlink"
    if mode == MODE_GITLINK:
        return "submodule"
    return "file"  # MODE_FILE, MODE_EXECUTABLE (and legacy 0o100664)


class _Overlay:
    """The staged change by folder: the files written in it and the folders written under it."""

    def __init__(self, staged: StagedChange | None) -> None:
        self.changes: dict[str, bytes | None] = {} if staged is None else staged.changes
        self.modes: dict[str, int] = {} if staged is None else staged.modes
        self.files: dict[str, dict[str, str]] = {}  # folder -> name -> path (written files)
        self.folders: dict[str, set[str]] = {}  # folder -> names of folders written under
        for path, data in self.changes.items():
            if data is None:
                continue
            folder, _, name = path.rpartition("/")
            self.files.setdefault(folder, {})[name] = path
            parts = path.split("/")
            for depth in range(1, len(parts)):
                self.folders.setdefault("/".join(parts[: depth - 1]), set()).add(parts[depth - 1])


def _children(
    handle: Handle, overlay: _Overlay, folder: str, tree: pygit2.Tree | None
) -> list[tuple[str, ViewEntry, pygit2.Tree | None]]:
    """A folder's entries in the view, sorted by :func:`sort_key`."""
    prefix = folder + "/" if folder else ""
    out: dict[str, tuple[ViewEntry, pygit2.Tree | None]] = {}
    written = overlay.files.get(folder, {})
    for child in tree if tree is not None else ():
        name = child.name or ""
        path = prefix + name
        if child.filemode == MODE_TREE:
            if name not in written:  # a staged file there replaced the folder
                out[name] = (ViewEntry(path, "folder"), child.peel(pygit2.Tree))
        elif path not in overlay.changes:
            kind = _kind(child.filemode)
            size = handle.repo.odb.read_header(child.id)[1] if kind == "file" else None
            out[name] = (ViewEntry(path, kind, size), None)
    for name, path in written.items():
        data = overlay.changes[path]
        kind = _kind(overlay.modes.get(path, MODE_FILE))
        out[name] = (ViewEntry(path, kind, len(data) if data is not None else None), None)
    for name in overlay.folders.get(folder, ()):
        if name not in out or out[name][0].kind != "folder":
            out[name] = (ViewEntry(prefix + name, "folder"), None)
    rows = [(sort_key(e.path, e.kind), e, t) for e, t in out.values()]
    rows.sort(key=lambda row: row[0])
    return rows


def walk_view(
    handle: Handle,
    agent: str,
    staged: StagedChange | None,
    *,
    enter: Callable[[str], bool],
    after: str | None = None,
) -> tuple[Iterator[ViewEntry], Callable[[str], bytes | None]]:
    """Walk a session's view depth first, in :func:`sort_key` order, and bind a reader to it.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change, or ``None``.
        enter: Called with a folder's path: whether to walk inside it (a
            folder is yielded either way; one left unentered yields nothing
            under it).
        after: A :func:`sort_key` position: entries at or before it are not
            yielded, and folders wholly before it are not read.

    Returns:
        ``(entries, read)``: a lazy iterator of :class:`ViewEntry` (a folder
        that only held staged deletions may be yielded and then hold nothing),
        and ``read(path)``, the plaintext of a file or symlink in that same
        view (sealed blobs opened) or ``None``.

    Raises:
        RepositoryError: ``not_found`` as :func:`~engine.git.views.session_commit`
            (at the call); ``read`` raises ``seal_invalid`` for a sealed blob
            that does not open.
    """
    root = session_commit(handle, agent, staged).tree
    overlay = _Overlay(staged)
    view = View(root, overlay.changes, overlay.modes, handle.sealing)

    def entries() -> Iterator[ViewEntry]:
        stack = [iter(_children(handle, overlay, "", root))]
        while stack:
            row = next(stack[-1], None)
            if row is None:
                stack.pop()
                continue
            key, entry, tree = row
            if entry.kind == "folder":
                if after is not None and key <= after and not after.startswith(key):
                    continue  # the whole folder lies before the position
                if after is None or key > after:
                    yield entry
                if enter(entry.path):
                    stack.append(iter(_children(handle, overlay, entry.path, tree)))
            elif after is None or key > after:
                yield entry

    return entries(), view.data
