"""What the PostgreSQL store's parts share: the pool, transactions, advisory lock keys, errors.

Connections come from one psycopg pool per store (autocommit, at most
``LIMITS.postgres_pool_connections``, every statement bounded by
``statement_timeout``). A transaction sets its connection as the thread's
current one, so what it calls back into the store (``compose`` of
``append_log``) runs in the same transaction. Driver errors leave a public
method as :class:`~engine.errors.StoreError`, named by the URL without a
password (docs/deployment.md, "Choosing the store").
"""

from __future__ import annotations

import hashlib
import logging
import math
import select
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from engine.errors import StoreError
from engine.limits import LIMITS
from engine.state import _common
from engine.state.url import StateURL

__all__ = [
    "Connection",
    "PostgresBase",
    "advisory_key",
    "connect_kwargs",
    "guard_errors",
    "open_reason",
    "password_in",
]

Connection: TypeAlias = psycopg.Connection[TupleRow]
_T = TypeVar("_T", bound=type)
logger = logging.getLogger("chit.state")


def advisory_key(scope: str, name: str) -> int:
    """The 64-bit advisory lock key of ``name`` in ``scope``.

    The first 8 bytes of SHA-256 of ``scope``, a NUL and ``name`` (UTF-8), as
    the signed integer ``pg_advisory_lock`` takes.
    """
    digest = hashlib.sha256(scope.encode() + b"\0" + name.encode("utf-8", "surrogatepass"))
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


def connect_kwargs(conninfo: str, name: str = "chit") -> dict[str, Any]:
    """What every connection of a store adds to its URL: autocommit and the time bounds.

    ``connect_timeout`` (whole seconds, at least 2 as libpq wants) from
    ``LIMITS.postgres_connect_seconds``; ``statement_timeout`` from
    ``LIMITS.postgres_statement_seconds``, appended to any ``options`` the URL
    gives; ``application_name`` ``name`` unless the URL names one (so an
    operator tells the change feed's listener, ``chit changes``, from the pool).

    Raises:
        psycopg.ProgrammingError: If ``conninfo`` is not a connection string
            (its message may quote the URL: never show it).
    """
    params = conninfo_to_dict(conninfo)
    statement_ms = max(1, int(LIMITS.postgres_statement_seconds * 1000))
    options = f"{params.get('options') or ''} -c statement_timeout={statement_ms}".strip()
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": max(2, math.ceil(LIMITS.postgres_connect_seconds)),
        "options": options,
    }
    if not params.get("application_name"):
        kwargs["application_name"] = name
    return kwargs


def password_in(text: str, conninfo: str) -> bool:
    """Whether ``text`` holds the password ``conninfo`` carries (as given or decoded)."""
    try:
        parts = urllib.parse.urlsplit(conninfo)
        query = urllib.parse.parse_qsl(parts.query)
    except ValueError:
        return True  # cannot tell: assume it does
    secrets = {value for key, value in query if key.lower() in ("password", "sslpassword")}
    userinfo, at, _hosts = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        raw = userinfo.partition(":")[2]
        secrets.update({raw, urllib.parse.unquote(raw)})
    return any(secret and secret in text for secret in secrets)


_SQLSTATE_WORDS = {
    "28000": "not authorised",
    "28P01": "authentication failed",
    "3D000": "no such database",
    "42501": "permission denied: the role may not do this",
    "42P01": "a table is missing",
    "53300": "too many connections",
    "57014": "a statement took too long",
    "57P01": "the server ended the connection",
    "57P02": "the server crashed",
    "57P03": "the server is starting or stopping",
    "40001": "a serialization failure",
    "40P01": "a deadlock",
}


def sqlstate_reason(code: str) -> str:
    """A SQLSTATE (PostgreSQL's appendix A) with a few words for the common ones.

    For example ``42501: permission denied: the role may not do this``.
    """
    words = _SQLSTATE_WORDS.get(code)
    return f"{code}: {words}" if words else code


def open_reason(exc: BaseException) -> str:
    """A short reason a store could not be opened, never quoting the URL or the server at length."""
    if isinstance(exc, psycopg.ProgrammingError) and getattr(exc, "sqlstate", None) is None:
        return "not a valid connection URL"
    code = getattr(exc, "sqlstate", None)
    if code:
        return sqlstate_reason(str(code))
    text = str(exc).lower()
    for needle, reason in (
        ("password authentication failed", "authentication failed"),
        ("authentication failed", "authentication failed"),
        ("no password supplied", "a password is required"),
        ("does not exist", "no such database or role"),
        ("connection refused", "connection refused"),
        ("timeout expired", "timed out"),
        ("could not translate host name", "unknown host"),
        ("too many", "too many connections"),
    ):
        if needle in text:
            return reason
    return f"cannot connect: {type(exc).__name__}"


