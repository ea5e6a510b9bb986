"""Taking in what a remote holds: a lane that moved there, chit's stores, parked commits.

After a fetch, each local reference is brought level with the remote's
without losing anything either side holds: a lane is fast-forwarded, or kept
when it is ahead; a lane that went two ways keeps the remote's history and
parks the local commits under ``refs/chit/parked/<agent>/<id>``; chit's stores
(content-addressed, so additions commute) take the union of both sides
(docs/architecture.md, "Lanes on the organisation's remote").
"""

from __future__ import annotations

import enum
import time as _time

import pygit2
from pygit2.enums import FileMode

from engine.git.handle import Handle, tree_names
from engine.git.refs import STORE_PREFIX, CasUpdate, equals, lane_ref, ref_target

__all__ = ["PARKED_PREFIX", "LaneMove", "adopt_lane", "parked_ref", "union_store"]

PARKED_PREFIX = STORE_PREFIX + "parked/"
"""Commits of a lane that went two ways are kept under ``refs/chit/parked/<agent>/<id>``."""


class LaneMove(enum.Enum):
    """What :func:`adopt_lane` did to the local lane."""

    SAME = "same"
    """The remote's lane is the local one, or the remote has none."""
    AHEAD = "ahead"
    """The local lane holds the remote's and more: it waits to be pushed."""
    FORWARDED = "forwarded"
    """The local lane was fast-forwarded to the remote's."""
    PARKED = "parked"
    """The two went apart: the local commits were parked, the lane is the remote's."""


def parked_ref(agent: str, head: pygit2.Oid) -> str:
    """``refs/chit/parked/<agent>/<hex id of head>``: where a parked lane head is kept."""
    return f"{PARKED_PREFIX}{agent}/{head}"


def adopt_lane(
    handle: Handle, update: CasUpdate, agent: str, remote: pygit2.Oid | None
) -> tuple[LaneMove, str | None]:
    """Bring the local lane level with the remote's (the lane's writer lock held).

    The remote's lane must be in the local object database (fetched). If the
    two went apart (another engine pushed while this one could not reach the
    remote and committed locally), the remote's lane wins, since other hosts
    built on it, and the local commits it lacks stay reachable, with their
    provenance records, from a parked reference this function creates.

    Args:
        handle: The repository.
        update: The compare-and-swap that moves references.
        agent: A validated agent name.
        remote: The remote's lane head, or ``None`` if it has none.

    Returns:
        What happened, and the parked reference when something was parked.

    Raises:
        RepositoryError: ``conflict`` if the lane moved under the lock (a
            writer outside chit).
    """
    repo = handle.repo
    ref = lane_ref(agent)
    local = ref_target(repo, ref)
    if remote is None or remote == local:
        return LaneMove.SAME, None
    if local is None or repo.descendant_of(remote, local):
        update(repo, ref, remote, equals(local), "chit: fast-forward to the remote's lane")
        return LaneMove.FORWARDED, None
    if repo.descendant_of(local, remote):
        return LaneMove.AHEAD, None
    parked = parked_ref(agent, local)
    if ref_target(repo, parked) is None:
        update(repo, parked, local, equals(None), "chit: park a lane that went two ways")
    update(repo, ref, remote, equals(local), "chit: take the remote's lane")
    return LaneMove.PARKED, parked


def union_store(
    handle: Handle,
    update: CasUpdate,
    ref: str,
    remote: pygit2.Oid | None,
    *,
    now: int | None = None,
) -> None:
    """Make a chit store reference hold every entry of the local and the remote store.

    The store's writer lock is held by the caller. A remote store ahead of
    the local one is fast-forwarded to; a local one ahead is kept; two that
    went apart become one commit on top of the remote's whose tree is the
    union of both trees (the remote's entry where a name is on both sides:
    stores are content-addressed or keyed by commit id, so both sides agree).
    The result always descends from the remote's, so it pushes as a
    fast-forward.

    Args:
        handle: The repository.
        update: The compare-and-swap that moves references.
        ref: A reference under ``refs/chit/``.
        remote: The remote's head of ``ref`` (fetched), or ``None``.
        now: The merge commit's time, Unix seconds (default: now).

    Raises:
        RepositoryError: ``conflict`` if the reference moved under the lock.
    """
    repo = handle.repo
    local = ref_target(repo, ref)
    if remote is None or remote == local:
        return
    if local is None or repo.descendant_of(remote, local):
        update(repo, ref, remote, equals(local), "chit: fast-forward to the remote's store")
        return
    if repo.descendant_of(local, remote):
        return
    theirs, ours = handle.commit(remote), handle.commit(local)
    tree = _union(repo, theirs.tree, ours.tree)
    when = int(_time.time()) if now is None else int(now)
    signature = pygit2.Signature("chit", "chit@localhost", when, 0)
    merged = repo.create_commit(
        None, signature, signature, "chit store: take in the remote's entries\n", tree, [remote]
    )
    update(repo, ref, merged, equals(local), "chit: union with the remote's store")


def _union(repo: pygit2.Repository, base: pygit2.Tree, extra: pygit2.Tree) -> pygit2.Oid:
    """``base`` plus every entry of ``extra`` it lacks, folder by folder."""
    builder = repo.TreeBuilder(base)
    names = tree_names(base)
    for i in range(len(extra)):
        entry = extra[i]
        name = entry.name
        if name is None:
            continue
        at = names.get(name)
        if at is None:
            builder.insert(name, entry.id, entry.filemode)
            continue
        mine = base[at]
        if mine.id != entry.id and isinstance(mine, pygit2.Tree) and isinstance(entry, pygit2.Tree):
            builder.insert(name, _union(repo, mine, entry), FileMode.TREE)
    return builder.write()
