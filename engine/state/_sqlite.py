"""What the SQLite store's parts share: one connection per thread, write transactions, errors.

Each thread of a process keeps its own connection to ``<home>/state.db`` (WAL
mode); a write transaction starts with ``BEGIN IMMEDIATE``, the database's
write lock, so it serialises with every other process's. Writers of chit queue
for that lock on a lock of their own first (a thread lock, then ``flock`` on
``<db>-writer.lock``), so a waiting writer is woken the moment the lock is free
instead of sleeping in SQLite's busy handler, whose growing pauses would
otherwise make the slowest calls hundreds of milliseconds slower
(docs/benchmarks.md). Driver errors leave a public method as
:class:`~engine.errors.StoreError`.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import StoreError
from engine.limits import LIMITS
from engine.state import _common

__all__ = ["SQLiteBase", "guard_errors"]

_T = TypeVar("_T", bound=type)


class _WriterLock:
    """Queues this process's writers of one database, then every process's, for its write lock.

    Args:
        path: The database file; the lock file is ``<path>-writer.lock`` (0600).
    """

    def __init__(self, path: Path) -> None:
        self._file = str(path) + "-writer.lock"
        self._thread_lock = threading.RLock()
        self._fd = -1
        self._pid = -1
        self._depth = 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth:  # nested on this thread: the outer hold covers it
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int:
        if self._fd < 0 or self._pid != os.getpid():  # a forked child opens its own
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
            self._fd, self._pid = os.open(self._file, flags, 0o600), os.getpid()
        return self._fd


_WRITERS: dict[str, _WriterLock] = {}
_WRITERS_GUARD = threading.Lock()


def _writer_lock(path: Path) -> _WriterLock:
    """The one writer lock of this process for the database at ``path``."""
    key = os.path.realpath(path)
    with _WRITERS_GUARD:
        found = _WRITERS.get(key)
        if found is None:
            found = _WRITERS[key] = _WriterLock(Path(key))
        return found


class SQLiteBase:
    """The connection handling every part of the SQLite store uses.

    Args:
        path: The database file.
    """

    location: str

    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()
        self.location = "sqlite://" + str(path)
        self._writer = _writer_lock(path)

    def _connect(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(
                self._path, timeout=LIMITS.sqlite_busy_timeout_seconds, isolation_level=None,
                check_same_thread=True,
            )
            # Switching a new database to WAL takes a lock SQLite's busy handler
            # does not wait for: connections are set up one at a time.
            with self._writer.hold():
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the database's write lock (``BEGIN IMMEDIATE``).

        Raises:
            OSError: If the writer lock file cannot be opened (as the database
                could not be).
        """
        db = self._connect()
        with self._writer.hold():
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")


def _failed(store: Any, exc: BaseException) -> StoreError:
    if isinstance(exc, OSError):
        name = exc.strerror or type(exc).__name__
    else:
        name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return StoreError(f"the state store {store.location} failed ({name})")


def guard_errors(cls: _T) -> _T:
    """Make every public method of ``cls`` raise :class:`StoreError` for a driver error."""
    return _common.guard_errors(cls, (sqlite3.Error, OSError), _failed)
