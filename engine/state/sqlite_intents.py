"""Sessions' declared intents and staged paths on SQLite (docs/semantic.md, "Intents").

Two tables of one shape; each write is one transaction that also drops expired
rows and keeps the per-token and per-repository bounds.
"""

from __future__ import annotations

import json

from engine.limits import LIMITS
from engine.state._sqlite import SQLiteBase, guard_errors
from engine.state.sqlite_schema import INTENT_SQL
from engine.state.store import Intent, check_intent, read_intent_paths

__all__ = ["SQLiteIntents"]


@guard_errors
class SQLiteIntents(SQLiteBase):
    """The intents part of :class:`~engine.state.sqlite.SQLiteStore`."""

    def put_intent(self, intent: Intent, *, now: int, staged: bool = False) -> None:
        """Record a session's intent, replacing its earlier one, in one transaction.

        A session that has a row updates it; a new row is inserted and, of this
        repository's rows, only the ``LIMITS.intents_per_repository`` that
        expire last are kept, at most ``LIMITS.intents_per_token`` per token.
        Expired rows of every repository are deleted at most every
        ``LIMITS.intent_sweep_seconds`` (readers skip them).

        Args:
            intent: The intent; ``paths`` at most ``LIMITS.intent_paths``.
            now: Unix seconds.
            staged: Record the paths the session has staged (table
                ``staged_paths``, same rules) instead of a declared intent; an
                intent with no paths then empties the session's row, which
                readers skip.

        Raises:
            ValueError: If ``intent`` names more than ``LIMITS.intent_paths``
                paths or a path that is not a string (a programming error).
            StoreError: If the database fails; nothing is changed.
        """
        check_intent(intent)
        sql = INTENT_SQL[staged]
        table = "staged_paths" if staged else "intents"
        key = (intent.repo, intent.session, intent.token_id)
        paths = json.dumps(list(intent.paths))
        with self._write() as db:
            # A session that staged nothing keeps its row with no paths (readers
            # skip it), so its next write is an update too.
            if db.execute(sql["touch"], (intent.agent, paths, intent.expires_at, *key)
                          ).rowcount != 1 and intent.paths:
                db.execute(sql["put"], (*key, intent.agent, paths, intent.expires_at))
                # One token's sessions keep at most LIMITS.intents_per_token intents, so a
                # single agent cannot fill the table every peer lookup reads.
                db.execute(
                    sql["per_token"],
                    (intent.repo, intent.token_id, intent.repo, intent.token_id,
                     LIMITS.intents_per_token),
                )
                db.execute(sql["per_repo"],
                           (intent.repo, intent.repo, LIMITS.intents_per_repository))
            swept: dict[str, int] = self.__dict__.setdefault("_intents_swept", {})
            if now - swept.get(table, -(2**62)) >= LIMITS.intent_sweep_seconds:
                swept[table] = now
                db.execute(sql["expire"], (now,))

    def intents(self, repo: str, *, now: int, staged: bool = False) -> list[Intent]:
        """Live intents about ``repo`` (at most ``LIMITS.intents_per_repository``), by session.

        A row that does not read back as an intent (paths not a JSON list of
        strings, or too many) is skipped.

        Args:
            repo: The repository's identity, as in :attr:`Intent.repo`.
            now: Unix seconds; intents expiring at or before it are left out.
            staged: Read sessions' staged paths instead of declared intents.

        Returns:
            Intents ordered by session id, then token id.
        """
        live = INTENT_SQL[staged]["live"]
        rows = self._connect().execute(live, (repo, now, LIMITS.intents_per_repository)).fetchall()
        out: list[Intent] = []
        for session, token_id, agent, raw, expires_at in rows:
            paths = read_intent_paths(raw)
            if paths is not None:
                out.append(Intent(repo, str(session), str(token_id), str(agent), paths,
                                  int(expires_at)))
        return out
