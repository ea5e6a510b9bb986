"""Landing a staged change: building its tree (sealing protected blobs) and the commit.

The lane moves by compare and swap while its writer locks are held; objects
are written before the reference moves, so an interrupted commit leaves at
most unreachable objects (docs/architecture.md, "Sessions and lanes";
docs/provenance-format.md for the record a commit can carry). With a remote,
the commit is pushed before the lane moves (engine/git/replica.py).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from typing import Any

import pygit2
from pygit2.enums import FileMode

from engine.auth.sealing import Sealing
from engine.errors import InvalidRequestError, RepositoryError
from engine.git.base import base_head
from engine.git.handle import Handle, reference, tree_entry
from engine.git.merge import merge_onto_lane
from engine.git.notes import NOTES_REF, note_commit
from engine.git.refs import CasUpdate, RefLocks, equals, lane_ref, ref_target
from engine.git.remote import PushOutcome, PushResult, RemoteError
from engine.git.replica import Replica
from engine.git.store import provenance_ref, record_commit
from engine.git.views import MODE_FILE, MODE_SYMLINK, StagedChange
from engine.limits import LIMITS

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
    attest: Callable[[str, bytes], bytes] | None = None,
    replica: Replica | None = None,
) -> pygit2.Oid:
    """Land the staged change as one commit on the agent's lane.

    The new commit's tree is ``staged.base``'s tree plus the staged change
    and its parent is ``staged.base``. The lane is updated by compare and
    swap under git's reference lock, holding the lane's writer lock (this
    process's and every chit process's, see :meth:`RefLocks.hold`): it must
    still point at ``staged.base`` or, when the lane does not exist yet,
    ``staged.base`` must be the base branch's head or one of its ancestors
    (a new lane never appears over a concurrently created one). Otherwise the
    commit is refused with ``conflict``, unless ``merge`` first moved the
    change onto the lane head. The base branch is never written.

    With a ``replica`` (the repository has a remote), a new lane first fetches
    the remote's base, and the commit and its provenance record are pushed,
    with the stores, in one atomic fast-forward push before the local
    references move. If the remote refuses because its lane moved (another
    host committed), the lane is fetched, the change merged onto it and the
    commit made and pushed again, up to ``LIMITS.remote_push_attempts`` times.
    If the push fails otherwise (the remote is down, refuses, times out), the
    commit lands locally anyway and the replica retries it in the background.

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
        attest: With ``seal``, makes the commit's attestation: called with
            the new commit's id and its envelope, it returns one JSON line,
            added to the commit's note under
            :data:`~engine.git.notes.NOTES_REF` before the lane moves (and
            pushed with it), holding that reference's writer lock.
        replica: The repository's remote, if it has one.

    Returns:
        The new commit's id.

    Raises:
        InvalidRequestError: ``invalid_argument`` if nothing is staged or
            the message is empty or holds NUL.
        RepositoryError: ``conflict`` if the lane moved or is locked by a
            concurrent update, or kept moving on the remote; the lane and
            ``staged`` are unchanged.
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
    signature = pygit2.Signature(author_name, author_email, int(time), 0)
    who = {"name": author_name, "email": author_email, "time": int(time), "offset": 0}
    with locks.hold(ref):
        if replica is not None and merge and reference(handle.repo, ref) is None:
            replica.fetch_base()  # a new lane starts from the remote's base as it is now
        attempts = 1 if replica is None else LIMITS.remote_push_attempts
        for attempt in range(attempts):
            landed = _land(handle, locks, update, agent, staged, message, signature, who,
                           merge=merge, seal=seal, attest=attest, replica=replica)
            if landed is not None:
                break
            if replica is None:  # unreachable: only a replica refuses a landing
                raise RepositoryError("conflict", "the lane moved")
            try:
                replica.catch_up(agent)
            except RemoteError:
                raise _moved_on_remote() from None
            if attempt + 1 == attempts:
                raise _moved_on_remote()
        else:  # pragma: no cover - the loop always breaks or raises
            raise _moved_on_remote()
    staged.changes = {}
    staged.modes = {}
    staged.conflicts = {}
    staged.conflict_modes = {}
    staged.base = landed
    return landed


def _moved_on_remote() -> RepositoryError:
    return RepositoryError(
        "conflict",
        "the lane keeps moving on the remote (other engines commit to it); nothing was "
        "committed: commit again",
    )


def _land(
    handle: Handle,
    locks: RefLocks,
    update: CasUpdate,
    agent: str,
    staged: StagedChange,
    message: str,
    signature: pygit2.Signature,
    who: dict[str, Any],
    *,
    merge: bool,
    seal: Callable[[dict[str, Any]], bytes] | None,
    attest: Callable[[str, bytes], bytes] | None,
    replica: Replica | None,
) -> pygit2.Oid | None:
    """Make the commit and move the lane (lane lock held); ``None`` if the remote's lane moved.

    Raises:
        As :func:`commit`.
    """
    repo = handle.repo
    ref = lane_ref(agent)
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
    envelope = None
    full = message
    if seal is not None:
        envelope = seal(_facts(repo, base, tree, work, message, who))
        digest = hashlib.sha256(envelope).hexdigest()
        full = f"{message}Chit-Provenance: sha256:{digest}\n"
    new = repo.create_commit(None, signature, signature, full, tree, [base.id])
    main = base_head(handle).id
    record = None
    if envelope is not None:
        record = record_commit(handle, agent, new, envelope, int(who["time"]))
    line = None if envelope is None or attest is None else attest(str(new), envelope)

    def expected(current: pygit2.Oid | None) -> bool:
        if current is not None:
            return current == base.id
        return base.id == main or repo.descendant_of(main, base.id)

    with contextlib.ExitStack() as held:
        noted = None
        if line is not None:
            # The notes reference is every lane's: held from reading it to moving it.
            held.enter_context(locks.hold(NOTES_REF))
            noted = note_commit(handle, new, line, int(who["time"]))
        pushed: PushResult | None = None
        if replica is not None:
            # Nothing reaches the remote that the local lane would then refuse.
            if not expected(ref_target(repo, ref)):
                raise RepositoryError(
                    "conflict", "the branch moved since this change was based on it")
            pushed = replica.push_lane(agent, new, None if record is None else record[1],
                                       notes=None if noted is None else noted[1])
            if pushed.outcome is PushOutcome.MOVED:
                return None
        if record is not None:
            current, record_id = record
            update(repo, provenance_ref(agent), record_id, equals(current), "chit: provenance")
        if noted is not None:
            update(repo, NOTES_REF, noted[1], equals(noted[0]), "chit: attestation")
        update(repo, ref, new, expected, "chit: commit")
    if replica is not None and pushed is not None:
        replica.landed(agent, pushed)
    return new
