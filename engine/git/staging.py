"""Staging a session's writes, deletions and moves, and reporting its status.

Each operation works on a copy of the staged change and keeps it only if it
succeeds, so a refused call changes nothing; the rules it applies are in
:mod:`engine.git.views` (docs/architecture.md, "Version control").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.errors import InvalidRequestError, RepositoryError
from engine.git.base import base_head
from engine.git.handle import Handle, tree_entry
from engine.git.refs import lane_ref, ref_target
from engine.git.views import (
    MODE_EXECUTABLE,
    MODE_FILE,
    MODE_GITLINK,
    MODE_TREE,
    StagedChange,
    View,
    check_path,
    check_write_target,
    normal_mode,
    session_commit,
    stage,
)

__all__ = ["stage_delete", "stage_move", "stage_write", "status"]


def _stage_on_copy(
    handle: Handle, agent: str, staged: StagedChange, apply: Callable[[View], None]
) -> None:
    """Run ``apply`` on a copy of the staged state and keep it only if it succeeds."""
    base = session_commit(handle, agent, staged)
    view = View(base.tree, dict(staged.changes), dict(staged.modes), handle.sealing)
    apply(view)
    staged.base = base.id
    staged.changes = view.changes
    staged.modes = view.modes


def stage_write(handle: Handle, agent: str, staged: StagedChange, path: str, data: bytes) -> None:
    """Stage a file's new content.

    The file becomes a regular file: writing at a symbolic-link entry
    replaces the link (it is not followed) and an executable file stays
    executable.

    Args:
        handle: The repository.
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
    check_path(path)
    content = bytes(data)

    def apply(view: View) -> None:
        check_write_target(view, path)
        current = view.entry(path)
        mode = MODE_EXECUTABLE if current and current[0] == MODE_EXECUTABLE else MODE_FILE
        stage(view, path, content, mode)

    _stage_on_copy(handle, agent, staged, apply)


def stage_delete(handle: Handle, agent: str, staged: StagedChange, path: str) -> None:
    """Stage the deletion of a file or symbolic-link entry.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change (``base`` set if ``None``).
        path: A validated repository path.

    Raises:
        RepositoryError: ``not_found`` if ``path`` is not a file or symlink
            entry in the view. Nothing changes then.
    """
    check_path(path)

    def apply(view: View) -> None:
        entry = view.entry(path)
        if entry is None or entry[0] == MODE_GITLINK:
            raise RepositoryError("not_found", "file not found")
        stage(view, path, None)

    _stage_on_copy(handle, agent, staged, apply)


def stage_move(
    handle: Handle, agent: str, staged: StagedChange, source: str, destination: str
) -> None:
    """Stage a move as a deletion plus a write of the same content and mode.

    A symbolic-link entry stays a link and an executable stays executable.
    ``destination`` is checked against the view with ``source`` already
    removed, so ``a/b -> a`` works when ``a/b`` was alone in ``a``.

    Args:
        handle: The repository.
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
    check_path(source)
    check_path(destination)

    def apply(view: View) -> None:
        entry = view.entry(source)
        data = view.data(source)
        if entry is None or entry[0] == MODE_GITLINK or data is None:
            raise RepositoryError("not_found", "source file not found")
        if source == destination:
            raise InvalidRequestError("invalid_argument", "source and destination are the same")
        if view.entry(destination) is not None:
            raise InvalidRequestError("invalid_argument", "destination exists")
        stage(view, source, None)
        check_write_target(view, destination)
        stage(view, destination, data, normal_mode(entry[0]))

    _stage_on_copy(handle, agent, staged, apply)


def status(handle: Handle, agent: str, staged: StagedChange | None) -> dict[str, Any]:
    """Summarise the agent's lane and the session's staged change.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change, or ``None``.

    Returns:
        ``{"lane": "agent/<a>", "lane_exists", "lane_head" (hex or None),
        "base" (hex or None), "base_branch" (its name, ``master``),
        "main_head" (hex: the base branch's head), "ahead", "behind" (lane
        versus the base branch; 0 and 0 without a lane), "staged": [{"path",
        "change": "added"|"modified"|"deleted"}] sorted by path}``.
    """
    repo = handle.repo
    lane = lane_ref(agent)
    lane_head = ref_target(repo, lane)
    main = base_head(handle).id
    ahead, behind = (0, 0) if lane_head is None else repo.ahead_behind(lane_head, main)
    entries: list[dict[str, str]] = []
    if staged is not None and staged.base is not None and staged.changes:
        base_tree = handle.commit(staged.base).tree
        for path in sorted(staged.changes):
            if staged.changes[path] is None:
                change = "deleted"
            else:
                obj = tree_entry(base_tree, path)
                exists = obj is not None and obj.filemode != MODE_TREE
                change = "modified" if exists else "added"
            entries.append({"path": path, "change": change})
    return {
        "lane": lane[len("refs/heads/") :],
        "lane_exists": lane_head is not None,
        "lane_head": None if lane_head is None else str(lane_head),
        "base": None if staged is None or staged.base is None else str(staged.base),
        "base_branch": handle.base_ref.removeprefix("refs/heads/"),
        "main_head": str(main),
        "ahead": ahead,
        "behind": behind,
        "staged": entries,
    }
