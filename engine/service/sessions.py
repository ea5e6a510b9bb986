"""The engine's open sessions: made on first use, bound to a token, evicted when idle.

A session holds one MCP connection's staged change. It is bound to the identity
(token id and agent) that opened it; at most ``LIMITS.open_sessions`` are kept, and
when full the least recently used idle ones are forgotten (docs/engine-api.md,
"Transport security"). A worker among several places each session it opens in
the shared store (``placement``) and lets it go when it forgets it.
"""

from __future__ import annotations

import re
import threading

from engine import git
from engine.auth.verify import VerifiedToken
from engine.errors import AccessDeniedError, InvalidRequestError, StateError
from engine.limits import LIMITS
from engine.service.placement import Placement
from engine.tools.context import Session

__all__ = ["Sessions", "check_session_id"]

_SESSION_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{LIMITS.session_id_chars - 1}}}")


def check_session_id(session_id: object) -> None:
    """Refuse a session id that is not 1-128 of ``[A-Za-z0-9._:-]``, starting alphanumeric.

    It lands in commit trailers and the call log: no newlines, no tricks.

    Raises:
        InvalidRequestError: ``invalid_argument`` if it is not such a string.
    """
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise InvalidRequestError(
            "invalid_argument", "the session id must be 1-128 of [A-Za-z0-9._:-]"
        )


class Sessions:
    """The table of open sessions, safe to use from many threads."""

    def __init__(self) -> None:
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
        """Return the session ``session_id``, opening it for ``token`` if it is new.

        Args:
            session_id: The edge's id for the connection (see :func:`check_session_id`).
            token: The verified token of this call.

        Returns:
            The session, now the most recently used.

        Raises:
            InvalidRequestError: ``invalid_argument`` for an id that is not 1-128
                characters.
            AccessDeniedError: ``limit_exceeded`` if ``LIMITS.open_sessions`` are open
                and none can be forgotten.
            StateError: ``session_token_mismatch`` if another identity opened it.
            SessionElsewhere: With a placement, if another worker holds the session.
            StoreError: With a placement, if the store cannot be written.
        """
        if not isinstance(session_id, str) or not 1 <= len(session_id) <= LIMITS.session_id_chars:
            raise InvalidRequestError("invalid_argument", "invalid session id")
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
                )
            self._open[session_id] = session  # most recently used last
            if session.token_id != token.token_id or session.agent != token.agent:
                raise StateError("session_token_mismatch", "this session belongs to another token")
            return session

    def _evict_idle(self) -> None:
        """Forget the least recently used eighth of the sessions that hold nothing.

        A session with a staged change or an unsettled conflict is never
        dropped, nor one in the middle of a call. A dropped session that comes
        back starts afresh (nothing staged, no read versions), bound to the
        token that presents it. Called with the lock held.
        """
        quota = max(1, LIMITS.open_sessions // 8)
        dropped = []
        for key, old in list(self._open.items()):
            if quota == 0:
                break
            if old.staged.is_empty() and not old.staged.conflicts and not old.lock.locked():
                del self._open[key]
                dropped.append(key)
                quota -= 1
        if self._placement is not None:
            # Under the lock: a call for one of them that reaches this worker
            # meanwhile claims it again only once its row is gone, so a session
            # is never held here without this worker on record.
            self._placement.release(dropped)
