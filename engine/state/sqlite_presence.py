"""The engines and edges seen recently, on SQLite (docs/vital-signs.md, "Who was seen")."""

from __future__ import annotations

from collections.abc import Sequence

from engine.limits import LIMITS
from engine.state._sqlite import SQLiteBase, guard_errors
from engine.state.store import Presence, check_presence

__all__ = ["SQLitePresence"]

_UPSERT = (
    "INSERT INTO chit_presence (kind, label, role, started, seen) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (kind, label) DO UPDATE SET role = excluded.role,"
    " started = CASE WHEN excluded.kind = 'engine' THEN excluded.started"
    " ELSE MIN(chit_presence.started, excluded.started) END,"
    " seen = MAX(chit_presence.seen, excluded.seen)"
)


@guard_errors
class SQLitePresence(SQLiteBase):
    """The presence part of :class:`~engine.state.sqlite.SQLiteStore`."""

    def note_presence(self, rows: Sequence[Presence], *, now: int) -> None:
        """Record engines and edges seen (:meth:`~engine.state.store.Store.note_presence`)."""
        check_presence(rows)
        with self._write() as db:
            db.executemany(_UPSERT, [(r.kind, r.label, r.role, r.started, r.seen) for r in rows])
            db.execute("DELETE FROM chit_presence WHERE seen < ?",
                       (now - LIMITS.presence_keep_seconds,))
            (count,) = db.execute("SELECT COUNT(*) FROM chit_presence").fetchone()
            if count > LIMITS.presence_rows:
                db.execute(
                    "DELETE FROM chit_presence WHERE rowid NOT IN (SELECT rowid FROM"
                    " chit_presence ORDER BY seen DESC LIMIT ?)", (LIMITS.presence_rows,))

    def presence(self, *, since: int) -> list[Presence]:
        """Engines and edges seen at or after ``since``, most recent first (untrusted)."""
        rows = self._connect().execute(
            "SELECT kind, label, role, started, seen FROM chit_presence WHERE seen >= ?"
            " ORDER BY seen DESC, kind, label LIMIT ?", (since, LIMITS.presence_rows)).fetchall()
        return [Presence(str(k), str(lb), str(r), int(st), int(se)) for k, lb, r, st, se in rows]
