"""The :class:`Repository` facade: one object for the tools, audit and semantic index.

It composes the parts of engine/git, each module one concern (the handle,
references, views, reading, staging, history, merging, committing, chit's
store), and delegates every method to the function that documents its full
contract there. docs/architecture.md ("Version control") says what the whole
does and guarantees.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pygit2

from engine.auth.sealing import NO_SEALING, Sealing
from engine.errors import ConfigurationError, RepositoryError
from engine.git import (
    ancestry,
    commit,
    history,
    listing,
    merge,
    notes,
    reading,
    refs,
    saved,
    staging,
    store,
)
from engine.git.base import base_head, base_ref, default_base, tracking_ref
from engine.git.handle import Handle
from engine.git.names import NOTES_REF
from engine.git.replica import Replica
from engine.git.transport import RemoteURL
from engine.git.views import StagedChange

__all__ = ["Repository"]


class Repository:
    """A git repository worked on in object space, shared by every session.

    It never touches a working tree or the index file, never writes its base
    branch, never opens a host path built from agent input and never hands an
    agent's string to git as an option or revision syntax. Thread-safe: each
    thread gets its own libgit2 handle, and reference updates are serialised
    per reference across threads and processes (:class:`~engine.git.refs.RefLocks`),
    each a compare-and-swap under git's own reference lock, so a writer
    outside chit is still detected.

    Args:
        path: The repository's git directory or working directory (operator
            configuration, not agent input). No upward search is done.
        base: The base branch lanes start from and are compared with
            (``master``, ``trunk``, or ``refs/heads/...``); default the branch
            the repository's ``HEAD`` names (a linked worktree's repository:
            the main worktree's).
        remote: The organisation's remote (any URL git accepts for fetch and
            push); each lane commit is pushed there with its provenance
            (engine/git/replica.py). ``None``: nothing leaves the repository.
        pushed_stores: chit store references every lane commit may depend on
            (the catalogs), pushed with each one when there is a remote; the
            attestation notes (``refs/notes/chit``) always are.
        sealing: Seals protected content on commit and opens sealed blobs on
            read (``engine.auth.sealing``); without it nothing is sealed and a
            sealed blob never opens (``seal_invalid``), as for an auditor.
        shared_lock: A lock held by every engine sharing the state store
            (:meth:`engine.state.Store.lane_lock`: a PostgreSQL advisory lock,
            or ``None`` on SQLite), taken by reference name before the file
            lock of each reference update.

    Raises:
        ConfigurationError: If ``path`` is not a git repository, ``base`` is
            not a branch name (or, by default, ``HEAD`` names no branch), the
            base branch has no commit (locally, or on the remote after a
            fetch), or ``remote`` is not an acceptable URL.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        base: str | None = None,
        remote: str | None = None,
        pushed_stores: Sequence[str] = (),
        sealing: Sealing | None = None,
        shared_lock: refs.SharedLock | None = None,
    ) -> None:
        self._handle = Handle(path, NO_SEALING if sealing is None else sealing)
        self._root: str | None = None
        self._ref_locks = refs.RefLocks(self._handle.chit_dir, shared=shared_lock)
        self._handle.base_ref = (
            default_base(self._handle.commondir) if base is None else base_ref(base)
        )
        self._replica: Replica | None = None
        # Whose the stores it creates are (docs/vital-signs.md): set by the engine.
        self.store_owner: Callable[[], bytes | None] | None = None
        if remote is not None:
            url = RemoteURL(remote)
            self._handle.upstream_ref = tracking_ref(self._handle.base_ref)
            self._replica = Replica(
                self._handle, self._ref_locks, self._cas_update, url,
                # The notes first: a commit holds their lock before the others'
                # (engine/git/commit.py), and every push takes them in this order.
                stores=(NOTES_REF, *pushed_stores),
            )
        try:
            base_head(self._handle)
        except RepositoryError:
            if self._replica is None or not self._replica.fetch_base():
                raise ConfigurationError(
                    f"the repository has no {self.base} branch with a commit"
                ) from None
            base_head(self._handle)

    def close(self) -> None:
        """Stop pushing in the background (lanes not yet pushed are found again at the next start).

        The background starts with :meth:`Replica.start` (``repo.remote.start()``),
        as an engine does; an operator's command that only reads does not.
        """
        if self._replica is not None:
            self._replica.close()

    @property
    def base(self) -> str:
        """The base branch's name (``master``)."""
        return self._handle.base_ref.removeprefix("refs/heads/")

    @property
    def remote(self) -> Replica | None:
        """The repository's remote, kept level with its lanes; ``None`` without one."""
        return self._replica

    def base_head(self) -> pygit2.Commit:
        """The base branch's head as the engine sees it (with a remote: the remote's, fetched)."""
        return base_head(self._handle)

    def history_root(self) -> str | None:
        """The root commit (hex) of the base branch's first-parent history.

        Part of the repository's identity (docs/vital-signs.md): a fork shares
        it, another repository does not. Walks the first parents once; cached.

        Returns:
            The root's id, or ``None`` when the base branch has no commit.
        """
        if self._root is None:
            try:
                commit = self.base_head()
            except RepositoryError:
                return None
            while commit.parent_ids:
                commit = self._handle.commit(commit.parent_ids[0])
            self._root = str(commit.id)
        return self._root

    def remote_report(self, agent: str | None = None) -> dict[str, Any] | None:
        """Where the remote stands (:meth:`Replica.report`); ``None`` without a remote."""
        return None if self._replica is None else self._replica.report(agent)

    @staticmethod
    def _cas_update(
        repo: pygit2.Repository,
        ref: str,
        new: pygit2.Oid,
        expected: Callable[[pygit2.Oid | None], bool],
        reflog: str,
    ) -> None:
        """Move a reference by compare and swap (:func:`~engine.git.refs.cas_update`).

        Every reference this repository writes (lanes, provenance records, the
        store) moves through this one method, which the writing parts are
        handed, so a subclass sees each update (the crash tests inject faults
        here).
        """
        refs.cas_update(repo, ref, new, expected, reflog)

    # -- refs and revisions -------------------------------------------------

    def head_for(self, agent: str) -> pygit2.Commit:
        """Return the commit an agent's fresh session starts from."""
        return refs.head_for(self._handle, agent)

    def resolve(self, rev: str) -> pygit2.Commit:
        """Resolve an agent's revision, accepting no revision syntax."""
        return refs.resolve(self._handle, rev)

    def lanes(self) -> list[str]:
        """Return the names of agents that have a lane, sorted."""
        return refs.lanes(self._handle)

    def lane_exists(self, agent: str) -> bool:
        """True iff ``refs/heads/agent/<agent>`` exists."""
        return refs.lane_exists(self._handle, agent)

    def foreign_lane_refs(self) -> list[str]:
        """Return refs under ``refs/heads/agent/`` that name no valid lane, sorted."""
        return refs.foreign_lane_refs(self._handle)

    def lane_commits(self, agent: str, since: str | None = None) -> list[pygit2.Commit]:
        """Return the lane's commits that the base branch does not have."""
        return history.lane_commits(self._handle, agent, since)

    def range_commits(self, since: str, until: str, limit: int) -> list[pygit2.Commit]:
        """The commits of ``since..until``, newest first (:func:`history.range_commits`)."""
        return history.range_commits(self._handle, since, until, limit)

    # -- reading ------------------------------------------------------------

    @property
    def chit_dir(self) -> str:
        """``<common git dir>/chit``: chit's files shared by every engine on this repository.

        The lane lock files live under it (``locks/``), and the persisted
        semantic index (``semantic.db``, engine/semantic/persist.py). It may not
        exist yet.
        """
        return self._handle.chit_dir

    def protects(self, path: str) -> bool:
        """Whether the current policy protects ``path`` (its content is sealed on commit)."""
        return self._handle.sealing.protects(path)

    def view_read(self, agent: str, staged: StagedChange | None, path: str) -> bytes:
        """Read a file as the session sees it."""
        return reading.view_read(self._handle, agent, staged, path)

    def view_files(
        self, agent: str, staged: StagedChange | None, *, limit: int = 100_000
    ) -> tuple[str, dict[str, str], Callable[[str], bytes | None]]:
        """List a view's regular files and bind a reader to it."""
        return reading.view_files(self._handle, agent, staged, limit=limit)

    def walk_view(
        self,
        agent: str,
        staged: StagedChange | None,
        *,
        enter: Callable[[str], bool],
        after: str | None = None,
    ) -> tuple[Iterator[listing.ViewEntry], Callable[[str], bytes | None]]:
        """Walk a session's view in path order and bind a reader to it."""
        return listing.walk_view(self._handle, agent, staged, enter=enter, after=after)

    def read_at(self, rev: str, path: str) -> bytes:
        """Read a file at a revision given by an agent."""
        return reading.read_at(self._handle, rev, path)

    def exists(self, agent: str, staged: StagedChange | None, path: str) -> bool:
        """Whether a file or symlink entry exists in the session's view."""
        return reading.exists(self._handle, agent, staged, path)

    # -- staging ------------------------------------------------------------

    def stage_write(self, agent: str, staged: StagedChange, path: str, data: bytes) -> None:
        """Stage a file's new content."""
        staging.stage_write(self._handle, agent, staged, path, data)

    def stage_delete(self, agent: str, staged: StagedChange, path: str) -> None:
        """Stage the deletion of a file or symlink entry."""
        staging.stage_delete(self._handle, agent, staged, path)

    def stage_move(self, agent: str, staged: StagedChange, source: str, destination: str) -> None:
        """Stage a move, keeping content and mode."""
        staging.stage_move(self._handle, agent, staged, source, destination)

    # -- reporting ----------------------------------------------------------

    def status(self, agent: str, staged: StagedChange | None) -> dict[str, Any]:
        """Summarise the agent's lane and the staged change."""
        return staging.status(self._handle, agent, staged)

    def log(
        self,
        rev: str | None,
        agent: str,
        path: str | None,
        limit: int,
        visible: Callable[[str], bool],
    ) -> dict[str, Any]:
        """List commits, pruning what the caller cannot see."""
        return history.log(self._handle, rev, agent, path, limit, visible)

    def diff(
        self,
        agent: str,
        staged: StagedChange | None,
        rev: str | None,
        path: str | None,
        visible: Callable[[str], bool],
    ) -> dict[str, Any]:
        """Show what differs, file by file, with unified patches."""
        return history.diff(self._handle, agent, staged, rev, path, visible)

    # -- writing ------------------------------------------------------------

    def commit(
        self,
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
    ) -> pygit2.Oid:
        """Land the staged change as one commit on the agent's lane (:func:`commit.commit`)."""
        return commit.commit(
            self._handle,
            self._ref_locks,
            self._cas_update,
            agent,
            staged,
            message,
            author_name=author_name,
            author_email=author_email,
            time=time,
            merge=merge,
            seal=seal,
            attest=attest,
            replica=self._replica,
        )

    @staticmethod
    def provenance_ref(agent: str) -> str:
        """The reference of ``agent``'s provenance records."""
        return store.provenance_ref(agent)

    def read_raw(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        """An object's type and raw bytes, as stored."""
        return self._handle.read_raw(oid)

    def provenance_record(self, agent: str, commit: str) -> bytes | None:
        """The stored envelope for a lane commit, or ``None``."""
        return store.provenance_record(self._handle, agent, commit)

    def attestation_note(self, commit: str) -> bytes | None:
        """A commit's note under ``refs/notes/chit`` (:func:`notes.read_note`), or ``None``."""
        return notes.read_note(self._handle, commit)
    # -- what reached the base (the audit of merged work) ---------------------

    def base_history(
        self, since: str | None, limit: int
    ) -> tuple[list[ancestry.BaseCommit], bool]:
        """The base's commits since ``since``, each with the merge that brought it."""
        return ancestry.base_history(self._handle, since, limit)

    def find_commit(self, commit: str) -> pygit2.Commit | None:
        """Any commit in the object database by full hex id, or ``None``."""
        return ancestry.find_commit(self._handle, commit)

    def walk_between(
        self, head: pygit2.Oid, hide: list[pygit2.Oid], limit: int
    ) -> tuple[list[pygit2.Commit], bool]:
        """Commits reachable from ``head`` and not from ``hide``, newest first."""
        return ancestry.walk_between(self._handle, head, hide, limit)

    def change_of(
        self, old: pygit2.Oid | None, new: pygit2.Oid
    ) -> dict[str, tuple[str, int] | None]:
        """Path to ``(blob, mode)`` or ``None`` for what differs between two commits."""
        return ancestry.change_of(self._handle, old, new)

    def merge_base(self, one: pygit2.Oid, two: pygit2.Oid) -> pygit2.Oid | None:
        """The best common ancestor of two commits, or ``None``."""
        return ancestry.merge_base(self._handle, one, two)

    def provenance_agents(self) -> list[str]:
        """Agents with a provenance reference, sorted."""
        return ancestry.provenance_agents(self._handle)

    def provenance_entries(self, agent: str) -> Iterator[tuple[str, bytes]]:
        """Every ``(commit id, envelope)`` in an agent's provenance store (untrusted)."""
        return ancestry.provenance_entries(self._handle, agent)

    # -- merging ------------------------------------------------------------

    def staged_paths_changed_on_lane(self, agent: str, staged: StagedChange) -> list[str]:
        """Staged paths changed on the lane since the base."""
        return merge.staged_paths_changed_on_lane(self._handle, agent, staged)

    def merge_onto_lane(self, agent: str, staged: StagedChange) -> bool:
        """Three-way merge the staged change onto a moved lane."""
        return merge.merge_onto_lane(self._handle, agent, staged)

    def conflicts_with_base(
        self, agent: str, visible: Callable[[str], bool] | None = None
    ) -> list[dict[str, Any]]:
        """Paths where merging the lane into the base branch would conflict."""
        return merge.conflicts_with_base(self._handle, agent, visible)

    def rebase_if_clean(self, agent: str, staged: StagedChange) -> bool:
        """Move the staged change onto the lane head if that is clean."""
        return merge.rebase_if_clean(self._handle, agent, staged)

    # -- content-addressed store --------------------------------------------

    def put_blob_in_store(
        self, store_ref: str, name: str, data: bytes, *, now: int | None = None
    ) -> pygit2.Oid:
        """Keep ``data`` under ``name`` in a content-addressed store.

        A store this creates records :attr:`store_owner`'s record, if set.
        """
        return store.put_blob_in_store(
            self._handle, self._ref_locks, self._cas_update, store_ref, name, data, now=now,
            owner=self.store_owner,
        )

    def recorded_store_owner(self, store_ref: str) -> bytes | None:
        """The record of whose a ``refs/chit/*`` store is (untrusted), or ``None``.

        Raises:
            ValueError: If ``store_ref`` is not under ``refs/chit/`` (a caller bug).
        """
        if not store_ref.startswith(refs.STORE_PREFIX):
            raise ValueError("not a chit store reference")
        return store.store_owner(self._handle, store_ref)

    def store_head(self, store_ref: str) -> pygit2.Oid | None:
        """The commit a ``refs/chit/*`` reference (or ``refs/notes/chit``) points at.

        Returns:
            The commit id; ``None`` if the reference is absent or not direct.

        Raises:
            ValueError: If ``store_ref`` is neither under ``refs/chit/`` nor
                ``refs/notes/chit`` (a caller bug).
        """
        if store_ref != NOTES_REF and not store_ref.startswith(refs.STORE_PREFIX):
            raise ValueError("not a chit store reference")
        try:
            return refs.ref_target(self._handle.repo, store_ref)
        except RepositoryError:
            return None

    def get_blob_from_store(self, store_ref: str, name: str) -> bytes | None:
        """Return the bytes stored under ``name``, or ``None``."""
        return store.get_blob_from_store(self._handle, store_ref, name)

    # -- saved sessions (refs/chit/sessions/<session>) ----------------------

    def save_session(
        self,
        session_id: str,
        owner: saved.Owner,
        staged: StagedChange,
        *,
        expected: pygit2.Oid | None,
        now: int,
        cache: saved.SaveCache,
    ) -> pygit2.Oid | None:
        """Save a session's staged change (or drop its reference when nothing is staged)."""
        return saved.save_session(
            self._handle, session_id, owner, staged, expected=expected, now=now, cache=cache
        )

    def saved_session(self, session_id: str) -> saved.SavedSession | None:
        """Read a saved session's record, opening no content."""
        return saved.peek_session(self._handle, session_id)

    def restore_session(self, record: saved.SavedSession) -> StagedChange:
        """The staged change a saved session holds, sealed blobs opened."""
        return saved.restore_session(self._handle, record)

    def saved_session_commit(self, session_id: str) -> pygit2.Oid | None:
        """The commit a session's reference points at now, or ``None``."""
        return saved.current_commit(self._handle, session_id)

    def drop_saved_session(self, session_id: str, expected: pygit2.Oid) -> None:
        """Delete a session's reference iff it still points at ``expected``."""
        saved.drop_session(self._handle, session_id, expected)

    def saved_sessions(self) -> dict[str, pygit2.Oid]:
        """Every saved session's id and commit."""
        return saved.saved_sessions(self._handle)
