"""Durable state in and out of a SQLite store, for ``chit state copy`` (docs/deployment.md).

An export reads every durable table in one read transaction (a WAL snapshot:
writers carry on meanwhile and are not seen); an import writes them all in one
``BEGIN IMMEDIATE`` transaction that first checks the store holds none, and
announces ``revocation`` and ``freeze`` in it. Statements come from the fixed
list of :mod:`engine.state.durable`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

from engine.state._sqlite import guard_errors
from engine.state.durable import (
    DURABLE_TABLES,
    checked_row,
    durable_table,
    exists_sql,
    export_sql,
    insert_sql,
)
from engine.state.sqlite_shared import SQLiteShared

__all__ = ["SQLiteDurable"]

_EXPORT = {t.name: export_sql(t, "?") for t in DURABLE_TABLES}
_INSERT = {t.name: insert_sql(t, "?") for t in DURABLE_TABLES}
_EXISTS = {t.name: exists_sql(t) for t in DURABLE_TABLES}
_BATCH = 512


@guard_errors
class SQLiteDurable(SQLiteShared):
    """The durable-state part of :class:`~engine.state.sqlite.SQLiteStore`."""

    def durable_state(self) -> frozenset[str]:
        """The durable tables holding state; a table the file lacks (an old store) holds none."""
        db = self._connect()
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return frozenset(
            t.name for t in DURABLE_TABLES
            if t.name in tables and db.execute(_EXISTS[t.name]).fetchone() is not None
        )

    def export_durable(self, *, now: int) -> Generator[tuple[str, tuple[Any, ...]], None, None]:
        """Every durable row, ``(table, values)``, in table and key order, from one snapshot.

        Args:
            now: The copy's time, unix seconds: replay-cache entries kept only
                until before it are left out.

        Yields:
            Rows as stored (untrusted: :meth:`import_durable` checks them).
        """
        db = self._connect()
        db.execute("BEGIN")
        try:
            for table in DURABLE_TABLES:
                params = (now,) if table.live_from else ()
                for row in db.execute(_EXPORT[table.name], params):
                    yield table.name, tuple(row)
        finally:
            db.execute("ROLLBACK")  # read only: nothing to keep

    def import_durable(
        self, rows: Iterable[tuple[str, tuple[Any, ...]]], *, now: int
    ) -> dict[str, int]:
        """Write durable rows into this store, which must hold none, in one transaction.

        Args:
            rows: ``(table, values)`` as :meth:`export_durable` yields them.
            now: Unix seconds, for the change feed's announcements.

        Returns:
            Rows written per durable table.

        Raises:
            ValueError: If the store already holds durable state, or a row names
                another table or is malformed; nothing is written.
            StoreError: If the database fails; nothing is written.
        """
        counts = {t.name: 0 for t in DURABLE_TABLES}
        with self._write() as db:
            held = [t.name for t in DURABLE_TABLES if db.execute(_EXISTS[t.name]).fetchone()]
            if held:
                raise ValueError(f"the state store {self.location} already holds durable "
                                 f"state ({', '.join(held)}); copy only into an empty store")
            pending: list[tuple[Any, ...]] = []
            current = ""
            for name, values in rows:
                table = durable_table(name)
                if table.name != current or len(pending) >= _BATCH:
                    if pending:
                        db.executemany(_INSERT[current], pending)
                    pending, current = [], table.name
                pending.append(checked_row(table, values))
                counts[table.name] += 1
            if pending:
                db.executemany(_INSERT[current], pending)
            positions = [self._announce(db, kind, now) for kind in ("revocation", "freeze")]
        self._feed.moved(positions[-1])
        return counts
