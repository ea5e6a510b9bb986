"""What the SQLite store's parts share: one connection per thread, write transactions, errors.

Each thread of a process keeps its own connection to ``<home>/state.db`` (WAL
mode); a write transaction starts with ``BEGIN IMMEDIATE``, the database's
write lock, so it serialises with every other process's. Driver errors leave a
public method as :class:`~engine.errors.StoreError`.
"""

from __future__ import annotations

import functools
import inspect
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import StoreError
from engine.limits import LIMITS

__all__ = ["SQLiteBase", "guard_errors"]

_T = TypeVar("_T", bound=type)


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

    def _connect(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(
                self._path, timeout=LIMITS.sqlite_busy_timeout_seconds, isolation_level=None,
                check_same_thread=True,
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the database's write lock (``BEGIN IMMEDIATE``)."""
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def _failed(store: Any, exc: sqlite3.Error) -> StoreError:
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return StoreError(f"the state store {store.location} failed ({name})")


def guard_errors(cls: _T) -> _T:
    """Make every public method of ``cls`` raise :class:`StoreError` for a driver error.

    Generator methods are guarded as they are iterated. The driver's error is
    chained (``__cause__``) for the log.
    """
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or not callable(member):
            continue
        setattr(cls, name, _guarded(member))
    return cls


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generate(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(self, *args, **kwargs)
            except sqlite3.Error as exc:
                raise _failed(self, exc) from exc

        return generate

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise _failed(self, exc) from exc

    return call
