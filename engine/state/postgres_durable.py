"""Durable state in and out of a PostgreSQL store, for ``chit state copy`` (docs/deployment.md).

An export reads every durable table in one ``REPEATABLE READ, READ ONLY``
transaction (one snapshot; engines carry on meanwhile and are not seen),
through a server-side cursor so a long call log never sits in memory whole. An
import writes them all in one transaction that first locks the durable tables
against writers and checks they hold nothing, and announces ``revocation`` and
``freeze`` in it. Statements come from the fixed list of
:mod:`engine.state.durable`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import psycopg

from engine.state._postgres import guard_errors
from engine.state.durable import (
    DURABLE_TABLES,
    checked_row,
    durable_table,
    exists_sql,
    export_sql,
    insert_sql,
)
from engine.state.postgres_shared import PostgresShared

__all__ = ["PostgresDurable"]

_EXPORT = {t.name: export_sql(t, "%s") for t in DURABLE_TABLES}
_INSERT = {t.name: insert_sql(t, "%s") for t in DURABLE_TABLES}
# The tree head's row exists from the start (empty): the copy fills it in.
_INSERT["call_log_tree"] += " ON CONFLICT (id) DO UPDATE SET " + ", ".join(
    f"{column} = EXCLUDED.{column}"
    for column in durable_table("call_log_tree").columns if column != "id"
)
_EXISTS = {t.name: exists_sql(t) for t in DURABLE_TABLES}
_LOCK = "LOCK TABLE " + ", ".join(t.name for t in DURABLE_TABLES) + " IN EXCLUSIVE MODE"
_BATCH = 512


@guard_errors
class PostgresDurable(PostgresShared):
    """The durable-state part of :class:`~engine.state.postgres.PostgresStore`."""

    def durable_state(self) -> frozenset[str]:
        """The durable tables holding state; a table the database lacks holds none."""
        held: set[str] = set()
        with self._conn() as conn:
            for table in DURABLE_TABLES:
                row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table.name,)).fetchone()
                if row and row[0] and conn.execute(_EXISTS[table.name]).fetchone() is not None:
                    held.add(table.name)
        return frozenset(held)

    def export_durable(self, *, now: int) -> Generator[tuple[str, tuple[Any, ...]], None, None]:
        """Every durable row, ``(table, values)``, in table and key order, from one snapshot.

        Holds one pooled connection until the iterator is exhausted or closed.

        Args:
            now: The copy's time, unix seconds: replay-cache entries kept only
                until before it are left out.

        Yields:
            Rows as stored (untrusted: :meth:`import_durable` checks them).
        """
        with self._pooled_connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            for table in DURABLE_TABLES:
                params = (now,) if table.live_from else ()
                with conn.cursor(name="chit_export") as cursor:
                    cursor.itersize = _BATCH
                    cursor.execute(_EXPORT[table.name], params)
                    for row in cursor:
                        yield table.name, tuple(row)

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
            StoreError: If the database fails (a lock not granted within
                ``LIMITS.postgres_statement_seconds`` included); nothing is written.
        """
        try:
            return self._import(rows, now)
        except psycopg.Error as exc:
            # Raised here, so the guard never makes the call again: ``rows`` is
            # partly read, and a second attempt would copy only the rest.
            raise self._failed(exc) from exc

    def _import(self, rows: Iterable[tuple[str, tuple[Any, ...]]], now: int) -> dict[str, int]:
        counts = {t.name: 0 for t in DURABLE_TABLES}
        with self._tx() as conn:
            conn.execute(_LOCK)
            held = [t.name for t in DURABLE_TABLES
                    if conn.execute(_EXISTS[t.name]).fetchone() is not None]
            if held:
                raise ValueError(f"the state store {self.location} already holds durable "
                                 f"state ({', '.join(held)}); copy only into an empty store")
            pending: list[tuple[Any, ...]] = []
            current = ""
            with conn.cursor() as cursor:
                for name, values in rows:
                    table = durable_table(name)
                    if table.name != current or len(pending) >= _BATCH:
                        if pending:
                            cursor.executemany(_INSERT[current], pending)
                        pending, current = [], table.name
                    pending.append(checked_row(table, values))
                    counts[table.name] += 1
                if pending:
                    cursor.executemany(_INSERT[current], pending)
            positions = [self._announce(conn, kind, now) for kind in ("revocation", "freeze")]
        self._feed.moved(positions[-1])
        return counts