class PostgresBase:
    """The pool and transaction handling every part of the PostgreSQL store uses.

    Args:
        url: The store's URL (``kind`` ``"postgresql"``).
    """

    location: str

    def __init__(self, url: StateURL) -> None:
        self._url = url
        self.location = url.redacted
        self._local = threading.local()
        self._pool: ConnectionPool[Connection] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    def _connect_direct(self, name: str = "chit") -> Connection:
        """A connection of its own, outside the pool (the caller closes it)."""
        conninfo = self._url.conninfo
        return psycopg.connect(conninfo, **connect_kwargs(conninfo, name))

    def _pooled(self) -> ConnectionPool[Connection]:
        pool = self._pool
        if pool is None:
            raise psycopg.OperationalError("the state store is closed")
        return pool

    @staticmethod
    def _checkout(pool: ConnectionPool[Connection]) -> Connection:
        """A live connection from the pool (give it back with ``putconn``).

        Pooled connections the server hung up on (restarted, or ended by an
        administrator) are closed and skipped, so the first call after a
        server restart does not fail on one; telling costs a ``poll`` of the
        socket, and a round trip only when an idle connection has something
        to read.
        """
        for _ in range(LIMITS.postgres_pool_connections):
            conn = pool.getconn()
            if _alive(conn):
                return conn
            conn.close()
            pool.putconn(conn)  # a closed connection is discarded and replaced
        return pool.getconn()

    @contextmanager
    def _pooled_connection(self) -> Iterator[Connection]:
        pool = self._pooled()
        conn = self._checkout(pool)
        try:
            yield conn
        finally:
            pool.putconn(conn)

    @contextmanager
    def _conn(self) -> Iterator[Connection]:
        """The thread's current connection (inside a transaction), else one from the pool."""
        current: Connection | None = getattr(self._local, "conn", None)
        if current is not None:
            yield current
            return
        with self._pooled_connection() as conn:
            yield conn

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One transaction; the thread's current connection until it ends (nested: a savepoint)."""
        current: Connection | None = getattr(self._local, "conn", None)
        if current is not None:
            with current.transaction():
                yield current
            return
        with self._pooled_connection() as conn:
            self._local.conn = conn
            try:
                with conn.transaction():
                    yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def _tx_begun(self, opening: str) -> Iterator[tuple[Connection, TupleRow | None]]:
        """One transaction whose first statements travel with its ``BEGIN``, in one round trip.

        ``BEGIN`` and ``opening`` go to the server as one simple query (so
        ``opening`` takes no parameters: it is fixed text, or holds only
        integers the store computed), the block's statements follow, and
        ``COMMIT`` ends it: a transaction of one more statement costs three
        round trips, where :meth:`_tx` costs four. A block that raises rolls
        the transaction back (a connection that cannot is closed, which ends
        it). The connection is the thread's current one until the end; nested
        in another transaction, ``opening`` runs in a savepoint.

        Yields:
            The connection, and the first row of ``opening``'s last statement
            (``None`` if it has none).

        Raises:
            psycopg.Error: If a statement or the commit fails; nothing is written.
        """
        current: Connection | None = getattr(self._local, "conn", None)
        if current is not None:
            with current.transaction():
                yield current, _last_row(current.execute(opening))
            return
        with self._pooled_connection() as conn:
            self._local.conn = conn
            try:
                row = _last_row(conn.execute("BEGIN; " + opening))
                yield conn, row
                ended = conn.execute("COMMIT").statusmessage
                if ended != "COMMIT":  # a failure the block swallowed: nothing was written
                    raise psycopg.OperationalError("the transaction was rolled back")
            except BaseException:
                _roll_back(conn)
                raise
            finally:
                self._local.conn = None

    def _failed(self, exc: psycopg.Error) -> StoreError:
        code = getattr(exc, "sqlstate", None)
        reason = sqlstate_reason(code) if code else type(exc).__name__
        return StoreError(f"the state store {self.location} failed ({reason})")


def _last_row(cursor: psycopg.Cursor[TupleRow]) -> TupleRow | None:
    """The first row of the last statement a (possibly multi-statement) query ran."""
    while cursor.nextset():
        pass
    return cursor.fetchone() if cursor.description is not None else None


def _roll_back(conn: Connection) -> None:
    """End the transaction ``conn`` is in, or close ``conn`` (which ends it) if it cannot."""
    if conn.closed:
        return
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()


def _alive(conn: Connection) -> bool:
    """Whether an idle pooled connection still reaches its server."""
    if conn.closed or conn.broken:
        return False
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        if not poller.poll(0):
            return True  # nothing to read: nobody hung up
        conn.execute("")  # an idle connection with news: most likely the server leaving
    except (OSError, ValueError, psycopg.Error):
        return False
    return True


def guard_errors(cls: _T) -> _T:
    """Make every public method of ``cls`` raise :class:`StoreError` for a driver error.

    The driver's error is chained (``__cause__``) for the log; its text never
    names a password. A call the server ended before it ran anything is made
    once more (:func:`_ended_first`).
    """
    return _common.guard_errors(cls, (psycopg.Error,), _failed, _ended_first)


def _failed(store: Any, exc: BaseException) -> StoreError:
    return store._failed(exc)  # type: ignore[no-any-return]


def _ended_first(store: Any, exc: BaseException) -> bool:
    """Whether to make a failed call again: the server ended its connection first.

    57P01-57P03 (an administrator, a crash or a restart): whatever the
    statement had begun is rolled back with the session. The idle check of a
    pooled connection can miss a termination that arrives just after it, so
    the call is made once more, on a fresh connection, unless it ran inside an
    outer transaction.
    """
    if not isinstance(exc, _SERVER_ENDED) or getattr(store._local, "conn", None) is not None:
        return False
    logger.info("the state store's server ended a connection (%s); retrying once",
                getattr(exc, "sqlstate", None))
    return True


_SERVER_ENDED = (
    psycopg.errors.AdminShutdown,
    psycopg.errors.CrashShutdown,
    psycopg.errors.CannotConnectNow,
)
