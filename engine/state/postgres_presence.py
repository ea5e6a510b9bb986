"""The engines and edges seen recently, on PostgreSQL (docs/vital-signs.md, "Who was seen")."""

from __future__ import annotations

from collections.abc import Sequence

from engine.limits import LIMITS
from engine.state._postgres import PostgresBase, guard_errors
from engine.state.store import Presence, check_presence

__all__ = ["PostgresPresence"]

_UPSERT = (
    "INSERT INTO chit_presence (kind, label, role, started, seen) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (kind, label) DO UPDATE SET role = excluded.role,"
    " started = CASE WHEN excluded.kind = 'engine' THEN excluded.started"
    " ELSE LEAST(chit_presence.started, excluded.started) END,"
    " seen = GREATEST(chit_presence.seen, excluded.seen)"
)


@guard_errors
class PostgresPresence(PostgresBase):
    """The presence part of :class:`~engine.state.postgres.PostgresStore`."""

    def note_presence(self, rows: Sequence[Presence], *, now: int) -> None:
        """Record engines and edges seen (:meth:`~engine.state.store.Store.note_presence`)."""
        check_presence(rows)
        # Rows in a fixed order: two engines writing the same rows never deadlock.
        ordered = sorted(rows, key=lambda r: (r.kind, r.label))
        with self._tx() as conn:
            with conn.cursor() as cur:
                cur.executemany(
                    _UPSERT, [(r.kind, r.label, r.role, r.started, r.seen) for r in ordered])
            conn.execute("DELETE FROM chit_presence WHERE seen < %s",
                         (now - LIMITS.presence_keep_seconds,))
            row = conn.execute("SELECT COUNT(*) FROM chit_presence").fetchone()
            if row is not None and row[0] > LIMITS.presence_rows:
                conn.execute(
                    "DELETE FROM chit_presence WHERE (kind, label) NOT IN (SELECT kind, label"
                    " FROM chit_presence ORDER BY seen DESC LIMIT %s)", (LIMITS.presence_rows,))

    def presence(self, *, since: int) -> list[Presence]:
        """Engines and edges seen at or after ``since``, most recent first (untrusted)."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT kind, label, role, started, seen FROM chit_presence WHERE seen >= %s"
                " ORDER BY seen DESC, kind, label LIMIT %s",
                (since, LIMITS.presence_rows)).fetchall()
        return [Presence(str(k), str(lb), str(r), int(st), int(se)) for k, lb, r, st, se in rows]
