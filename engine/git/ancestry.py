"""The base branch's history for the audit of merged work, and chit's records in bulk.

Read-only walks the audit of what reached the base branch needs
(engine/audit/merged.py, docs/audit.md §9): which commits the base holds and
through which merge each arrived, any commit by id, a range of commits, and
every provenance record an agent's store holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pygit2
from pygit2.enums import SortMode

from engine.errors import RepositoryError
from engine.git.base import base_head
from engine.git.handle import Handle, bounded_blob
from engine.git.names import AGENT_NAME
from engine.git.refs import STORE_PREFIX, ref_target, resolve
from engine.limits import LIMITS

__all__ = [
    "BaseCommit",
    "base_history",
    "change_of",
    "find_commit",
    "merge_base",
    "provenance_agents",
    "provenance_entries",
    "walk_between",
]

_PROVENANCE = STORE_PREFIX + "provenance/"
_HEX = re.compile(r"[0-9a-f]{40}")
_FAN = re.compile(r"[0-9a-f]{2}")


@dataclass(frozen=True)
class BaseCommit:
    """A commit the base branch holds, and how it arrived.

    Attributes:
        commit: The commit.
        merge: ``None`` when it is on the base's first-parent chain (made on the
            base, or brought by a fast-forward); else the hex id of the merge
            commit on that chain that brought it in through a non-first parent.
    """

    commit: pygit2.Commit
    merge: str | None


def base_history(handle: Handle, since: str | None, limit: int) -> tuple[list[BaseCommit], bool]:
    """The base branch's commits not reachable from ``since``, newest first.

    Args:
        handle: The repository.
        since: A revision (:func:`~engine.git.refs.resolve` forms) whose
            history is left out, as in ``git log since..main``; ``None``: all.
        limit: The most commits read.

    Returns:
        ``(commits, truncated)``: topological order, newest first; ``truncated``
        when the history holds more than ``limit`` commits (the newest are kept).

    Raises:
        InvalidRequestError, RepositoryError: If ``since`` does not resolve or
            the base branch has no commit.
    """
    repo = handle.repo
    head = base_head(handle)
    hidden = [] if since is None else [resolve(handle, since).id]
    walker = repo.walk(head.id, SortMode.TOPOLOGICAL | SortMode.TIME)
    for oid in hidden:
        walker.hide(oid)
    commits: list[pygit2.Commit] = []
    truncated = False
    for commit in walker:
        if len(commits) >= limit:
            truncated = True
            break
        commits.append(commit)
    inside = {c.id for c in commits}
    chain: list[pygit2.Commit] = []
    current: pygit2.Commit | None = head
    while current is not None and current.id in inside:
        chain.append(current)
        current = current.parents[0] if current.parent_ids else None
    via: dict[pygit2.Oid, str] = {}
    for merge in chain:
        if len(merge.parent_ids) < 2:
            continue
        side = repo.walk(merge.parent_ids[1], SortMode.TOPOLOGICAL)
        for oid in (merge.parent_ids[0], *hidden):
            side.hide(oid)
        for other in merge.parent_ids[2:]:
            side.push(other)
        for commit in side:
            if commit.id not in inside or commit.id in via:
                continue
            via[commit.id] = str(merge.id)
    return [BaseCommit(c, via.get(c.id)) for c in commits], truncated


def find_commit(handle: Handle, commit: str) -> pygit2.Commit | None:
    """The commit with this full 40-hex id, wherever it lies in the object database.

    Returns:
        The commit, or ``None`` if the object is absent or not a commit.
    """
    try:
        obj = handle.repo.get(commit)
        return None if obj is None else obj.peel(pygit2.Commit)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def walk_between(
    handle: Handle, head: pygit2.Oid, hide: list[pygit2.Oid], limit: int
) -> tuple[list[pygit2.Commit], bool]:
    """Commits reachable from ``head`` and not from any of ``hide``, newest first.

    Returns:
        ``(commits, truncated)``: at most ``limit`` commits.
    """
    walker = handle.repo.walk(head, SortMode.TOPOLOGICAL | SortMode.TIME)
    for oid in hide:
        walker.hide(oid)
    found: list[pygit2.Commit] = []
    for commit in walker:
        if len(found) >= limit:
            return found, True
        found.append(commit)
    return found, False


def change_of(
    handle: Handle, old: pygit2.Oid | None, new: pygit2.Oid
) -> dict[str, tuple[str, int] | None]:
    """What changed between two commits: path to ``(blob hex, mode)``, ``None`` if deleted.

    Args:
        handle: The repository.
        old: The earlier commit (``None``: the empty tree).
        new: The later commit.
    """
    repo = handle.repo
    new_tree = repo[new].peel(pygit2.Tree)
    if old is None:
        diff = new_tree.diff_to_tree(swap=True)
    else:
        diff = repo[old].peel(pygit2.Tree).diff_to_tree(new_tree)
    zero = "0" * 40
    out: dict[str, tuple[str, int] | None] = {}
    for delta in diff.deltas:
        if str(delta.old_file.id) != zero:
            out.setdefault(delta.old_file.path, None)
        if str(delta.new_file.id) != zero:
            out[delta.new_file.path] = (str(delta.new_file.id), int(delta.new_file.mode))
    return out


def merge_base(handle: Handle, one: pygit2.Oid, two: pygit2.Oid) -> pygit2.Oid | None:
    """The best common ancestor of two commits, or ``None``."""
    try:
        return handle.repo.merge_base(one, two)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def provenance_agents(handle: Handle) -> list[str]:
    """Agents with a ``refs/chit/provenance/<agent>`` reference (valid names only), sorted."""
    return sorted(
        name[len(_PROVENANCE):]
        for name in handle.repo.references
        if name.startswith(_PROVENANCE) and AGENT_NAME.fullmatch(name[len(_PROVENANCE):])
    )


def provenance_entries(handle: Handle, agent: str) -> Iterator[tuple[str, bytes]]:
    """Every ``(commit id hex, envelope bytes)`` an agent's provenance store holds.

    Entries that are not ``<2 hex>/<38 hex>`` blobs of at most
    ``LIMITS.provenance_record_bytes`` are skipped (the audit of the lane's
    commits reports them: they are untrusted until verified).

    Args:
        handle: The repository.
        agent: A validated agent name.
    """
    repo = handle.repo
    try:
        target = ref_target(repo, _PROVENANCE + agent)
        root = None if target is None else repo[target].peel(pygit2.Tree)
    except (RepositoryError, pygit2.GitError, KeyError, ValueError):
        return
    if root is None:
        return
    for fan in root:
        if fan.type_str != "tree" or not _FAN.fullmatch(fan.name or ""):
            continue
        for leaf in repo[fan.id].peel(pygit2.Tree):
            name = f"{fan.name}{leaf.name}"
            if not _HEX.fullmatch(name):
                continue
            data = bounded_blob(repo, repo.get(leaf.id), LIMITS.provenance_record_bytes)
            if data is not None:
                yield name, data
