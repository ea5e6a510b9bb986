"""Which worker of one ``chit engine serve --workers N`` serves each engine session.

A session's staged change lives in the memory of the worker process that opened
it. Each worker records the sessions it opens in the shared state store
(``Store.place_session``), under keys scoped to its ``chit engine serve`` and
the session's repository, so a
worker that receives a call for a session another one holds learns where to
forward it; a worker that is gone can be taken over. The forwarding itself is
the server's (gateway/engine_server/); docs/engine-api.md, "Sessions across
workers".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from engine.errors import StoreError

if TYPE_CHECKING:  # the edges import this module and never open a store
    from engine.state import Store

__all__ = ["Placement", "SessionElsewhere"]

logger = logging.getLogger("chit.engine")


class SessionElsewhere(Exception):
    """The session is served by another worker of this engine: forward the call there.

    Raised by :meth:`engine.service.Engine.invoke` only on an engine that places
    its sessions (:meth:`engine.service.Engine.place_sessions`), after the call's
    token, arguments and policy were checked and before anything ran or was
    recorded: the worker that holds the session decides and records the call.

    Args:
        owner: The owner on record (the other worker's private socket path).
        repo: The repository the session belongs to, if the placement knows it.
    """

    def __init__(self, owner: str, repo: str | None = None) -> None:
        super().__init__("the session is served by another worker")
        self.owner = owner
        self.repo = repo


class Placement:
    """One worker's claims on engine sessions in the shared store.

    Args:
        store: The state store every worker of the engine shares.
        group: Names one ``chit engine serve`` (its host and private run
            folder); keys are scoped by it, so separate engines on one store
            never see each other's sessions.
        owner: This worker (its private socket path).
        clock: Unix seconds, for the rows' ``placed_at``.
        repo: The repository whose sessions it places (:meth:`for_repo`);
            ``None``: sessions of no named repository.
    """

    def __init__(
        self,
        store: Store,
        *,
        group: str,
        owner: str,
        clock: Callable[[], float] = time.time,
        repo: str | None = None,
    ) -> None:
        if not group or not owner:
            raise ValueError("a placement needs a group and an owner")
        self._store = store
        self._group = group
        self.owner = owner
        self._clock = clock
        self.repo = repo

    def __repr__(self) -> str:
        return f"Placement(owner={self.owner!r}, repo={self.repo!r})"

    def for_repo(self, repo: str) -> Placement:
        """The same worker's placement of the sessions of repository ``repo``.

        A session id names a session in one repository only, so each
        repository's sessions are keyed apart (``group|repo|session``).
        """
        return Placement(
            self._store, group=self._group, owner=self.owner, clock=self._clock, repo=repo
        )

    def _key(self, session: str, repo: str | None = None) -> str:
        repo = self.repo if repo is None else repo
        # Neither repository names nor session ids hold "|".
        return f"{self._group}|{repo}|{session}" if repo else f"{self._group}|{session}"

    def claim(self, session: str) -> None:
        """Place ``session`` with this worker unless another worker holds it.

        Args:
            session: The edge's session id (already checked).

        Raises:
            SessionElsewhere: If another owner is on record.
            StoreError: If the store cannot be written.
        """
        owner = self._store.place_session(self._key(session), self.owner, now=int(self._clock()))
        if owner != self.owner:
            raise SessionElsewhere(owner, self.repo)

    def take_over(self, session: str, gone: str, *, repo: str | None = None) -> bool:
        """Move ``session`` from ``gone`` (a worker that no longer listens) to this one.

        Args:
            session: The session id.
            gone: The owner on record, which no longer listens.
            repo: The session's repository (default: this placement's).

        Returns:
            True if it moved; False if the record no longer names ``gone``
            (another worker moved it first, or its owner let it go).

        Raises:
            StoreError: If the store cannot be written.
        """
        return self._store.move_session(
            self._key(session, repo), gone, self.owner, now=int(self._clock())
        )

    def release(self, sessions: Iterable[str] | None = None) -> None:
        """Forget ``sessions`` (default: every one this worker holds) in the store.

        A row left behind by a failing store is harmless: a call routed here
        for a session this worker no longer holds starts it afresh, as an
        evicted session does.
        """
        keys = None if sessions is None else [self._key(s) for s in sessions]
        if keys == []:
            return
        try:
            self._store.release_sessions(self.owner, keys)
        except StoreError:
            logger.warning("could not release this worker's sessions in the state store")
