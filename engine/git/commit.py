"""Landing a staged change: building its tree (sealing protected blobs) and the commit.

The lane moves by compare and swap while its writer locks are held; objects
are written before the reference moves, so an interrupted commit leaves at
most unreachable objects (docs/architecture.md, "Sessions and lanes";
docs/provenance-format.md for the record a commit can carry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pygit2
from pygit2.enums import FileMode

from engine.auth.sealing import Sealing
from engine.errors import InvalidRequestError, RepositoryError
from engine.git.handle import Handle, tree_entry
from engine.git.merge import merge_onto_lane
from engine.git.refs import CasUpdate, RefLocks, lane_ref, main_head
from engine.git.store import store_record
from engine.git.views import MODE_FILE, MODE_SYMLINK, StagedChange

__all__ = ["commit"]


def _build_tree(
    repo: pygit2.Repository, sealing: Sealing, base: pygit2.Tree, staged: StagedChange
) -> pygit2.Oid:
    """Write the blobs of ``staged`` (sealed where :class:`Sealing` says) and the tree.

    Raises:
        InvalidRequestError: ``invalid_argument`` for a symbolic link at a
            protected path (its target would be sealed into a name no
            checkout can create). Nothing is written then.
    """
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


def _merged(handle: Handle, agent: str, staged: StagedChange) -> StagedChange:
    """A copy of ``staged`` merged onto the lane head (the lane lock held).

    Raises:
        RepositoryError: ``conflict`` if staged paths changed on the lane too;
            ``staged`` then takes the merge's base, changes and conflicts.
        InvalidRequestError: ``invalid_argument`` if nothing is left to commit.
    """
    work = StagedChange(
        base=staged.base,
        changes=dict(staged.changes),
        modes=dict(staged.modes),
        conflicts=dict(staged.conflicts),
        conflict_modes=dict(staged.conflict_modes),
    )
    merge_onto_lane(handle, agent, work)
    if work.conflicts:
        staged.base, staged.changes = work.base, work.changes
        staged.modes, staged.conflicts = work.modes, work.conflicts
        staged.conflict_modes = work.conflict_modes
        raise RepositoryError("conflict", "staged paths changed on the lane too")
    if work.is_empty():
        raise InvalidRequestError("invalid_argument", "nothing is left to commit after merging")
    return work


def _facts(
    repo: pygit2.Repository,
    base: pygit2.Commit,
    tree: pygit2.Oid,
    work: StagedChange,
    message: str,
    who: dict[str, Any],
) -> dict[str, Any]:
    """The commit's facts handed to ``seal`` (see :func:`commit`)."""
    return {
        "tree": str(tree),
        "parents": [str(base.id)],
        "author": who,
        "committer": dict(who),
        "message": message,
        "change": _change_list(repo, base.tree, tree, work),
    }


def _change_list(
    repo: pygit2.Repository, old: pygit2.Tree, new_id: pygit2.Oid, work: StagedChange
) -> list[dict[str, Any]]:
    new = repo[new_id].peel(pygit2.Tree)
    out = []
    for path in sorted(work.changes):
        entry: dict[str, Any] = {"path": path}
        for side, tree in (("old", old), ("new", new)):
            found = tree_entry(tree, path)
            if found is not None and found.type_str == "blob":
                entry[side] = str(found.id)
                entry[f"{side}_mode"] = int(found.filemode)
        out.append(entry)
    return out


def commit(
    handle: Handle,
    locks: RefLocks,
    update: CasUpdate,
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
    process's and every chit process's, see :meth:`RefLocks.hold`): it must
    still point at ``staged.base`` or, when the lane does not exist yet,
    ``staged.base`` must be ``main``'s head or one of its ancestors (a new
    lane never appears over a concurrently created one). Otherwise the
    commit is refused with ``conflict``, unless ``merge`` first moved the
    change onto the lane head. ``refs/heads/main`` is never written.

    Args:
        handle: The repository.
        locks: The repository's reference writer locks.
        update: The compare-and-swap that moves the lane and the provenance
            reference (:func:`~engine.git.refs.cas_update`).
        agent: A validated agent name.
        staged: The session's staged change. Cleared on success (``base``
            becomes the new commit); untouched on failure.
        message: The complete commit message (trailers included).
        author_name: Author and committer name.
        author_email: Author and committer email.
        time: Author and committer time, Unix seconds (offset 0).
        merge: First three-way merge the staged change onto the lane head if
            the lane moved (:func:`~engine.git.merge.merge_onto_lane`), under
            the lane lock. Conflicts are recorded in ``staged.conflicts`` and
            refused with ``conflict``; any other failure leaves ``staged``
            untouched.
        seal: Makes the commit's provenance envelope, under the lane lock
            once the tree is known. Called with the commit's facts
            ``{"tree", "parents", "author", "committer", "message", "change"}``
            (``message`` is ``message`` as given, to be hashed; ``change`` the
            paths with old and new blob ids and modes, sorted by path), it
            returns the envelope bytes. The message then gets a last line
            ``Chit-Provenance: sha256:<hex of SHA-256 of the envelope>``, and
            the envelope is stored in
            :func:`~engine.git.store.provenance_ref` under the new commit's
            id (git-notes layout) before the lane moves.

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
    with locks.hold(ref):
        repo = handle.repo
        work = staged
        if merge:
            # Merge under the lane lock, so no session of this process can move
            # the lane between the merge and the ref update (no wasted work).
            work = _merged(handle, agent, staged)
        if work.base is None:
            raise InvalidRequestError("invalid_argument", "nothing staged")
        base = handle.commit(work.base)
        tree = _build_tree(repo, handle.sealing, base.tree, work)  # seals protected content
        if tree == base.tree.id:
            raise InvalidRequestError("invalid_argument", "nothing staged")
        signature = pygit2.Signature(author_name, author_email, int(time), 0)
        envelope = None
        if seal is not None:
            who = {"name": author_name, "email": author_email, "time": int(time), "offset": 0}
            envelope = seal(_facts(repo, base, tree, work, message, who))
            digest = hashlib.sha256(envelope).hexdigest()
            message = f"{message}Chit-Provenance: sha256:{digest}\n"
        new = repo.create_commit(None, signature, signature, message, tree, [base.id])
        main = main_head(repo).id
        if envelope is not None:
            store_record(handle, update, agent, new, envelope, int(time))

        def expected(current: pygit2.Oid | None) -> bool:
            if current is not None:
                return current == base.id
            return base.id == main or repo.descendant_of(main, base.id)

        update(repo, ref, new, expected, "chit: commit")
    staged.changes = {}
    staged.modes = {}
    staged.conflicts = {}
    staged.conflict_modes = {}
    staged.base = new
    return new
