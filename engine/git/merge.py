"""Merging: a staged change onto a lane that moved, and a lane's conflicts with the base.

Merges run on plaintexts (sealed sides opened) in an in-memory object
database, so no blob is written and protected content never reaches git's
objects in the clear (docs/architecture.md, "Sessions and lanes";
docs/sealing.md). No reference is touched here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pygit2
from pygit2.enums import FileMode, ObjectType

from engine.auth.sealing import Sealing
from engine.errors import RepositoryError
from engine.git.base import base_head
from engine.git.handle import Handle, reference, tree_entry
from engine.git.refs import head_for, lane_ref
from engine.git.views import (
    MODE_FILE,
    MODE_SYMLINK,
    StagedChange,
    blob_data,
    same_content,
    same_entry,
)

__all__ = [
    "conflicts_with_base",
    "merge_onto_lane",
    "rebase_if_clean",
    "staged_paths_changed_on_lane",
]


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


def _plain(sealing: Sealing, path: str, entry: pygit2.Object | None) -> bytes | None:
    """The content of a blob entry, opened if sealed; ``None`` if not a blob.

    Raises:
        RepositoryError: ``seal_invalid`` if it is sealed and does not open.
    """
    data = blob_data(entry)
    return None if data is None else sealing.open(path, data)


def _folder_clash(tree: pygit2.Tree, path: str) -> bool:
    parts = path.split("/")
    for i in range(1, len(parts)):
        entry = tree_entry(tree, "/".join(parts[:i]))
        if entry is not None and entry.type_str != "tree":
            return True
    entry = tree_entry(tree, path)
    return entry is not None and entry.type_str == "tree"


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
        pygit2.IndexEntry(path, pygit2.hash(data), FileMode.BLOB) for data in (base, ours, theirs)
    ]
    result = scratch.merge_file_from_index(entries[0], entries[1], entries[2])
    if not result.automergeable or result.contents is None:
        return None
    return result.contents.encode("utf-8")


def staged_paths_changed_on_lane(handle: Handle, agent: str, staged: StagedChange) -> list[str]:
    """Staged paths that changed on the lane since ``staged.base``, sorted.

    A path counts when its entry, or the entry of a leading folder that is
    not a folder on both sides, differs between ``staged.base`` and the lane
    head; a sealed file whose plaintext and mode are unchanged does not count
    (its blob id differs with every seal). Empty when nothing is staged or the
    lane has not moved.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change.

    Returns:
        The staged paths a commit onto the lane head would have to merge.
    """
    if staged.base is None or staged.is_empty():
        return []
    head = head_for(handle, agent)
    if head.id == staged.base:
        return []
    old, new = handle.commit(staged.base).tree, head.tree
    changed = []
    for path in staged.changes:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            a = tree_entry(old, "/".join(parts[:i]))
            b = tree_entry(new, "/".join(parts[:i]))
            if a is None and b is None:
                break
            if a is None or b is None or (a.id, a.filemode) != (b.id, b.filemode):
                if i < len(parts) and a is not None and b is not None:
                    if a.type_str == "tree" and b.type_str == "tree":
                        continue  # a folder whose other contents changed
                if i == len(parts) and same_content(handle.sealing, path, a, path, b):
                    break  # sealed again with the same content: not a change
                changed.append(path)
                break
    return sorted(changed)


def merge_onto_lane(handle: Handle, agent: str, staged: StagedChange) -> bool:
    """Three-way merge the staged change onto the lane head, if the lane moved.

    For each staged path, with base = ``staged.base``, theirs = the lane head
    and ours = the staged content: unchanged on the lane, ours stands; equal
    on both sides, nothing is left to stage; both changed a text file, the
    line-level merge of libgit2 (``git_merge_file``) decides; anything else
    (binary, delete against modify, add against add, a file against a
    folder) is a conflict. Clean results replace the staged content,
    conflicting paths keep ours staged and are recorded in
    ``staged.conflicts``; ``staged.base`` moves to the lane head. No reference
    is touched. The head need not descend from ``staged.base`` (the base
    branch moved before the lane was made, or the remote's lane took the place
    of commits parked while it was out of reach): the change, taken against
    its own base, is then applied onto the head as a cherry-pick would.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change (updated in place).

    Returns:
        True iff ``staged.base`` moved (a merge happened).

    Raises:
        RepositoryError: ``seal_invalid`` if a sealed side does not open.
    """
    if staged.base is None or staged.is_empty():
        return False
    sealing = handle.sealing
    head = head_for(handle, agent)
    if head.id == staged.base:
        return False
    old, new = handle.commit(staged.base).tree, head.tree
    changes: dict[str, bytes | None] = {}
    modes: dict[str, int] = {}
    conflicts = dict(staged.conflicts)
    conflict_modes = dict(staged.conflict_modes)
    for path, ours in staged.changes.items():
        mode = staged.modes.get(path, MODE_FILE)
        base_entry, theirs_entry = tree_entry(old, path), tree_entry(new, path)
        # Plaintexts: sealed sides are opened (seal_invalid if one does not),
        # so ciphertext is never compared or merged; the commit seals again.
        base_data = _plain(sealing, path, base_entry)
        theirs_data = _plain(sealing, path, theirs_entry)
        base_mode: int | None = None if base_entry is None else int(base_entry.filemode)
        theirs_mode: int | None = None if theirs_entry is None else int(theirs_entry.filemode)
        blocked = _folder_clash(new, path)
        if not blocked and (
            same_entry(base_entry, theirs_entry)
            or same_content(sealing, path, base_entry, path, theirs_entry)
        ):
            changes[path] = ours
        elif not blocked and ours == theirs_data and (ours is None or mode == theirs_mode):
            continue  # the lane already has exactly this
        else:
            merged = None if blocked else _merge_text(path, base_data, ours, theirs_data)
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


def conflicts_with_base(
    handle: Handle, agent: str, visible: Callable[[str], bool] | None = None
) -> list[dict[str, Any]]:
    """Paths where merging the lane into the base branch would conflict. Changes nothing.

    This is git's own tree merge, which sees sealed blobs as binary: a sealed
    file changed on both sides always conflicts. Its sides are shown opened
    (plaintext), never as ciphertext.

    Args:
        handle: The repository.
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
    repo = handle.repo
    found = reference(repo, lane_ref(agent))
    if found is None:
        return []
    lane = found.peel(pygit2.Commit)
    index = repo.merge_commits(lane, base_head(handle))
    if index.conflicts is None:
        return []
    sealing = handle.sealing
    out = []
    for ancestor, ours, theirs in index.conflicts:
        sides = (ancestor, ours, theirs)
        path = next(e.path for e in (ours, theirs, ancestor) if e is not None)
        if visible is not None and not all(visible(e.path) for e in sides if e is not None):
            continue
        try:
            data = [None if e is None else _plain(sealing, e.path, repo[e.id]) for e in sides]
        except RepositoryError as exc:
            raise RepositoryError(exc.code, exc.message, path=path) from None
        out.append({"path": path, "base": data[0], "ours": data[1], "theirs": data[2]})
    return sorted(out, key=lambda c: str(c["path"]))


def rebase_if_clean(handle: Handle, agent: str, staged: StagedChange) -> bool:
    """Move a staged change onto the lane head when that cannot change its meaning.

    When another session of the same agent committed after this session based
    its view, the lane head is a descendant of ``staged.base``. If no staged
    path changed there (:func:`staged_paths_changed_on_lane`), the change
    applies to the new head exactly as it did to the old one (the trivial
    clean case of a three-way merge), so ``staged.base`` moves there.
    Anything else is left for the merge of later work: nothing is touched.

    Args:
        handle: The repository.
        agent: A validated agent name.
        staged: The session's staged change.

    Returns:
        True iff ``staged.base`` moved.
    """
    if staged.base is None or staged.is_empty():
        return False
    head = head_for(handle, agent)
    if head.id == staged.base or not handle.repo.descendant_of(head.id, staged.base):
        return False
    if staged_paths_changed_on_lane(handle, agent, staged):
        return False
    staged.base = head.id
    return True
