"""The call log on SQLite: entries, the tree head and checkpoints (docs/audit.md §8).

Appends run in one ``BEGIN IMMEDIATE`` transaction that reads the tree head and
writes the batch, so no two interleave from any process; rows read back are
untrusted until a verifier has recomputed them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from engine.state._common import log_rows_query, paged_log_rows
from engine.state._sqlite import SQLiteBase, guard_errors
from engine.state.store import LogBatch, LogCheckpoint, LogRow, LogTree

__all__ = ["SQLiteCallLog"]


@guard_errors
class SQLiteCallLog(SQLiteBase):
    """The call-log part of :class:`~engine.state.sqlite.SQLiteStore`."""

    def append_log(
        self, compose: Callable[[LogTree | None], LogBatch | None]
    ) -> LogTree | None:
        """Append a batch of call-log entries (and maybe a checkpoint), serialised on the head.

        Inside one ``BEGIN IMMEDIATE`` transaction (the database's write lock, so
        no two appends interleave, from any process) this reads the tree head,
        asks ``compose(head)`` for the batch (``None``: nothing to write), inserts
        its entries and checkpoint and moves the head. The next entry always
        continues from the *head*, never from the last row: rows deleted behind
        the head's back stay a visible gap; the store repairs nothing. ``compose``
        may read :meth:`log_rows` and :meth:`log_head` (same transaction), as it
        must when there is no head yet but entries of the first form exist.

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
        with self._write() as db:
            tree = self._read_tree(db)
            batch = compose(tree)
            if batch is None:
                return tree
            first = tree.size + 1 if tree is not None else None
            for i, item in enumerate(batch.entries):
                if first is not None and item.seq != first + i:
                    raise ValueError("call-log entries must number on from the tree head")
            db.executemany(
                "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (?, ?, ?, ?, x'')",
                [(e.seq, e.time, e.agent, e.entry) for e in batch.entries],
            )
            t = batch.tree
            db.execute(
                "INSERT OR REPLACE INTO call_log_tree"
                " (id, origin, size, last, frontier, signed, signed_at)"
                " VALUES (1, ?, ?, ?, ?, ?, ?)",
                (t.origin, t.size, t.last, t.frontier, t.signed, t.signed_at),
            )
            if batch.checkpoint is not None:
                c = batch.checkpoint
                db.execute(
                    "INSERT INTO call_log_checkpoint (size, time, note) VALUES (?, ?, ?)",
                    (c.size, c.time, c.note),
                )
        return batch.tree

    @staticmethod
    def _read_tree(db: sqlite3.Connection) -> LogTree | None:
        row = db.execute(
            "SELECT origin, size, last, frontier, signed, signed_at FROM call_log_tree"
            " WHERE id = 1"
        ).fetchone()
        if row is None:
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
            raise sqlite3.DatabaseError("the call log's tree head is malformed")
        return LogTree(origin, size, last, frontier, signed, signed_at)

    def log_tree(self) -> LogTree | None:
        """The stored tree head, untrusted; ``None`` before the first entry of this form.

        Raises:
            StoreError: If the row's columns have the wrong types.
        """
        return self._read_tree(self._connect())

    def log_checkpoints(self) -> Iterator[LogCheckpoint]:
        """Stored checkpoints in ascending ``size``, untrusted (their notes are unverified)."""
        rows = self._connect().execute(
            "SELECT size, time, note FROM call_log_checkpoint ORDER BY size"
        )
        for size, when, note in rows:
            yield LogCheckpoint(size, when, note)

    def log_head(self) -> tuple[Any, Any, Any, Any] | None:
        """The ``chit-call-log/1`` chain head ``(seq, hash, head bytes, sig)``, untrusted.

        Kept for logs written before checkpoints: the head of their last signed
        entry; ``None`` if the log never had one.
        """
        row = (
            self._connect()
            .execute("SELECT seq, hash, head, sig FROM call_log_head WHERE id = 1")
            .fetchone()
        )
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
        query, params = log_rows_query("?", agent=agent, since=since)
        yield from paged_log_rows(
            lambda values: self._connect().execute(query, values).fetchall(), params, batch
        )
