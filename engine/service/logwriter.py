"""The engine's call-log writer: entries queued in call order, made durable in batches.

Entries of read-only calls and of refusals are answered at once and made durable
by a background thread in batches (gathered for 10 ms, so well within 100 ms);
calls that change state wait for their own entry, or append it themselves when
nothing is queued. The writer also signs a checkpoint at
least every ``calllog_checkpoint_seconds`` while it appends, and at close. The
window and its guarantees: docs/audit.md §8, *When an entry is durable*.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

from engine.audit import tlog
from engine.audit.calllog import CallRecord, LogSigner
from engine.limits import LIMITS
from engine.state import Store

__all__ = ["LogWriteError", "LogWriter"]

logger = logging.getLogger("chit.engine")

_RETRY_PAUSES = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
_IDLE_SECONDS = 2.0  # a thread with nothing to write or sign for this long ends
_LINGER_SECONDS = 0.01  # how long queued read-only entries wait for more to join them


_WRITERS: weakref.WeakSet[LogWriter] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: its writers start afresh, empty.

    The parent's queued entries are the parent's to write; the child writes its own.
    """
    for writer in list(_WRITERS):
        writer._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_at_exit(ref: weakref.ReferenceType[LogWriter]) -> None:
    writer = ref()
    if writer is not None:
        writer.close()


class LogWriteError(Exception):
    """A call's entry could not be queued, or (for a durable one) written, in time."""


