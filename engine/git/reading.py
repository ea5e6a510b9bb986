"""Reading files: as a session sees them, and at a revision an agent names.

Every read opens sealed blobs (docs/sealing.md), so callers only see
plaintext; symbolic-link entries yield their target bytes and are never
followed. Scope is the caller's (docs/architecture.md, "Version control").
"""

from __future__ import annotations

from collections.abc import Callable

import pygit2

from engine.errors import RepositoryError
from engine.git.handle import Handle, tree_entry
from engine.git.refs import resolve
from engine.git.views import (
    MODE_EXECUTABLE,
    MODE_FILE,
    MODE_GITLINK,
    StagedChange,
    View,
    check_path,
    session_commit,
    session_view,
)

__all__ = ["exists", "read_at", "view_files", "view_read"]


def view_read(handle: Handle, agent: str, staged: StagedChange | None, path: str) -> bytes:
    """Read a file as the session sees it.

    Args:
        handle: The repository.
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
    check_path(path)
    data = session_view(handle, agent, staged).data(path)
    if data is None:
        raise RepositoryError("not_found", "file not found")
    return data


def view_files(
    handle: Handle, agent: str, staged: StagedChange | None, *, limit: int = 100_000
) -> tuple[str, dict[str, str], Callable[[str], bytes | None]]:
    """List the regular files of a session's view and bind a reader to that view.

    For the semantic index (engine/semantic): it keys parsed files by blob
    id, so only changed files are parsed again.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change, or ``None``.
        limit: Most files listed (the walk stops there).

    Returns:
        ``(tree id, {path: blob id (hex)}, read)``: the base tree's id, every
        regular file (``0o100644`` or ``0o100755``; symlinks and submodules
        are left out) with staged writes and deletions applied (a staged
        file's id is its content's blob id), and ``read(path)``, which
        returns the plaintext in that same view (sealed blobs opened, as
        :func:`view_read`) or ``None`` if there is none. ``read`` raises
        :class:`RepositoryError` ``seal_invalid`` for a seal that does not open.
    """
    tree = session_commit(handle, agent, staged).tree
    changes = dict(staged.changes) if staged is not None else {}
    modes = dict(staged.modes) if staged is not None else {}
    view = View(tree, changes, modes, handle.sealing)
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


def read_at(handle: Handle, rev: str, path: str) -> bytes:
    """Read a file at a revision given by an agent.

    Args:
        handle: The repository.
        rev: A revision as accepted by :func:`~engine.git.refs.resolve`.
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
    check_path(path)
    obj = tree_entry(resolve(handle, rev).tree, path)
    if not isinstance(obj, pygit2.Blob):
        raise RepositoryError("not_found", "file not found")
    return handle.sealing.open(path, obj.data)


def exists(handle: Handle, agent: str, staged: StagedChange | None, path: str) -> bool:
    """Return whether a file or symbolic-link entry exists in the session's view.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change, or ``None``.
        path: A validated repository path.

    Returns:
        ``True`` for a file or symlink entry, ``False`` for nothing, a
        folder or a submodule.
    """
    check_path(path)
    entry = session_view(handle, agent, staged).entry(path)
    return entry is not None and entry[0] != MODE_GITLINK
