"""References: names, the base branch, writer locks, compare-and-swap, revisions, lanes.

chit reads the repository's base branch (``main``, ``master``, ``trunk``: its
``HEAD`` branch unless configured) and never writes it; it writes only lanes
(``refs/heads/agent/<name>``) and its own store (``refs/chit/*``), each update a
compare-and-swap under the reference's locks (docs/architecture.md, "Version
control"). Revisions an agent gives are branch names or hex ids, never git's
revision syntax.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import pygit2

from engine.errors import InvalidRequestError, RepositoryError
from engine.git.base import base_head
from engine.git.handle import Handle, common_dir, private_folder, reference
from engine.git.lockfiles import remove_stale_ref_lock
from engine.git.names import (
    AGENT_NAME,
    BRANCH_NAME,
    HEX_PREFIX,
    LANE_PREFIX,
    MAIN,
    NOTES_REF,
    STORE_PREFIX,
    UPSTREAM_PREFIX,
)
from engine.git.reach import is_visible_commit
from engine.limits import LIMITS

__all__ = [
    "LANE_PREFIX",
    "MAIN",
    "NOTES_REF",
    "STORE_PREFIX",
    "UPSTREAM_PREFIX",
    "CasUpdate",
    "RefLocks",
    "SharedLock",
    "cas_update",
    "equals",
    "foreign_lane_refs",
    "head_for",
    "lane_exists",
    "lane_ref",
    "lanes",
    "ref_target",
    "resolve",
]

CasUpdate = Callable[
    [pygit2.Repository, str, pygit2.Oid, Callable[[pygit2.Oid | None], bool], str], None
]
"""The signature of :func:`cas_update`, which the writing parts are handed."""


def lane_ref(agent: str) -> str:
    """Return the full reference name of an agent's lane.

    Args:
        agent: The agent name, already validated by the caller (one reference
            component: letters, digits, ``._-``).

    Returns:
        ``"refs/heads/agent/<agent>"``.

    Raises:
        ValueError: If ``agent`` is not a single valid reference component (a
            caller bug; agents never reach this unvalidated).
    """
    ref = LANE_PREFIX + agent
    if not AGENT_NAME.fullmatch(agent) or not pygit2.reference_is_valid_name(ref):
        raise ValueError("agent name is not a valid lane component")
    return ref


def ref_target(repo: pygit2.Repository, ref: str) -> pygit2.Oid | None:
    """Return the id ``ref`` points at, or ``None`` if it does not exist.

    Raises:
        RepositoryError: ``conflict`` if ``ref`` is a symbolic reference.
    """
    found = reference(repo, ref)
    if found is None:
        return None
    target = found.target
    if not isinstance(target, pygit2.Oid):
        raise RepositoryError("conflict", "the reference is not a direct reference")
    return target


def equals(expected: pygit2.Oid | None) -> Callable[[pygit2.Oid | None], bool]:
    """Return a compare-and-swap predicate accepting exactly ``expected``."""
    return lambda current: current == expected


def cas_update(
    repo: pygit2.Repository,
    ref: str,
    new: pygit2.Oid,
    expected: Callable[[pygit2.Oid | None], bool],
    reflog: str,
) -> None:
    """Point ``ref`` at ``new`` iff ``expected(current)`` holds under git's ref lock.

    The caller holds ``ref``'s writer locks (:meth:`RefLocks.hold`; for a
    provenance reference, its lane's). If git cannot lock ``ref`` because its
    ``.lock`` file exists and is at least ``LIMITS.stale_ref_lock_seconds``
    old, the file was left by a writer that died: it is removed (with a
    warning naming the reference) and the update is tried once more
    (:func:`~engine.git.lockfiles.remove_stale_ref_lock`). A younger one is a
    live writer outside chit, and answers ``conflict``.

    Args:
        repo: This thread's pygit2 repository (:attr:`Handle.repo`).
        ref: A reference under ``refs/heads/agent/`` or ``refs/chit/``.
        new: The id to point it at.
        expected: Whether the reference's current target (``None``: absent)
            is the one this update was computed from.
        reflog: The reflog message.

    Raises:
        ValueError: If ``ref`` is outside lanes, the store and
            :data:`NOTES_REF`, or a copy of a
            remote's reference (a caller bug): the base branch is never written.
        RepositoryError: ``conflict`` if the current target is not the
            expected one or the reference is locked by someone else.
    """
    ours = ref == NOTES_REF or ref.startswith((LANE_PREFIX, STORE_PREFIX))
    if not ours or ref.startswith(UPSTREAM_PREFIX):
        raise ValueError("refusing to update a reference outside lanes and the chit store")
    try:
        _swap(repo, ref, new, expected, reflog)
        return
    except pygit2.GitError as exc:
        if not remove_stale_ref_lock(common_dir(repo.path), ref):
            raise _locked() from exc
    try:
        _swap(repo, ref, new, expected, reflog)
    except pygit2.GitError as exc:
        raise _locked() from exc


def _swap(
    repo: pygit2.Repository,
    ref: str,
    new: pygit2.Oid,
    expected: Callable[[pygit2.Oid | None], bool],
    reflog: str,
) -> None:
    """One compare-and-swap in a reference transaction (``pygit2.GitError`` if locked)."""
    with repo.transaction() as txn:
        txn.lock_ref(ref)
        if not expected(ref_target(repo, ref)):
            raise RepositoryError("conflict", "the branch moved since this change was based on it")
        txn.set_target(ref, new, message=reflog)


def _locked() -> RepositoryError:
    return RepositoryError(
        "conflict",
        "the branch is locked by another update; retry in a few seconds (a lock left "
        f"by a writer that died is cleared once it is {LIMITS.stale_ref_lock_seconds:g} s old)",
    )


SharedLock = Callable[[str], AbstractContextManager[None] | None]
"""Gives the lock every engine on a state store holds for a name, or ``None`` if there is none."""


class RefLocks:
    """The writer locks of a repository's references, per reference.

    A writer holds this process's :class:`threading.Lock` for the reference,
    then, when engines on several hosts share the state store, the store's
    lock on the reference name (a PostgreSQL advisory lock keyed on the name
    alone, so hosts that mount the repository at different paths take the
    same lock, and one lane name serialises across the repositories of one
    store), then an exclusive ``flock`` on ``<chit dir>/locks/<sha256 of the
    ref name>.flock``, shared by every chit process on the repository (the
    same file from every linked worktree; the kernel releases it when a writer
    dies). The compare-and-swap itself then runs holding git's own reference
    lock file (:func:`cas_update`), so a writer outside chit is still detected,
    and a lock file a killed writer left is removed once it is stale.

    Args:
        chit_dir: ``<common git dir>/chit`` (:attr:`Handle.chit_dir`).
        shared: The state store's lock by name (:data:`SharedLock`), if any.
    """

    def __init__(self, chit_dir: str, *, shared: SharedLock | None = None) -> None:
        self._chit_dir = chit_dir
        self._shared = shared
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._lock_folder_checked = False

    @contextmanager
    def hold(self, ref: str) -> Iterator[None]:
        """Hold ``ref``'s writer lock: this process's, then every chit process's.

        The cross-process lock is a blocking ``flock(LOCK_EX)`` on a lock file
        named by the SHA-256 of the reference name under ``<git dir>/chit/locks``
        (created 0600 on first use). It waits with the interpreter lock released,
        and the kernel drops it when its holder exits, so a killed engine never
        leaves a lane locked.

        Raises:
            RepositoryError: ``internal_error`` if the lock file cannot be opened.
        """
        with self._locks_guard:
            lock = self._locks.setdefault(ref, threading.Lock())
        with lock, self._shared_lock(ref):
            fd = self._open_lock_file(ref)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock

    def _shared_lock(self, ref: str) -> AbstractContextManager[None]:
        """The state store's lock on ``ref``, or nothing to hold.

        Keyed on the reference name alone: no local path goes into it, so every
        host takes the same lock wherever it mounts the shared repository.
        """
        held = None
        if self._shared is not None:
            held = self._shared(ref)
        return held if held is not None else nullcontext()

    def _open_lock_file(self, ref: str) -> int:
        folder = os.path.join(self._chit_dir, "locks")
        path = os.path.join(folder, hashlib.sha256(ref.encode()).hexdigest() + ".flock")
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            if not self._lock_folder_checked:
                private_folder(self._chit_dir)
                private_folder(folder)
                self._lock_folder_checked = True
            return os.open(path, flags, 0o600)
        except OSError as exc:
            raise RepositoryError("internal_error", "cannot open the lane's lock file") from exc


def head_for(handle: Handle, agent: str) -> pygit2.Commit:
    """Return the commit an agent's fresh session starts from.

    Args:
        handle: The repository.
        agent: A validated agent name.

    Returns:
        The head of ``refs/heads/agent/<agent>`` if the lane exists, else
        the base's (:func:`base_head`).

    Raises:
        RepositoryError: ``not_found`` if the base branch has disappeared.
    """
    repo = handle.repo
    found = reference(repo, lane_ref(agent))
    if found is not None:
        try:
            return found.peel(pygit2.Commit)
        except (pygit2.GitError, KeyError, ValueError):
            raise RepositoryError("not_found", "the lane does not point at a commit") from None
    return base_head(handle)


def resolve(handle: Handle, rev: str) -> pygit2.Commit:
    """Resolve a revision given by an agent, accepting no revision syntax.

    Accepted forms: a branch short name (``master``, ``agent/x``), a full
    ``refs/heads/...`` name, or a 7 to 40 digit hex commit id prefix of a
    commit the base or a branch reaches (:func:`~engine.git.reach.is_visible_commit`). A
    branch wins over a hex prefix that spells the same name, as in git. The
    base branch's name gives the base as the engine sees it
    (:func:`base_head`: with a remote, the remote's base as last fetched);
    ``main`` is an ordinary branch name, the base only where it is the base.

    Args:
        handle: The repository.
        rev: The agent's string.

    Returns:
        The commit it names (an annotated tag object is peeled).

    Raises:
        InvalidRequestError: ``invalid_argument`` for anything else
            (options such as ``-x``, ranges ``a..b``, ``@{...}``, ``^``,
            ``~``, ``:``, whitespace, NUL) or an ambiguous hex prefix.
        RepositoryError: ``not_found`` if the name or id names no commit, or
            a commit no branch reaches (chit's own records): the same answer.
    """
    if not isinstance(rev, str):
        raise InvalidRequestError("invalid_argument", "revision must be a string")
    full = rev if rev.startswith("refs/heads/") else "refs/heads/" + rev
    is_branch = (
        BRANCH_NAME.fullmatch(rev) is not None
        and (rev.startswith("refs/heads/") or not rev.startswith("refs/"))
        and pygit2.reference_is_valid_name(full)
    )
    is_hex = HEX_PREFIX.fullmatch(rev) is not None
    if not (is_branch or is_hex):
        raise InvalidRequestError(
            "invalid_argument", "revision must be a branch name or a hex commit id"
        )
    repo = handle.repo
    if is_branch and full == handle.base_ref:
        return base_head(handle)
    if is_branch:
        # Found by listing, not by a lookup with the agent's string (see
        # engine.git.handle.reference): a revision is an occasional log or diff
        # argument.
        found = next((r for r in repo.references.iterator() if r.name == full), None)
        if found is not None:
            try:
                return found.peel(pygit2.Commit)
            except (pygit2.GitError, KeyError, ValueError):
                raise RepositoryError("not_found", "revision not found") from None
    if is_hex:
        try:
            obj = repo.get(rev.lower())
        except pygit2.AmbiguousError:
            raise InvalidRequestError("invalid_argument", "commit id prefix is ambiguous") from None
        except (pygit2.GitError, ValueError):
            obj = None
        if obj is not None:
            try:
                commit = obj.peel(pygit2.Commit)
            except (pygit2.GitError, KeyError, ValueError):
                commit = None
            # chit's own records (refs/chit/*) share the object database: an id
            # no branch reaches is answered as one that does not exist.
            if commit is not None and is_visible_commit(handle, commit.id):
                return commit
    raise RepositoryError("not_found", "revision not found")


def lanes(handle: Handle) -> list[str]:
    """Return the names of agents that have a lane, sorted.

    Args:
        handle: The repository.

    Returns:
        Each ``<agent>`` with a ``refs/heads/agent/<agent>`` reference
        (nested names that :func:`lane_ref` would refuse are left out).
    """
    names = []
    for ref in handle.repo.references:
        if ref.startswith(LANE_PREFIX):
            agent = ref[len(LANE_PREFIX) :]
            if AGENT_NAME.fullmatch(agent):
                names.append(agent)
    return sorted(names)


def lane_exists(handle: Handle, agent: str) -> bool:
    """True iff ``refs/heads/agent/<agent>`` exists."""
    return reference(handle.repo, lane_ref(agent)) is not None


def foreign_lane_refs(handle: Handle) -> list[str]:
    """Return refs under ``refs/heads/agent/`` that name no valid lane, sorted.

    chit never creates them (agent names are single, validated components),
    so an auditor treats each one as a finding.
    """
    return sorted(
        ref
        for ref in handle.repo.references
        if ref.startswith(LANE_PREFIX) and not AGENT_NAME.fullmatch(ref[len(LANE_PREFIX) :])
    )