class LogWriter:
    """Appends one engine's call-log entries in call order from a background thread.

    :meth:`write` queues an entry; a durable one returns only once its entry
    (and every entry queued before it) is committed. A failed transaction is
    retried with growing pauses and its entries are never dropped; while the
    store is failing, every call waits for its own entry and fails closed at the
    next failed attempt. A full queue makes callers wait. The thread starts with
    the first entry; :meth:`close` (also run at interpreter exit) writes what is
    queued and signs a last checkpoint.

    Args:
        store: The state store holding the log.
        signer: The engine's signing key cache, for checkpoints.
        now: The current time in unix seconds (checkpoints' time).
        queue_entries: Bound of the queue (default ``calllog_queue_entries``).
        batch_entries: Entries per transaction (default ``calllog_batch_entries``).
    """

    def __init__(
        self,
        store: Store,
        signer: LogSigner,
        now: Callable[[], int],
        *,
        queue_entries: int = LIMITS.calllog_queue_entries,
        batch_entries: int = LIMITS.calllog_batch_entries,
    ) -> None:
        self._store = store
        self._signer = signer
        self._now = now
        self._queue_entries = queue_entries
        self._batch_entries = batch_entries
        self._reset()
        _WRITERS.add(self)
        atexit.register(_close_at_exit, weakref.ref(self))

    def _reset(self) -> None:
        self._failures = 0  # failed transactions so far
        self._failing = False  # the last transaction failed
        self._cond = threading.Condition()
        self._queue: deque[CallRecord] = deque()
        self._queued = 0  # tickets handed out: the n-th entry written by this writer
        self._written = 0  # tickets committed
        self._closing = False
        self._busy = False  # a caller is appending its own entry
        self._waiting = 0  # callers waiting for their entries
        self._checkpoint_failures = 0  # failed checkpoints in a row
        self._thread: threading.Thread | None = None
        self._unsigned = False  # this writer appended since its last checkpoint
        self._signed_at = time.monotonic()

    def __repr__(self) -> str:
        return "LogWriter()"

    def write(self, record: CallRecord, *, durable: bool) -> None:
        """Queue one entry, in call order; if ``durable``, wait until it is committed.

        Args:
            record: The call.
            durable: Whether the call changed state (its answer must wait for
                the entry), or is a read-only call or a refusal.

        Raises:
            LogWriteError: If the queue stayed full, or a durable entry was not
                committed, for ``calllog_wait_seconds``; if a transaction failed
                while a call waited for its entry (the entry stays queued); or if
                the writer is closed.
        """
        deadline = time.monotonic() + LIMITS.calllog_wait_seconds
        with self._cond:
            while len(self._queue) >= self._queue_entries and not self._closing:
                if not self._cond.wait(deadline - time.monotonic()):
                    raise LogWriteError("the call log's queue stayed full")
            if self._closing:
                raise LogWriteError("the call log's writer is closed")
            self._queued += 1
            ticket = self._queued
            inline = durable and not self._queue and not self._busy and not self._failing
            if inline:
                # Nothing is queued before it: the caller appends its own entry and
                # spares the hand-off to the thread (which waits while it does).
                self._busy = True
            else:
                self._queue.append(record)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="chit-call-log", daemon=True
                    )
                    self._thread.start()
                elif len(self._queue) == 1 or len(self._queue) >= self._batch_entries:
                    # Wake the thread only when it has something new to do: a first
                    # entry, or a full batch (a lingering batch needs no wake-up).
                    self._cond.notify_all()
            if inline:
                pass
            elif not durable and not self._failing:
                return
            else:
                self._wait_for(ticket, deadline)
                return
        self._append_inline(record)

    def _wait_for(self, ticket: int, deadline: float) -> None:
        """Wait (holding the condition) until entry ``ticket`` is committed."""
        failures = self._failures
        self._waiting += 1
        self._cond.notify_all()  # a lingering thread writes at once for a waiting call
        try:
            while self._written < ticket:
                if self._failures > failures:
                    raise LogWriteError("the call log could not be written")
                if not self._cond.wait(deadline - time.monotonic()):
                    raise LogWriteError("the call's entry was not written in time")
        finally:
            self._waiting -= 1

    def _append_inline(self, record: CallRecord) -> None:
        """Append one entry from the calling thread; on failure queue it for the thread."""
        try:
            tree = tlog.append(self._store, [record], self._signer, now=self._now())
        except Exception:
            logger.exception("the call log could not be written; the entry is queued")
            with self._cond:
                self._busy = False
                self._queue.appendleft(record)  # the earliest: nothing was queued before it
                self._failures += 1
                self._failing = True
                self._cond.notify_all()
            raise LogWriteError("the call log could not be written") from None
        with self._cond:
            self._busy = False
            self._written += 1
            if tree.signed == tree.size:
                self._unsigned, self._signed_at = False, time.monotonic()
            else:
                self._unsigned = True
                if self._thread is None and not self._closing:  # it signs the checkpoint
                    self._thread = threading.Thread(
                        target=self._run, name="chit-call-log", daemon=True
                    )
                    self._thread.start()
            if self._queue or self._waiting:
                self._cond.notify_all()

    def flush(self, timeout: float = LIMITS.calllog_wait_seconds) -> bool:
        """Wait until every entry queued so far is committed; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._queued
            self._waiting += 1
            self._cond.notify_all()  # a lingering batch is written at once
            try:
                while self._written < target:
                    if not self._cond.wait(deadline - time.monotonic()):
                        return False
            finally:
                self._waiting -= 1
        return True

    def close(self) -> None:
        """Write what is queued, sign a last checkpoint and stop the thread (idempotent)."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(LIMITS.calllog_wait_seconds)
        with self._cond:  # a caller still appending its own entry finishes first
            deadline = time.monotonic() + LIMITS.calllog_wait_seconds
            while self._busy and self._cond.wait(deadline - time.monotonic()):
                pass
        if self._unsigned:
            self._checkpoint()

    # --- the thread --------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while (not self._queue or self._busy) and not self._closing:
                    if self._unsigned:
                        due = self._signed_at + LIMITS.calllog_checkpoint_seconds
                        if not self._cond.wait(max(0.0, due - time.monotonic())):
                            break
                    elif not self._cond.wait(_IDLE_SECONDS) and not self._queue:
                        self._thread = None  # idle: the next write starts a new thread
                        return
                if not self._queue and self._closing:
                    return
                # Entries no call waits for linger a moment, so that one transaction
                # takes several: the writer then costs the calls beside it less.
                linger = time.monotonic() + _LINGER_SECONDS
                while (
                    self._queue
                    and not (self._waiting or self._closing or self._busy)
                    and len(self._queue) < self._batch_entries
                    and self._cond.wait(max(0.0, linger - time.monotonic()))
                ):
                    pass
                batch = (
                    []
                    if self._busy
                    else [self._queue[i] for i in range(min(len(self._queue), self._batch_entries))]
                )
            if batch:
                try:
                    tree = tlog.append(self._store, batch, self._signer, now=self._now())
                except Exception:
                    pause = _RETRY_PAUSES[min(failures, len(_RETRY_PAUSES) - 1)]
                    failures += 1
                    with self._cond:
                        self._failures += 1
                        self._failing = True
                        self._cond.notify_all()
                    if self._closing:
                        logger.exception(
                            "the call log could not be written; %d entries are lost",
                            len(self._queue),
                        )
                        return
                    logger.exception(
                        "the call log could not be written (%d queued); retrying in %.2fs",
                        len(self._queue),
                        pause,
                    )
                    time.sleep(pause)
                    continue
                failures = 0
                with self._cond:
                    for _ in batch:
                        self._queue.popleft()
                    self._written += len(batch)
                    self._failing = False
                    self._cond.notify_all()
                if tree.signed == tree.size:
                    self._unsigned, self._signed_at = False, time.monotonic()
                else:
                    self._unsigned = True
            if self._unsigned and (
                time.monotonic() - self._signed_at >= LIMITS.calllog_checkpoint_seconds
            ):
                self._checkpoint()

    def _checkpoint(self) -> None:
        try:
            tlog.checkpoint(self._store, self._signer, now=self._now())
        except Exception:
            # Retried with growing pauses (up to a minute), logged at the first
            # failure of a run of them, so a lasting fault does not flood the log.
            self._checkpoint_failures += 1
            if self._checkpoint_failures == 1:
                logger.exception("the call log's checkpoint could not be signed; retrying")
            pause = min(60.0, 2.0 ** self._checkpoint_failures)
            self._signed_at = time.monotonic() + pause - LIMITS.calllog_checkpoint_seconds
            return
        if self._checkpoint_failures:
            logger.warning("the call log's checkpoint is signed again")
        self._checkpoint_failures = 0
        self._unsigned, self._signed_at = False, time.monotonic()
