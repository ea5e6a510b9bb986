"""The state store on PostgreSQL: one database shared by engines on several hosts.

The same contract as the SQLite store (:class:`~engine.state.store.Store`), on
psycopg 3 with a connection pool: each operation is one short transaction;
call-log appends serialise on the tree head's row lock, replay-cache claims on
the primary key (``INSERT ... ON CONFLICT``), rate windows, intents and the
change feed on advisory locks; revocations and the freeze are announced with
``NOTIFY``. The schema is versioned as SQLite's and migrated forward when the
store opens (docs/deployment.md). Its parts: ``postgres_log``,
``postgres_intents``, ``postgres_shared``, ``postgres_durable``, ``postgres_feed``,
``postgres_schema``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from engine.errors import StoreError
from engine.limits import LIMITS
from engine.state._common import freeze_of
from engine.state._postgres import connect_kwargs, guard_errors, open_reason, password_in
from engine.state.postgres_approvals import PostgresApprovals
from engine.state.postgres_durable import PostgresDurable
from engine.state.postgres_intents import PostgresIntents
from engine.state.postgres_log import PostgresCallLog
from engine.state.postgres_presence import PostgresPresence
from engine.state.postgres_schema import migrate as migrate_schema
from engine.state.postgres_schema import read_version
from engine.state.store import MAX_JTI_KEEP_UNTIL, Delegation, FreezeState, check_jti
from engine.state.url import StateURL

__all__ = ["PostgresStore"]

_HEX = frozenset("0123456789abcdef")
_EXPIRED_JTI = (
    "DELETE FROM exchange_jti WHERE ctid = ANY(ARRAY(SELECT ctid FROM exchange_jti"
    " WHERE keep_until < %s FOR UPDATE SKIP LOCKED))"
)


@guard_errors
class PostgresStore(
    PostgresCallLog, PostgresIntents, PostgresDurable, PostgresApprovals, PostgresPresence
):
    """:class:`~engine.state.store.Store` on PostgreSQL (psycopg 3, a connection pool).

    Connections are autocommit, at most ``LIMITS.postgres_pool_connections``
    of them plus the change feed's listener, each waiting at most
    ``LIMITS.postgres_connect_seconds`` to connect (or for a free pooled
    connection) and running each statement for at most
    ``LIMITS.postgres_statement_seconds``.

    Args:
        url: A ``postgresql://`` state URL (its password stays inside).
        migrate: Bring the schema to :data:`~engine.state.store.SCHEMA_VERSION`
            (the default); ``False`` only reads the version.

    Raises:
        SchemaError: If the database records a schema newer than this chit knows.
        StoreError: If the server cannot be reached, refuses the credentials,
            or the schema cannot be migrated; the message names the URL
            without its password and a short reason.
        ValueError: If ``url`` is not a PostgreSQL URL.
    """

    def __init__(self, url: StateURL, *, migrate: bool = True) -> None:
        if url.kind != "postgresql":
            raise ValueError("a PostgreSQL store needs a postgresql:// state URL")
        super().__init__(url)
        self._version = self._open(migrate)
        conninfo = url.conninfo
        self._pool = ConnectionPool(
            conninfo,
            kwargs=connect_kwargs(conninfo),
            min_size=1,
            max_size=max(1, LIMITS.postgres_pool_connections),
            timeout=LIMITS.postgres_connect_seconds,
            name="chit-state",
            open=True,
        )

    def _open(self, migrate: bool) -> int:
        """Connect once, outside the pool, to check (and migrate) the schema."""
        failure: psycopg.Error
        try:
            with self._connect_direct() as conn:
                if migrate:
                    return migrate_schema(conn, self.location)
                return read_version(conn, self.location)
        except psycopg.Error as exc:
            failure = exc
        # Raised outside the handler: a driver message that quotes the URL (a
        # malformed one, say) must not travel along as the cause or context.
        error = StoreError(f"cannot open the state store {self.location} "
                           f"({open_reason(failure)})")
        client_side = isinstance(failure, psycopg.ProgrammingError) and not failure.sqlstate
        if client_side or password_in(str(failure), self._url.conninfo):
            raise error from None
        raise error from failure

    # --- the schema ------------------------------------------------------------------

    def schema_version(self) -> int:
        """The version of the schema the store holds."""
        return self._version

    def record_owner(self, owner: str) -> str:
        """Record whose the store is, unless it already says (the first engine's record stays)."""
        with self._tx() as conn:
            conn.execute("INSERT INTO chit_owner (id, owner) VALUES (1, %s)"
                         " ON CONFLICT (id) DO NOTHING", (owner,))
            row = conn.execute(
                "SELECT owner FROM chit_owner WHERE id = 1 AND octet_length(owner) <= %s",
                (LIMITS.identity_record_bytes,)).fetchone()
        return owner if row is None else str(row[0])

    def recorded_owner(self) -> str | None:
        """Whose the store says it is (untrusted JSON text), or ``None`` if it never said."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT owner FROM chit_owner WHERE id = 1 AND octet_length(owner) <= %s",
                (LIMITS.identity_record_bytes,)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        """Stop the change feed's listener and close the pool; idempotent."""
        self._feed.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # --- revocations and delegations ----------------------------------------------

    def revoke(self, block_id: str, *, now: int, reason: str = "") -> bool:
        """Revoke ``block_id`` (32 hex digits) and announce it, in one transaction.

        Raises:
            ValueError: If ``block_id`` is not 32 lowercase hex digits.
        """
        if len(block_id) != 32 or not set(block_id) <= _HEX:
            raise ValueError("a token or block id is 32 lowercase hex digits")
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO revocations (id, revoked_at, reason) VALUES (%s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (block_id, now, reason),
            )
            added = cursor.rowcount == 1
            position = self._announce(conn, "revocation", now) if added else None
        if position is not None:
            self._feed.moved(position)
        return added

    def any_revoked(self, block_ids: Iterable[str]) -> bool:
        """True iff any of the hex block ids is revoked."""
        ids = list(block_ids)
        if not ids:
            return False
        with self._conn() as conn:
            row = conn.execute(
                "SELECT 1 FROM revocations WHERE id = ANY(%s::text[]) LIMIT 1", (ids,)
            ).fetchone()
        return row is not None

    def call_state(self, block_ids: Iterable[str]) -> tuple[bool, FreezeState]:
        """Whether any of the block ids is revoked, and the engine's mode, in one statement."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM revocations WHERE id = ANY(%s::text[])),"
                " m.frozen, m.reason, m.changed_at FROM (SELECT 1) AS one"
                " LEFT JOIN engine_mode m ON m.id = 1",
                (list(block_ids),),
            ).fetchone()
        if row is None:  # pragma: no cover - the statement always answers one row
            raise psycopg.DataError("the call state query answered nothing")
        mode = freeze_of(row[1:])
        return bool(row[0]), mode

    def record_delegation(self, delegation: Delegation) -> None:
        """Record an issued delegation (idempotent on ``child_id``)."""
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO delegations (child_id, parent_id, parent_agent, child_agent,"
                " issued_at, expires_at, scope) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (child_id) DO NOTHING",
                (
                    delegation.child_id,
                    delegation.parent_id,
                    delegation.parent_agent,
                    delegation.child_agent,
                    delegation.issued_at,
                    delegation.expires_at,
                    json.dumps(delegation.scope, sort_keys=True),
                ),
            )

    def delegations(self) -> list[Delegation]:
        """Every recorded delegation, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT child_id, parent_id, parent_agent, child_agent, issued_at,"
                " expires_at, scope FROM delegations ORDER BY issued_at, child_id"
            ).fetchall()
        return [
            Delegation(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), json.loads(r[6])) for r in rows
        ]

    def revoked(self) -> list[dict[str, Any]]:
        """Every revocation, oldest first: ``[{"id", "revoked_at", "reason"}]``."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, revoked_at, reason FROM revocations ORDER BY revoked_at, id"
            ).fetchall()
        return [{"id": r[0], "revoked_at": int(r[1]), "reason": r[2]} for r in rows]

    # --- the engine's mode -----------------------------------------------------

    def freeze_state(self) -> FreezeState:
        """The engine's mode as the operator last set it (not frozen if never set)."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT frozen, reason, changed_at FROM engine_mode WHERE id = 1"
            ).fetchone()
        return freeze_of(row)

    def set_freeze(self, frozen: bool, *, now: int, reason: str = "") -> FreezeState:
        """Freeze (``True``) or unfreeze every engine on this store, and announce it.

        Args:
            frozen: The new mode.
            now: Unix seconds.
            reason: The operator's note, kept with the mode.

        Returns:
            The new state.
        """
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO engine_mode (id, frozen, reason, changed_at) VALUES (1, %s, %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET frozen = EXCLUDED.frozen,"
                " reason = EXCLUDED.reason, changed_at = EXCLUDED.changed_at",
                (int(frozen), reason, now),
            )
            position = self._announce(conn, "freeze", now)
        self._feed.moved(position)
        return FreezeState(frozen, reason, now)

    # --- the token exchange's replay cache -----------------------------------------

    def claim_jti(self, issuer: str, jti: str, *, keep_until: int, now: int) -> bool:
        """Record that the JWT ``(issuer, jti)`` is being exchanged, unless it already was.

        One transaction first forgets the entries whose ``keep_until`` has
        passed, then inserts this one with ``ON CONFLICT DO NOTHING``: among
        any number of exchanges of one JWT on any engines sharing the database,
        the primary key lets exactly one insert, and the answer survives restarts.

        Args:
            issuer: The configured issuer whose signature verified (the exact ``iss``).
            jti: The verified ``jti`` claim (RFC 7519 section 4.1.7), compared exactly.
            keep_until: Unix seconds until which the entry must be kept; clamped
                to :data:`MAX_JTI_KEEP_UNTIL`.
            now: The current time, unix seconds.

        Returns:
            True if this call recorded the entry (the first exchange), False if
            it was already there (a replay).

        Raises:
            ValueError: If ``issuer`` or ``jti`` is empty or not UTF-8 encodable
                (nothing is written).
            StoreError: If the database fails (text holding NUL, which
                PostgreSQL cannot store, included); nothing is recorded.
        """
        check_jti(issuer, jti)
        keep = min(int(keep_until), MAX_JTI_KEEP_UNTIL)
        with self._tx() as conn:
            conn.execute(_EXPIRED_JTI, (now,))
            cursor = conn.execute(
                "INSERT INTO exchange_jti (issuer, jti, used_at, keep_until)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (issuer, jti) DO NOTHING",
                (issuer, jti, now, keep),
            )
            return cursor.rowcount == 1

    def release_jti(self, issuer: str, jti: str) -> None:
        """Forget ``(issuer, jti)``: its exchange failed after the claim and minted nothing.

        Raises:
            StoreError: If the database fails (the entry stays: fail closed).
        """
        with self._conn() as conn:
            conn.execute("DELETE FROM exchange_jti WHERE issuer = %s AND jti = %s", (issuer, jti))

    def jti_count(self) -> int:
        """How many ``(issuer, jti)`` entries the replay cache holds (for operators and tests)."""
        with self._conn() as conn:
            row = conn.execute("SELECT COUNT(*) FROM exchange_jti").fetchone()
        return int(row[0]) if row is not None else 0
