"""The call log on PostgreSQL: entries, the tree head and checkpoints (docs/audit.md §8).

Appends are serialised by the row lock of the head that holds the tree's
frontier (``call_log_tree``): a batch is written in one statement that moves
the head only if it is still the head the batch was made from, so no two
interleave from any engine on any host. The batch is made from the head this
store last wrote (one round trip) or from one read just before, while engines
seldom append in between, else from the head read under ``SELECT ... FOR
UPDATE``. Rows read back are untrusted until a verifier has recomputed them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg

from engine.state._common import log_rows_query, paged_log_rows
from engine.state._postgres import Connection, PostgresBase, guard_errors
from engine.state.store import LogBatch, LogCheckpoint, LogRow, LogTree
from engine.state.url import StateURL

__all__ = ["PostgresCallLog"]

_TREE = "SELECT origin, size, last, frontier, signed, signed_at FROM call_log_tree WHERE id = 1"
# A batch is one statement. The head moves only if it is still the one the
# batch was made from (every column equal, NULLs included), and the entries and
# checkpoint are inserted only if it moved (they read its RETURNING row; the
# data-modifying parts of a WITH all run, whether read or not). Answers 1 if
# the batch was written, 0 if the head was another.
_MOVE = (
    "WITH moved AS (UPDATE call_log_tree SET origin = %s, size = %s, last = %s,"
    " frontier = %s, signed = %s, signed_at = %s"
    " WHERE id = 1 AND origin IS NOT DISTINCT FROM %s AND size IS NOT DISTINCT FROM %s"
    " AND last IS NOT DISTINCT FROM %s AND frontier IS NOT DISTINCT FROM %s"
    " AND signed IS NOT DISTINCT FROM %s AND signed_at IS NOT DISTINCT FROM %s RETURNING 1),"
    " entries AS (INSERT INTO call_log (seq, time, agent, entry, sig)"
    " SELECT seq, time, agent, entry, ''::bytea FROM moved,"
    " unnest(%s::bigint[], %s::bigint[], %s::text[], %s::bytea[]) AS e(seq, time, agent, entry)){}"
    " SELECT COUNT(*) FROM moved"
)
_WRITE = _MOVE.format("")
_WRITE_CHECKPOINT = _MOVE.format(
    ", checkpoint AS (INSERT INTO call_log_checkpoint (size, time, note)"
    " SELECT %s::bigint, %s::bigint, %s::text FROM moved)"
)
_RECENT = 8  # tries a way of appending without the lock is judged on


class _Way:
    """How often one way of appending without the head's lock wrote its batch lately.

    A way that costs ``cost`` round trips when it writes, and the lock's three
    more when it does not, pays while more than ``(cost - 1) / 3`` of its tries
    write: a third for the head last written (one round trip), two thirds for
    a head read just before (two). The share is a moving average (each try
    weighs ``1 / _RECENT``); a way that does not pay is still tried every
    ``_RECENT``-th append, so the share follows engines that start or stop
    appending in turn.
    """

    def __init__(self, cost: int) -> None:
        self._worth = (cost - 1) / 3
        self._share = 1.0
        self._idle = 0

    def pays(self) -> bool:
        """Whether to try this way for the next append."""
        if self._share > self._worth:
            return True
        self._idle = (self._idle + 1) % _RECENT
        return self._idle == 0

    def tried(self, wrote: bool) -> None:
        """Count a try that wrote its batch (``True``) or found another head."""
        self._share += ((1.0 if wrote else 0.0) - self._share) / _RECENT


@guard_errors
class PostgresCallLog(PostgresBase):
    """The call-log part of :class:`~engine.state.postgres.PostgresStore`."""

    def __init__(self, url: StateURL) -> None:
        super().__init__(url)
        self._head: LogTree | None = None  # the head as this store last wrote it
        self._from_written = _Way(cost=1)  # batches made from that head
        self._from_read = _Way(cost=2)  # batches made from a head read just before

    def append_log(
        self, compose: Callable[[LogTree | None], LogBatch | None]
    ) -> LogTree | None:
        """Append a batch of call-log entries (and maybe a checkpoint), serialised on the head.

        The batch is written together with the move of the tree head, in one
        statement, and only if the stored head is still the one ``compose``
        made it from, every column equal: the head's row lock serialises
        appends from every engine, and an append that finds another head
        writes nothing. The batch is first made, without the lock, from the
        head this store last wrote (one round trip; it writes unless another
        engine appended since) or from the head read just before (two), while
        that way has lately written often enough to pay (:class:`_Way`).
        Otherwise, or if the head had moved, or the log has no head yet, one
        transaction locks the head (``SELECT ... FOR UPDATE``; three round
        trips), reads it, asks ``compose(head)`` for the batch (``None``:
        nothing to write) and writes it. The next entry always continues from
        the *head*, never from the last row: rows deleted behind the head's
        back stay a visible gap.
        ``compose`` may read :meth:`log_rows` and :meth:`log_head` (in the
        locked transaction); it may be called more than once, so it must only
        compute.

        Args:
            compose: Makes the batch from the stored head (``None`` if none).

        Returns:
            The tree head after the append.

        Raises:
            StoreError: If the database fails, or a sequence number is taken
                (a row inserted behind the engine's back); nothing is written.
            ValueError: If the batch's entries do not number on from the head
                (a programming error); nothing is written.
        """
        if getattr(self._local, "conn", None) is None:  # not inside a caller's transaction
            done, tree = self._append_unlocked(compose)
            if done:
                return tree
        with self._tx_begun(_TREE + " FOR UPDATE") as (conn, row):
            tree = self._tree(row if row is not None else self._restore_tree(conn))
            batch = compose(tree)
            if batch is None:
                self._head = tree
                return tree
            if not self._write(conn, tree, batch):  # pragma: no cover - the lock is held
                raise psycopg.DataError("the call log's tree head moved under its lock")
        self._head = batch.tree
        return batch.tree

    def _append_unlocked(
        self, compose: Callable[[LogTree | None], LogBatch | None]
    ) -> tuple[bool, LogTree | None]:
        """Append without the head's lock, if a way pays; ``(False, None)``: take the lock."""
        head = self._head
        if head is not None and self._from_written.pays():
            way = self._from_written
        elif self._from_read.pays():
            way = self._from_read
            with self._conn() as conn:
                head = self._tree(conn.execute(_TREE).fetchone())
            if head is None:
                return False, None  # no head yet: the first batch is made under the lock
        else:
            return False, None
        batch = compose(head)
        if batch is None:
            if way is self._from_written:
                return False, None  # the head may have moved: only the stored head can tell
            self._head = head
            return True, head
        with self._conn() as conn:
            written = self._write(conn, head, batch)
        way.tried(written)
        self._head = batch.tree if written else None
        return written, batch.tree if written else None

    @staticmethod
    def _write(conn: Connection, head: LogTree | None, batch: LogBatch) -> bool:
        """Write ``batch`` if the stored head is ``head``; whether it was written.

        Raises:
            ValueError: If the batch's entries do not number on from ``head``.
        """
        first = head.size + 1 if head is not None else None
        for i, item in enumerate(batch.entries):
            if first is not None and item.seq != first + i:
                raise ValueError("call-log entries must number on from the tree head")
        statement = _WRITE if batch.checkpoint is None else _WRITE_CHECKPOINT
        row = conn.execute(statement, _write_values(head, batch)).fetchone()
        return row is not None and row[0] == 1

    @staticmethod
    def _restore_tree(conn: Connection) -> tuple[Any, ...] | None:
        """Put back a tree head row deleted behind the store's back, lock it and read it."""
        conn.execute("INSERT INTO call_log_tree (id) VALUES (1) ON CONFLICT (id) DO NOTHING")
        return conn.execute(_TREE + " FOR UPDATE").fetchone()

    @staticmethod
    def _tree(row: tuple[Any, ...] | None) -> LogTree | None:
        if row is None or row[0] is None:
            return None
        origin, size, last, frontier, signed, signed_at = row
        if not (
            isinstance(origin, str)
            and type(size) is int
            and isinstance(last, bytes)
            and isinstance(frontier, bytes)
            and type(signed) is int
            and type(signed_at) is int
        ):
            raise psycopg.DataError("the call log's tree head is malformed")
        return LogTree(origin, size, last, frontier, signed, signed_at)

    def log_tree(self) -> LogTree | None:
        """The stored tree head, untrusted; ``None`` before the first entry of this form.

        Raises:
            StoreError: If the row has an origin but lacks another column.
        """
        with self._conn() as conn:
            return self._tree(conn.execute(_TREE).fetchone())

    def log_checkpoints(self) -> Iterator[LogCheckpoint]:
        """Stored checkpoints in ascending ``size``, untrusted, read 512 at a time."""
        after = -(2**63)
        while True:
            with self._conn() as conn:
                rows = conn.execute(
                    "SELECT size, time, note FROM call_log_checkpoint WHERE size > %s"
                    " ORDER BY size LIMIT 512",
                    (after,),
                ).fetchall()
            for size, when, note in rows:
                yield LogCheckpoint(size, when, note)
            if len(rows) < 512:
                return
            after = rows[-1][0]

    def log_head(self) -> tuple[Any, Any, Any, Any] | None:
        """The ``chit-call-log/1`` chain head ``(seq, hash, head bytes, sig)``, untrusted.

        Kept for logs written before checkpoints; ``None`` if the log never had one.
        """
        with self._conn() as conn:
            row = conn.execute("SELECT seq, hash, head, sig FROM call_log_head WHERE id = 1"
                               ).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def log_rows(
        self,
        *,
        agent: str | None = None,
        since: int | None = None,
        batch: int = 512,
    ) -> Iterator[LogRow]:
        """Stored call-log rows in sequence order, read in batches (untrusted).

        Args:
            agent: Only rows whose agent column equals this.
            since: Only rows whose time column is at or after this (unix seconds).
            batch: Rows fetched per query.

        Yields:
            :class:`LogRow` in ascending ``seq``.
        """
        query, params = log_rows_query("%s", agent=agent, since=since)

        def fetch(values: Sequence[Any]) -> list[tuple[Any, ...]]:
            with self._conn() as conn:
                return conn.execute(query, values).fetchall()

        yield from paged_log_rows(fetch, params, batch)


def _write_values(head: LogTree | None, batch: LogBatch) -> tuple[Any, ...]:
    """The parameters of :data:`_WRITE` (or :data:`_WRITE_CHECKPOINT`) for ``batch``."""
    t = batch.tree
    was: tuple[Any, ...] = (None,) * 6 if head is None else (
        head.origin, head.size, head.last, head.frontier, head.signed, head.signed_at
    )
    entries = batch.entries
    values = (
        t.origin, t.size, t.last, t.frontier, t.signed, t.signed_at, *was,
        [e.seq for e in entries],
        [e.time for e in entries],
        [e.agent for e in entries],
        [e.entry for e in entries],
    )
    c = batch.checkpoint
    return values if c is None else (*values, c.size, c.time, c.note)
