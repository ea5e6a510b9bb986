"""The call log on PostgreSQL: entries, the tree head and checkpoints (docs/audit.md §8).

Appends are serialised by a row lock on the head that holds the tree's frontier
(``SELECT ... FOR UPDATE`` of ``call_log_tree``), taken by the transaction that
writes the batch, so no two interleave from any engine on any host. Rows read
back are untrusted until a verifier has recomputed them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg

from engine.state._common import log_rows_query, paged_log_rows
from engine.state._postgres import Connection, PostgresBase, guard_errors
from engine.state.store import LogBatch, LogCheckpoint, LogRow, LogTree

__all__ = ["PostgresCallLog"]

_TREE = "SELECT origin, size, last, frontier, signed, signed_at FROM call_log_tree WHERE id = 1"
# A batch is one statement: the head moves and the entries are inserted together
# (data-modifying parts of a WITH all run, whether read or not), with the
# checkpoint if the batch has one.
_MOVE = (
    "WITH moved AS (UPDATE call_log_tree SET origin = %s, size = %s, last = %s, frontier = %s,"
    " signed = %s, signed_at = %s WHERE id = 1 RETURNING 1){}"
    " INSERT INTO call_log (seq, time, agent, entry, sig)"
    " SELECT seq, time, agent, entry, ''::bytea FROM"
    " unnest(%s::bigint[], %s::bigint[], %s::text[], %s::bytea[]) AS e(seq, time, agent, entry)"
)
_WRITE = _MOVE.format("")
_WRITE_CHECKPOINT = _MOVE.format(
    ", checkpoint AS (INSERT INTO call_log_checkpoint (size, time, note) VALUES (%s, %s, %s))"
)


@guard_errors
class PostgresCallLog(PostgresBase):
    """The call-log part of :class:`~engine.state.postgres.PostgresStore`."""

    def append_log(
        self, compose: Callable[[LogTree | None], LogBatch | None]
    ) -> LogTree | None:
        """Append a batch of call-log entries (and maybe a checkpoint), serialised on the head.

        Inside one transaction that holds the tree head's row lock (so no two
        appends interleave, from any engine) this reads the head, asks
        ``compose(head)`` for the batch (``None``: nothing to write), inserts
        its entries and checkpoint and moves the head. The next entry always
        continues from the *head*, never from the last row: rows deleted behind
        the head's back stay a visible gap. ``compose`` may read
        :meth:`log_rows` and :meth:`log_head`: they run in the same transaction.

        Args:
            compose: Makes the batch from the stored head (``None`` if none).

        Returns:
            The tree head after the transaction.

        Raises:
            StoreError: If the database fails, or a sequence number is taken
                (a row inserted behind the engine's back); nothing is written.
            ValueError: If the batch's entries do not number on from the head
                (a programming error); nothing is written.
        """
        with self._tx_begun(_TREE + " FOR UPDATE") as (conn, row):
            tree = self._tree(row if row is not None else self._restore_tree(conn))
            batch = compose(tree)
            if batch is None:
                return tree
            first = tree.size + 1 if tree is not None else None
            for i, item in enumerate(batch.entries):
                if first is not None and item.seq != first + i:
                    raise ValueError("call-log entries must number on from the tree head")
            conn.execute(_WRITE if batch.checkpoint is None else _WRITE_CHECKPOINT,
                         _write_values(batch))
        return batch.tree

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


def _write_values(batch: LogBatch) -> tuple[Any, ...]:
    """The parameters of :data:`_WRITE` (or :data:`_WRITE_CHECKPOINT`) for ``batch``."""
    t = batch.tree
    values: tuple[Any, ...] = (t.origin, t.size, t.last, t.frontier, t.signed, t.signed_at)
    if batch.checkpoint is not None:
        c = batch.checkpoint
        values += (c.size, c.time, c.note)
    entries = batch.entries
    columns = (
        [e.seq for e in entries],
        [e.time for e in entries],
        [e.agent for e in entries],
        [e.entry for e in entries],
    )
    return (*values, *columns)
