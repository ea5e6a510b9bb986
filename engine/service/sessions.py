"""The engine's sessions: bound to a token identity, saved in git as they change, resumable.

A session holds one staged change. It is bound to the identity (token id and
agent) that opened it; every call that changes its staged change saves it under
``refs/chit/sessions/<session>`` before the call is answered, so a new
connection (a restarted engine, another worker, a new edge process) presenting
the same identity resumes it, and any other identity gets
``session_token_mismatch`` (docs/engine-api.md, "Sessions that survive"). In
memory at most ``LIMITS.open_sessions`` are kept; the least recently used idle
ones are forgotten first (their work stays saved). A worker among several places
each session it opens in the shared store (``placement``) and lets it go when it
forgets it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pygit2

from engine import git
from engine.auth.verify import VerifiedToken
from engine.errors import AccessDeniedError, RepositoryError, StateError
from engine.limits import LIMITS
from engine.paths import validate_session_id
from engine.service.placement import Placement
from engine.tools.context import Session

__all__ = ["Sessions", "check_session_id"]

logger = logging.getLogger("chit.engine")

_MISMATCH = "this session belongs to another token"


def check_session_id(session_id: object) -> None:
    """Refuse a session id that cannot name a reference (:func:`engine.paths.is_session_id`).

    It lands in a reference name, commit trailers and the call log: no
    newlines, separators, ``..`` or tricks.

    Raises:
        InvalidRequestError: ``invalid_argument`` if it is not a session id.
    """
    validate_session_id(session_id)


@dataclass(frozen=True)
class _Mark:
    """A staged change as it was before a call: its maps copied, the contents shared."""

    base: pygit2.Oid | None
    changes: dict[str, bytes | None]
    modes: dict[str, int]
    conflicts: dict[str, tuple[bytes | None, bytes | None, bytes | None]]
    conflict_modes: dict[str, tuple[int | None, int | None]]

    @classmethod
    def of(cls, staged: git.StagedChange) -> _Mark:
        return cls(staged.base, dict(staged.changes), dict(staged.modes),
                   dict(staged.conflicts), dict(staged.conflict_modes))

    def same_as(self, staged: git.StagedChange) -> bool:
        return (
            self.base == staged.base
            and self.changes == staged.changes
            and self.modes == staged.modes
            and self.conflicts == staged.conflicts
            and self.conflict_modes == staged.conflict_modes
        )


class Sessions:
    """The open sessions of one repository, safe to use from many threads.

    Args:
        repo: The repository whose ``refs/chit/sessions/`` hold the saved sessions.
    """

    def __init__(self, repo: git.Repository) -> None:
        self._repo = repo
        self._open: dict[str, Session] = {}  # least recently used first
        self._lock = threading.Lock()
        self._placement: Placement | None = None

    def place_with(self, placement: Placement) -> None:
        """Claim each session opened from now on in the store, and release each one forgotten."""
        with self._lock:
            self._placement = placement

    def __repr__(self) -> str:
        return f"Sessions({len(self._open)} open)"

    def bind(self, session_id: str, token: VerifiedToken) -> Session:
        """Return the session ``session_id``, resuming or opening it for ``token``.

        A session this engine does not hold in memory is read from its saved
        reference on first use: its record names the identity it belongs to,
        checked before any of its content is opened. Without a reference it
        opens empty, bound to ``token``'s identity.

        Args:
            session_id: A session id (see :func:`check_session_id`).
            token: The verified token of this call.

        Returns:
            The session, now the most recently used.

        Raises:
            InvalidRequestError: ``invalid_argument`` for an id that is not a session id.
            AccessDeniedError: ``limit_exceeded`` if ``LIMITS.open_sessions`` are open
                and every one is in a call.
            StateError: ``session_token_mismatch`` if another identity opened it
                (here or in the saved reference).
            RepositoryError: ``internal_error`` if its saved reference cannot be
                read; ``seal_invalid`` if a sealed staged file no longer opens.
            SessionElsewhere: With a placement, if another worker holds the session.
            StoreError: With a placement, if the store cannot be written.
        """
        check_session_id(session_id)
        with self._lock:
            session = self._open.pop(session_id, None)
            if session is None:
                if len(self._open) >= LIMITS.open_sessions:
                    self._evict_idle()
                if len(self._open) >= LIMITS.open_sessions:
                    raise AccessDeniedError("limit_exceeded", "too many open sessions")
                if self._placement is not None:
                    self._placement.claim(session_id)  # raises if another worker holds it
                session = Session(
                    session_id=session_id,
                    token_id=token.token_id,
                    agent=token.agent,
                    staged=git.StagedChange(),
                    expires_at=token.expires_at,
                )
            self._open[session_id] = session  # most recently used last
        if not session.restored:
            with session.lock:
                if not session.restored:
                    self._restore(session, token.token_id, token.agent)
        if session.token_id != token.token_id or session.agent != token.agent:
            raise StateError("session_token_mismatch", _MISMATCH)
        session.expires_at = max(session.expires_at, token.expires_at)
        return session

    def _restore(self, session: Session, token_id: str, agent: str) -> None:
        """Make ``session`` what its saved reference holds (nothing, if it has none).

        Called holding the session's lock. The record's identity replaces the
        session's before anything is opened; for a caller of another identity
        the content stays unopened (and the session unrestored) for its owner.
        """
        saved = self._repo.saved_session(session.session_id)
        session.staged = git.StagedChange()
        session.seen.clear()
        session.cache.clear()
        session.saved = None
        if saved is not None:
            owner = saved.owner
            session.token_id, session.agent = owner.token_id, owner.agent
            session.expires_at = owner.expires_at
            if (owner.token_id, owner.agent) != (token_id, agent):
                return
            session.staged = self._repo.restore_session(saved)
            session.saved = saved.commit
        session.restored = True

    def check_current(self, session: Session) -> None:
        """Before a call that may change the staged change: is it the saved one?

        Another engine (a second edge process resuming the same session, say)
        may have saved the session since this one last did; then the saved
        change is read back and the call refused, so nothing is built on a
        stale copy. Called holding the session's lock.

        Raises:
            RepositoryError: ``conflict`` if it was changed elsewhere (it has
                been read back); ``internal_error`` if its reference cannot be read.
        """
        if self._repo.saved_session_commit(session.session_id) == session.saved:
            return
        session.restored = False
        self._restore(session, session.token_id, session.agent)
        raise RepositoryError(
            "conflict",
            "this session's staged change was changed by another connection since your last "
            "call; it has been read again: check status, then retry",
        )

    @contextmanager
    def saving(
        self, session: Session, token: VerifiedToken, now: int, *, write: bool = True
    ) -> Iterator[None]:
        """Save the session's staged change if the calls inside changed it, refused or not.

        Used around a handler that may change the staged change, holding the
        session's lock. The save runs before the call is answered. If it fails,
        the session is marked to be read again from its reference on its next
        call (which undoes the unsaved change) and the call is refused, except
        when only the reference's removal failed (a commit already landed):
        then a warning is logged and the call's answer stands.

        Args:
            session: The session, its lock held.
            token: The call's verified token.
            now: Unix seconds.
            write: Whether the call may change the staged change (a read-only
                tool's call saves nothing and costs nothing).

        Raises:
            RepositoryError: ``conflict`` if another engine saved the session
                meanwhile; ``seal_invalid`` if a protected file cannot be sealed;
                ``internal_error`` if git refused the save.
        """
        if not write:
            yield
            return
        mark = _Mark.of(session.staged)
        try:
            yield
        finally:
            if not mark.same_as(session.staged):
                self._save(session, token, now)

    def _save(self, session: Session, token: VerifiedToken, now: int) -> None:
        owner = git.Owner(session.agent, session.token_id,
                          max(session.expires_at, token.expires_at))
        dropping = session.staged.is_empty() and not session.staged.conflicts
        try:
            session.saved = self._repo.save_session(
                session.session_id, owner, session.staged,
                expected=session.saved, now=now, cache=session.cache,
            )
        except (RepositoryError, OSError, pygit2.GitError) as exc:
            code = exc.code if isinstance(exc, RepositoryError) else "internal_error"
            if dropping:
                # The change landed (commit) or was dropped (discard): the answer
                # stands. If another engine saved the session meanwhile, its
                # change is read back on the next call.
                session.restored = code != "conflict"
                logger.warning("a session's saved staged change could not be removed (%s); "
                               "it expires with its token", code)
                return
            session.restored = False  # the next call reads the reference again
            if code in ("conflict", "seal_invalid"):
                raise
            raise RepositoryError(
                "internal_error", "the staged change could not be saved; nothing changed"
            ) from exc
        session.expires_at = owner.expires_at

    def holds_later(self, session_id: str, now: int) -> bool:
        """Whether this engine holds ``session_id`` for a token that has not expired at ``now``."""
        with self._lock:
            session = self._open.get(session_id)
            return session is not None and session.expires_at > now

    def _evict_idle(self) -> None:
        """Forget the least recently used eighth of the sessions not in a call.

        Sessions holding nothing go first; then sessions whose staged change
        is saved (it is read back if they return). A session in the middle of
        a call is never dropped. A dropped session that comes back is read
        from its reference, bound to the identity its record names; one with
        nothing saved starts afresh, bound to the token that presents it.
        Called with the lock held.
        """
        quota = max(1, LIMITS.open_sessions // 8)
        dropped: list[str] = []
        for holding in (False, True):
            for key, old in list(self._open.items()):
                if len(dropped) >= quota:
                    break
                empty = old.staged.is_empty() and not old.staged.conflicts
                if empty != holding and not old.lock.locked():
                    del self._open[key]
                    dropped.append(key)
        if self._placement is not None:
            # Under the lock: a call for one of them that reaches this worker
            # meanwhile claims it again only once its row is gone, so a session
            # is never held here without this worker on record.
            self._placement.release(dropped)
