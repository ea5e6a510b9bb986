"""Sessions' declared intents and staged paths on PostgreSQL (docs/semantic.md, "Intents").

Two tables of one shape; each write is one transaction, serialised with the
other writes about the same repository by an advisory lock, that also drops
expired rows and keeps the per-token and per-repository bounds.
"""

from __future__ import annotations

import json

from psycopg import sql as pgsql

from engine.limits import LIMITS
from engine.state._postgres import PostgresBase, advisory_key, guard_errors
from engine.state.postgres_schema import INTENT_SQL
from engine.state.store import Intent, check_intent, read_intent_paths

__all__ = ["PostgresIntents"]


@guard_errors
class PostgresIntents(PostgresBase):
    """The intents part of :class:`~engine.state.postgres.PostgresStore`."""

    def put_intent(self, intent: Intent, *, now: int, staged: bool = False) -> None:
        """Record a session's intent, replacing its earlier one.

        A session that has a row updates it in one statement. A new row is
        inserted in one transaction that keeps, of this repository's live rows,
        only the ``LIMITS.intents_per_repository`` that expire last, at most
        ``LIMITS.intents_per_token`` per token. Expired rows of every repository
        are deleted at most every ``LIMITS.intent_sweep_seconds`` (readers skip them).

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
        with self._conn() as conn:
            # The usual write: the session's row is there; one statement. A
            # session that staged nothing keeps its row with no paths (readers
            # skip it), so its next write is an update too.
            touched = conn.execute(
                sql["touch"], (intent.agent, paths, intent.expires_at, *key)
            ).rowcount == 1
        if not touched and intent.paths:
            # A new row: insert it and keep the bounds, serialised with the
            # other writers of this repository by an advisory lock.
            lock = f"SELECT pg_advisory_xact_lock({int(advisory_key(table, intent.repo))})"
            with self._tx_begun(lock) as (conn, _row):
                conn.execute(sql["put"], (*key[:3], intent.agent, paths, intent.expires_at))
                # One token's sessions keep at most LIMITS.intents_per_token intents,
                # so a single agent cannot fill the table every peer lookup reads.
                # Only live rows are trimmed: expired ones are the sweep's.
                conn.execute(
                    sql["per_token"],
                    (intent.repo, intent.token_id, now, intent.repo, intent.token_id,
                     LIMITS.intents_per_token),
                )
                conn.execute(sql["per_repo"],
                             (intent.repo, now, intent.repo, LIMITS.intents_per_repository))
        self._sweep_intents(table, sql["expire"], now)

    def _sweep_intents(self, table: str, expire: pgsql.Composed | pgsql.SQL, now: int) -> None:
        """Delete expired rows of ``table``, at most every ``LIMITS.intent_sweep_seconds``."""
        swept: dict[str, int] = self.__dict__.setdefault("_intents_swept", {})
        if now - swept.get(table, -(2**62)) < LIMITS.intent_sweep_seconds:
            return
        swept[table] = now
        with self._conn() as conn:
            conn.execute(expire, (now,))

    def intents(self, repo: str, *, now: int, staged: bool = False) -> list[Intent]:
        """Live intents about ``repo`` (at most ``LIMITS.intents_per_repository``), by session.

        A row that does not read back as an intent (paths not a JSON list of
        strings, or too many) is skipped.

        Args:
            repo: The repository's identity, as in :attr:`Intent.repo`.
            now: Unix seconds; intents expiring at or before it are left out.
            staged: Read sessions' staged paths instead of declared intents.

        Returns:
            Intents ordered by session id, then token id (bytewise).
        """
        with self._conn() as conn:
            rows = conn.execute(
                INTENT_SQL[staged]["live"], (repo, now, LIMITS.intents_per_repository)
            ).fetchall()
        out: list[Intent] = []
        for session, token_id, agent, raw, expires_at in rows:
            paths = read_intent_paths(raw)
            if paths is not None:
                out.append(Intent(repo, str(session), str(token_id), str(agent), paths,
                                  int(expires_at)))
        return out
