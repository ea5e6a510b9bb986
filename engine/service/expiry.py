"""Sweeping the saved references of expired sessions, a bounded batch at a time.

A saved session (``refs/chit/sessions/<session>``) can be resumed only by its
token identity while a token of it is valid; once the record's expiry (the
latest expiry of the tokens that changed it) has passed, nobody can, and the
reference is removed. Each engine sweeps when it starts and then at most every
``LIMITS.session_sweep_seconds``, reading at most ``LIMITS.session_sweep_refs``
records per sweep and going on from where the last one stopped
(docs/engine-api.md, "Sessions that survive"; docs/limits.md).
"""

from __future__ import annotations

import logging
import threading

from engine import git
from engine.errors import RepositoryError
from engine.limits import LIMITS
from engine.service.sessions import Sessions

__all__ = ["SessionSweeper"]

logger = logging.getLogger("chit.engine")


class SessionSweeper:
    """Removes expired sessions' references in one repository.

    Args:
        repo: The repository.
        sessions: Its open sessions (one held here for a token still valid is kept).
    """

    def __init__(self, repo: git.Repository, sessions: Sessions) -> None:
        self._repo = repo
        self._sessions = sessions
        self._lock = threading.Lock()
        self._due = 0.0
        self._cursor = ""

    def __repr__(self) -> str:
        return "SessionSweeper()"

    def maybe_sweep(self, now: float) -> None:
        """Sweep if ``LIMITS.session_sweep_seconds`` passed since the last sweep.

        Never waits for another thread's sweep and never raises: a failure is
        logged and the next sweep tries again.
        """
        if now < self._due or not self._lock.acquire(blocking=False):
            return
        try:
            if now >= self._due:
                self._due = now + LIMITS.session_sweep_seconds
                self._sweep(int(now))
        except Exception:
            logger.exception("sweeping expired sessions failed; the next sweep tries again")
        finally:
            self._lock.release()

    def sweep(self, now: int) -> int:
        """One sweep now (tests and the engine's start).

        Returns:
            How many references were removed.

        Raises:
            RepositoryError: If the references cannot be listed.
        """
        with self._lock:
            self._due = now + LIMITS.session_sweep_seconds
            return self._sweep(now)

    def _sweep(self, now: int) -> int:
        names = sorted(self._repo.saved_sessions())
        if not names:
            return 0
        after = [n for n in names if n > self._cursor]
        batch = (after + [n for n in names if n <= self._cursor])[: LIMITS.session_sweep_refs]
        self._cursor = batch[-1] if len(batch) < len(names) else ""
        removed = unreadable = 0
        for name in batch:
            try:
                saved = self._repo.saved_session(name)
            except RepositoryError:
                unreadable += 1
                continue
            if saved is None or saved.owner.expires_at > now:
                continue
            if self._sessions.holds_later(name, now):
                continue
            try:
                self._repo.drop_saved_session(name, saved.commit)
            except RepositoryError:
                continue  # saved again meanwhile, or locked: the next sweep looks again
            removed += 1
        if unreadable:
            logger.warning("%d saved sessions under refs/chit/sessions/ cannot be read; "
                           "chit leaves them for an operator to remove", unreadable)
        return removed
