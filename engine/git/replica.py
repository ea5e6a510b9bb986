"""Keeping the remote level with the local lanes: push after each lane move, retry, report.

A :class:`Replica` pushes each lane commit with its provenance and chit's
stores in one atomic push, takes in what moved on the remote when a push is
refused (fetch, then the caller merges onto the moved lane and pushes again),
keeps lanes whose push failed as pending and retries them from a background
thread with a bounded backoff, and says how far behind the remote is and why
(docs/architecture.md, "Lanes on the organisation's remote").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pygit2

from engine.errors import RepositoryError
from engine.git.compare import compare_lanes, unpushed
from engine.git.handle import Handle
from engine.git.names import NOTES_REF
from engine.git.reconcile import LaneMove, adopt_lane, union_store
from engine.git.refs import CasUpdate, RefLocks, lane_ref, ref_target
from engine.git.remote import PushOutcome, PushResult, Remote, RemoteError
from engine.git.store import provenance_ref
from engine.git.transport import RemoteURL
from engine.limits import LIMITS

__all__ = ["Replica"]

logger = logging.getLogger("chit.engine.remote")


class Replica:
    """The remote of one repository, kept level with its lanes.

    Thread-safe. Every method that touches a lane is called with that lane's
    writer lock held (:meth:`RefLocks.hold`), as the background thread takes
    it itself, so pushes of one lane never interleave, on this host or, with
    a shared state store, on any.

    Args:
        handle: The local repository.
        locks: Its reference writer locks.
        update: The compare-and-swap that moves local references.
        url: The remote's URL.
        stores: chit store references every lane commit may depend on
            (``refs/notes/chit``, ``refs/chit/catalogs``), pushed with each
            one; their writer locks are taken in this order.
        clock: Unix seconds, for what :meth:`report` says.
    """

    def __init__(
        self,
        handle: Handle,
        locks: RefLocks,
        update: CasUpdate,
        url: RemoteURL,
        *,
        stores: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._handle = handle
        self._locks = locks
        self._update = update
        self.remote = Remote(handle, url)
        self._stores = tuple(stores)
        self._clock = clock
        self._state = threading.Condition()
        self._pending: dict[str, str] = {}  # agent -> why its lane is not on the remote
        # agent -> since when its lane has waited: (time.monotonic(), the clock's Unix seconds)
        self._pending_since: dict[str, tuple[float, float]] = {}
        self._remote_heads: dict[str, pygit2.Oid] = {}  # store ref -> what the remote holds
        self._parked: dict[str, set[str]] = {}
        self._last_error: str | None = None
        self._last_pushed: float | None = None
        self._checked: float | None = None
        self._delay = LIMITS.remote_retry_first_seconds
        self._due = 0.0  # time.monotonic() of the next background retry
        self._wanted_check = True  # compare every lane with the remote when the thread starts
        self._next_check = float("inf")  # and again every remote_check_seconds after that
        self._closed = False
        self._thread: threading.Thread | None = None
        self._fetch_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Replica({self.remote.url.shown!r})"

    # -- life -----------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread: a first check of the remote, then retries."""
        with self._state:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="chit-remote", daemon=True
                )
                self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the background thread (a command it runs is left to finish or time out).

        Lanes still waiting are logged: the next engine to start on the
        repository, or any engine's next comparison, pushes them.
        """
        with self._state:
            self._closed = True
            self._state.notify_all()
            thread = self._thread
            waiting = sorted(self._pending)
        if waiting and thread is not None:
            logger.warning("stopping with %d lane(s) not yet on %s (%s); the next engine on this "
                           "repository pushes them", len(waiting), self.remote.url.shown,
                           ", ".join(f"agent/{a}" for a in waiting[:10]))
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the remote's base ---------------------------------------------------

    def fetch_base(self) -> bool:
        """Fetch the base branch into its tracking reference; False (and noted) if it failed."""
        with self._fetch_lock:
            try:
                self.remote.fetch([self._handle.base_ref])
            except RemoteError as exc:
                self._note_error(exc.reason)
                return False
        return True

    # -- a commit's push -------------------------------------------------------

    def push_lane(
        self,
        agent: str,
        lane: pygit2.Oid,
        record: pygit2.Oid | None,
        *,
        notes: pygit2.Oid | None = None,
    ) -> PushResult:
        """Push a lane head that is not yet local, with its record, its note and the stores.

        Called by ``commit`` (lane lock held) before the local references
        move, so a commit that the remote refuses because its lane moved can be
        made again onto the moved lane without anyone having seen it.

        Args:
            agent: A validated agent name.
            lane: The new lane head.
            record: The new head of the agent's provenance reference, if any.
            notes: The new head of :data:`~engine.git.names.NOTES_REF`, if
                any (its writer lock held by the caller); pushed in place of
                the local one.

        Returns:
            The push's result. ``FAILED`` is noted: the lane is pending.
        """
        updates = self._lane_updates(agent)
        updates[lane_ref(agent)] = lane
        if record is not None:
            updates[provenance_ref(agent)] = record
        if notes is not None:
            updates[NOTES_REF] = notes
        return self._push(agent, updates)

    def _push(self, agent: str, updates: dict[str, pygit2.Oid]) -> PushResult:
        """Push a lane's updates with the stores the remote lacks (lane lock held).

        A store (shared by every lane) goes into the push only if the remote
        is not known to hold its local head, and then under the store's
        writer lock (on PostgreSQL, every host's), so two engines never race
        to move it on the remote; a store the remote holds is left out, and
        costs no lock.
        """
        repo = self._handle.repo
        with contextlib.ExitStack() as held:
            for store in self._stores:
                if store in updates:
                    continue
                local = ref_target(repo, store)
                with self._state:
                    known = self._remote_heads.get(store)
                if local is not None and local != known:
                    held.enter_context(self._locks.hold(store))
                    updates[store] = local
            result = self.remote.push(updates)
        if result.outcome is PushOutcome.PUSHED:
            with self._state:
                self._remote_heads.update(
                    {ref: oid for ref, oid in updates.items() if ref in self._stores})
        self._noted(agent, result)
        return result

    def landed(self, agent: str, result: PushResult) -> None:
        """Record that a commit landed locally after ``result``; wake the retries if due."""
        if result.outcome is PushOutcome.PUSHED:
            with self._state:
                self._settled(agent)  # its earlier commits went with this one
                if self._pending:  # the remote is back: try the other lanes now
                    self._due = 0.0
                    self._delay = LIMITS.remote_retry_first_seconds
                    self._state.notify_all()
            return
        with self._state:
            self._waits(agent, result.reason or "the push failed")
            self._state.notify_all()

    def catch_up(self, agent: str) -> LaneMove:
        """Take in what the remote holds for a lane (its writer lock held).

        Lists the lane, its provenance reference and the stores on the
        remote, fetches those not held locally, then brings each local
        reference level (engine/git/reconcile.py): the stores and the
        provenance reference take the union of both sides, the lane is
        fast-forwarded, kept, or replaced with its local commits parked.

        Returns:
            What happened to the local lane.

        Raises:
            RemoteError: If the remote cannot be listed or fetched.
            RepositoryError: ``conflict`` if a reference moved under the lock.
        """
        lane, record = lane_ref(agent), provenance_ref(agent)
        wanted = [lane, record, *self._stores]
        heads = self.remote.heads(wanted)
        repo = self._handle.repo
        missing = [ref for ref, oid in heads.items() if repo.get(oid) is None]
        heads.update(self.remote.fetch(missing))
        for store in self._stores:
            with self._locks.hold(store):
                union_store(self._handle, self._update, store, heads.get(store))
            with self._state:  # what the remote holds, as listed (None: nothing)
                if store in heads:
                    self._remote_heads[store] = heads[store]
                else:
                    self._remote_heads.pop(store, None)
        union_store(self._handle, self._update, record, heads.get(record))
        move, parked = adopt_lane(self._handle, self._update, agent, heads.get(lane))
        if parked is not None:
            logger.warning(
                "lane agent/%s went two ways while %s was out of reach; its local commits "
                "are kept under %s and pushed there", agent, self.remote.url.shown, parked,
            )
            with self._state:
                self._parked.setdefault(agent, set()).add(parked)
                self._waits(agent, "local commits were parked; they wait to be pushed")
        return move

    # -- pending lanes -----------------------------------------------------------

    def push_pending(self, agent: str) -> PushResult:
        """Push a lane as it stands locally, catching up once if it moved (lane lock held).

        Returns:
            The last push's result (``PUSHED`` clears the lane from pending).
        """
        result = self._push_local(agent)
        if result.outcome is PushOutcome.MOVED:
            try:
                self.catch_up(agent)
            except RemoteError as exc:
                result = PushResult(PushOutcome.FAILED, exc.reason)
                self._noted(agent, result)
                return result
            result = self._push_local(agent)
        if result.outcome is PushOutcome.PUSHED:
            with self._state:
                self._settled(agent)
        elif result.outcome is PushOutcome.MOVED:
            with self._state:
                self._waits(agent, "the lane keeps moving on the remote")
        return result

    def _waits(self, agent: str, why: str) -> None:
        """Mark a lane pending, keeping since when it has been (state lock held)."""
        self._pending[agent] = why
        if agent not in self._pending_since:
            self._pending_since[agent] = (time.monotonic(), self._clock())

    def _settled(self, agent: str) -> None:
        """The lane is on the remote (state lock held)."""
        self._pending.pop(agent, None)
        self._pending_since.pop(agent, None)

    def _push_local(self, agent: str) -> PushResult:
        repo = self._handle.repo
        updates = self._lane_updates(agent)
        head = ref_target(repo, lane_ref(agent))
        if head is not None:
            updates[lane_ref(agent)] = head
        record = ref_target(repo, provenance_ref(agent))
        if record is not None:
            updates[provenance_ref(agent)] = record
        return self._push(agent, updates)

    def _lane_updates(self, agent: str) -> dict[str, pygit2.Oid]:
        """The local heads of the agent's parked references."""
        repo = self._handle.repo
        updates: dict[str, pygit2.Oid] = {}
        with self._state:
            parked = sorted(self._parked.get(agent, ()))
        for ref in parked:
            oid = ref_target(repo, ref)
            if oid is not None:
                updates[ref] = oid
        return updates

    def _noted(self, agent: str, result: PushResult) -> None:
        if result.outcome is PushOutcome.PUSHED:
            with self._state:
                self._last_pushed = self._clock()
                self._last_error = None
        elif result.outcome is PushOutcome.FAILED:
            reason = result.reason or "the push failed"
            logger.warning("lane agent/%s is not on %s yet: %s", agent,
                           self.remote.url.shown, reason)
            self._note_error(reason)

    def _note_error(self, reason: str) -> None:
        with self._state:
            self._last_error = reason

    def check(self) -> None:
        """Compare every local lane with the remote's; the ones that differ become pending.

        Also fetches the base. Run by the background thread when it starts.

        Raises:
            RemoteError: If the remote cannot be listed.
        """
        self.fetch_base()
        found = unpushed(self._handle, self.remote, self._stores)
        with self._state:
            self._remote_heads.update(found.stores)
            for agent, refs in found.parked.items():
                self._parked.setdefault(agent, set()).update(refs)
            for agent, why in found.behind.items():
                if agent not in self._pending:
                    self._waits(agent, why)
            self._checked = self._clock()
            if not self._pending:
                self._last_error = None  # reachable, and nothing waits: nothing to explain

    # -- the background thread ---------------------------------------------------

    def _ready(self) -> bool:
        """Whether the background has work that is due (state lock held)."""
        now = time.monotonic()
        work = self._wanted_check or bool(self._pending)
        return now >= self._next_check or (work and now >= self._due)

    def _wait(self) -> None:
        """Sleep until work is due, a commit wakes the thread, or it is closed (lock held)."""
        work = self._wanted_check or bool(self._pending)
        until = min(self._next_check, self._due) if work else self._next_check
        self._state.wait(None if until == float("inf") else max(until - time.monotonic(), 0))

    def _run(self) -> None:
        while True:
            with self._state:
                while not self._closed and not self._ready():
                    self._wait()
                if self._closed:
                    return
                check = self._wanted_check or time.monotonic() >= self._next_check
                self._wanted_check = False
                if check:
                    self._next_check = time.monotonic() + LIMITS.remote_check_seconds
                agents = sorted(self._pending)
            ok, check_failed = True, False
            try:
                if check:
                    check_failed = True
                    self.check()
                    check_failed = False
                    with self._state:
                        agents = sorted(self._pending)
                for agent in agents:
                    with self._locks.hold(lane_ref(agent)):
                        if self.push_pending(agent).outcome is not PushOutcome.PUSHED:
                            ok = False
                            break
            except RemoteError as exc:
                self._note_error(exc.reason)
                ok = False
            except (RepositoryError, pygit2.GitError, OSError) as exc:
                logger.warning("retrying the push to %s failed: %s", self.remote.url.shown,
                               type(exc).__name__)
                ok = False
            except Exception:  # the thread must live on; nothing it does is lost
                logger.exception("the push to %s failed unexpectedly", self.remote.url.shown)
                ok = False
            with self._state:
                if ok:
                    self._delay = LIMITS.remote_retry_first_seconds
                else:
                    self._wanted_check = self._wanted_check or check_failed
                    self._due = time.monotonic() + self._delay
                    self._delay = min(self._delay * 2, LIMITS.remote_retry_max_seconds)

    # -- reporting ------------------------------------------------------------------

    def compare(self) -> dict[str, Any]:
        """Compare every lane with the remote now (:func:`~engine.git.compare.compare_lanes`)."""
        return compare_lanes(self._handle, self.remote, self._stores)

    def report(self, agent: str | None = None) -> dict[str, Any]:
        """Where the remote stands, for ``status`` and ``chit doctor``.

        Args:
            agent: Report this lane's state as ``lane_pending``, if given.

        Returns:
            ``{"url" (userinfo redacted), "in_sync" (no lane waits to be
            pushed and the first check ran), "pending": [{"lane", "reason",
            "since" (Unix seconds), "age_seconds" (whole seconds, measured on
            the monotonic clock)}], "error" (the last failure, scrubbed, or
            None), "checked_at", "pushed_at" (Unix seconds or None),
            "lane_pending" (bool, with ``agent``)}``.
        """
        now = time.monotonic()
        with self._state:
            pending = []
            for a, why in sorted(self._pending.items()):
                began, wall = self._pending_since.get(a, (now, self._clock()))
                pending.append({"lane": f"agent/{a}", "reason": why, "since": int(wall),
                                "age_seconds": max(0, int(now - began))})
            out: dict[str, Any] = {
                "url": self.remote.url.shown,
                "in_sync": not pending and self._checked is not None,
                "pending": pending,
                "error": self._last_error,
                "checked_at": None if self._checked is None else int(self._checked),
                "pushed_at": None if self._last_pushed is None else int(self._last_pushed),
            }
            if agent is not None:
                out["lane_pending"] = agent in self._pending
        return out

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no lane is pending (for tests and a clean stop); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._state:
            while self._pending or self._checked is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._state.wait(min(left, 0.1))
        return True
