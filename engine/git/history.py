"""History: the log, diffs, a lane's own commits and commit trailers.

Read-side listings take the caller's ``visible`` predicate over repository
paths and prune what it rejects, so nothing out of scope is shown; patches
compare plaintexts, sealed blobs opened (docs/tools.md, docs/sealing.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import pygit2
from pygit2.enums import SortMode

from engine.errors import InvalidRequestError, RepositoryError
from engine.git.base import base_heads
from engine.git.handle import Handle, tree_entry
from engine.git.refs import head_for, lane_ref, ref_target, resolve
from engine.git.views import (
    MODE_GITLINK,
    Entry,
    StagedChange,
    View,
    check_path,
    same_content,
    session_view,
)
from engine.limits import LIMITS

__all__ = [
    "commit_trailers",
    "diff",
    "lane_commits",
    "log",
    "range_commits",
]

_TRAILER = re.compile(r"([A-Za-z0-9-]+):[ \t]*(.*)")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _message(commit: pygit2.Commit) -> str:
    return _text(commit.raw_message)


def _under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or lies inside folder ``prefix`` (whole segments)."""
    return path == prefix or path.startswith(prefix + "/")


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


def lane_commits(handle: Handle, agent: str, since: str | None = None) -> list[pygit2.Commit]:
    """Return the commits on an agent's lane that the base branch does not have.

    Args:
        handle: The repository.
        agent: A validated agent name.
        since: A revision (:func:`~engine.git.refs.resolve` forms) whose
            history is left out too, as in ``git log since..agent/<agent>``.

    Returns:
        Commits reachable from the lane and not from the base (the local base
        branch, nor the remote's as last fetched, nor ``since``), newest first
        (topological, then time order); empty if there is no lane.

    Raises:
        InvalidRequestError, RepositoryError: If ``since`` does not resolve.
    """
    repo = handle.repo
    head = ref_target(repo, lane_ref(agent))
    if head is None:
        return []
    walker = repo.walk(head, SortMode.TOPOLOGICAL | SortMode.TIME)
    for base in base_heads(handle):
        walker.hide(base.id)
    if since is not None:
        walker.hide(resolve(handle, since).id)
    return list(walker)


def range_commits(handle: Handle, since: str, until: str, limit: int) -> list[pygit2.Commit]:
    """The commits of ``since..until``, as ``git rev-list since..until`` lists them.

    Args:
        handle: The repository.
        since: A revision (:func:`~engine.git.refs.resolve` forms) whose
            history is left out.
        until: A revision whose history is listed.
        limit: The most commits to list.

    Returns:
        Commits reachable from ``until`` and not from ``since``, newest first
        (topological, then time order).

    Raises:
        InvalidRequestError, RepositoryError: If a revision does not resolve.
        ValueError: If the range holds more than ``limit`` commits.
    """
    walker = handle.repo.walk(resolve(handle, until).id, SortMode.TOPOLOGICAL | SortMode.TIME)
    walker.hide(resolve(handle, since).id)
    found: list[pygit2.Commit] = []
    for commit in walker:
        if len(found) == limit:
            raise ValueError(f"the range holds more than {limit} commits; narrow it")
        found.append(commit)
    return found


def _changed_paths(repo: pygit2.Repository, commit: pygit2.Commit) -> list[str]:
    """Paths changed by ``commit`` against its first parent (all paths for a root)."""
    parent = repo.get(commit.parent_ids[0]) if commit.parent_ids else None
    if isinstance(parent, pygit2.Commit):
        changes = parent.tree.diff_to_tree(commit.tree)
    else:
        changes = commit.tree.diff_to_tree(swap=True)
    paths: set[str] = set()
    for delta in changes.deltas:
        paths.add(delta.old_file.path)
        paths.add(delta.new_file.path)
    return sorted(paths)


def log(
    handle: Handle,
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
    At most ``LIMITS.log_scan_commits`` commits are examined.

    Args:
        handle: The repository.
        rev: A revision as accepted by :func:`~engine.git.refs.resolve`, or
            ``None`` for the agent's head.
        agent: A validated agent name.
        path: A validated path restricting the listing, or ``None``.
        limit: How many commits to list, 1 to ``LIMITS.log_commits``.
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
    most = LIMITS.log_commits
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= most:
        raise InvalidRequestError("invalid_argument", f"limit must be 1 to {most}")
    if path is not None:
        check_path(path)
    start = head_for(handle, agent) if rev is None else resolve(handle, rev)
    repo = handle.repo
    commits: list[dict[str, Any]] = []
    pruned = 0
    truncated = False
    for scanned, commit in enumerate(repo.walk(start.id, SortMode.TOPOLOGICAL | SortMode.TIME)):
        if scanned >= LIMITS.log_scan_commits:
            truncated = True
            break
        changed = _changed_paths(repo, commit)
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
                "summary": (lines[0] if lines else "")[: LIMITS.log_summary_chars],
                "author": _text(commit.author.raw_name),
                "time": int(commit.author.time),
                "paths": shown[: LIMITS.log_paths],
                "paths_truncated": len(shown) > LIMITS.log_paths,
                "trailers": commit_trailers(message),
            }
        )
    return {"commits": commits, "pruned": pruned, "truncated": truncated}


def diff(
    handle: Handle,
    agent: str,
    staged: StagedChange | None,
    rev: str | None,
    path: str | None,
    visible: Callable[[str], bool],
) -> dict[str, Any]:
    """Show what differs, file by file, with unified patches.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change, or ``None``.
        rev: ``None`` for the staged change against its base; else a
            revision (as for :func:`~engine.git.refs.resolve`) whose tree is
            compared with the session's view (base plus staged change).
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
        check_path(path)
    sealing = handle.sealing
    view = session_view(handle, agent, staged)
    staged_paths: Iterable[str] = () if staged is None else staged.changes
    if rev is None:
        old = view.tree
        candidates = set(staged_paths)
    else:
        old = resolve(handle, rev).tree
        candidates = set(staged_paths)
        for delta in old.diff_to_tree(view.tree).deltas:
            candidates.add(delta.old_file.path)
            candidates.add(delta.new_file.path)
    old_view = View(old, {}, {}, sealing)
    files: list[dict[str, Any]] = []
    pruned = 0
    for name in sorted(candidates):
        if path is not None and not _under(name, path):
            continue
        before, after = old_view.entry(name), view.entry(name)
        if before == after:
            continue
        if name not in view.changes and same_content(
            sealing, name, tree_entry(old, name), name, tree_entry(view.tree, name)
        ):
            continue  # sealed twice with the same content (fresh nonces, new ids)
        if not visible(name):
            pruned += 1
            continue
        try:
            files.append(_file_patch(name, old_view, before, view, after))
        except RepositoryError as exc:
            if exc.code == "seal_invalid":
                raise RepositoryError(exc.code, exc.message, path=name) from None
            raise
    return {"files": files, "pruned": pruned}


def _entry_bytes(view: View, name: str, entry: Entry | None) -> bytes | None:
    if entry is None:
        return None
    if entry[0] == MODE_GITLINK:
        return f"Subproject commit {entry[1]}\n".encode()
    return view.data(name)


def _file_patch(
    name: str, old: View, before: Entry | None, new: View, after: Entry | None
) -> dict[str, Any]:
    # Both sides are plaintext: View.data opens sealed blobs (or raises).
    old_bytes = _entry_bytes(old, name, before)
    new_bytes = _entry_bytes(new, name, after)
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
