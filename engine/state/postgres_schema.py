"""The PostgreSQL store's schema, version by version, and the statements on the intent tables.

Versions are numbered as SQLite's (engine/state/sqlite_schema.py): 1 is the
baseline tables, 2 adds the schema version, rate windows, the change feed and
engine sessions, 3 operators and approvals. A store is migrated forward in one
transaction holding an advisory lock, so engines that start together never race (docs/deployment.md,
"Schema versions"). Text that is compared or ordered is ``COLLATE "C"``, so
orders are bytewise as in SQLite whatever the database's locale.
"""

from __future__ import annotations

from psycopg import sql

from engine.errors import SchemaError
from engine.state._postgres import Connection, advisory_key
from engine.state.store import SCHEMA_VERSION

__all__ = ["INTENT_SQL", "MIGRATIONS", "MIGRATION_LOCK", "migrate", "read_version"]

MIGRATION_LOCK = advisory_key("chit", "schema migration")
"""The advisory lock every migration holds for its transaction."""

_VERSION_1 = """
CREATE TABLE IF NOT EXISTS revocations (
    id TEXT COLLATE "C" PRIMARY KEY,
    revoked_at BIGINT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS delegations (
    child_id TEXT COLLATE "C" PRIMARY KEY,
    parent_id TEXT COLLATE "C" NOT NULL,
    parent_agent TEXT NOT NULL,
    child_agent TEXT NOT NULL,
    issued_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    scope TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS delegations_parent ON delegations (parent_id);
CREATE TABLE IF NOT EXISTS engine_mode (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    frozen BIGINT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    changed_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS call_log (
    seq BIGINT PRIMARY KEY,
    time BIGINT NOT NULL,
    agent TEXT COLLATE "C" NOT NULL,
    entry BYTEA NOT NULL,
    sig BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS call_log_agent ON call_log (agent, seq);
CREATE TABLE IF NOT EXISTS exchange_jti (
    issuer TEXT COLLATE "C" NOT NULL,
    jti TEXT COLLATE "C" NOT NULL,
    used_at BIGINT NOT NULL,
    keep_until BIGINT NOT NULL,
    PRIMARY KEY (issuer, jti)
);
CREATE INDEX IF NOT EXISTS exchange_jti_keep ON exchange_jti (keep_until);
CREATE TABLE IF NOT EXISTS call_log_head (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL,
    hash BYTEA NOT NULL,
    head BYTEA NOT NULL,
    sig BYTEA NOT NULL
);
-- The tree head row exists from the start, so every append can lock it
-- (SELECT ... FOR UPDATE); a NULL origin means the log has no head yet.
CREATE TABLE IF NOT EXISTS call_log_tree (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    origin TEXT,
    size BIGINT,
    last BYTEA,
    frontier BYTEA,
    signed BIGINT,
    signed_at BIGINT
);
INSERT INTO call_log_tree (id) VALUES (1) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS call_log_checkpoint (
    size BIGINT PRIMARY KEY,
    time BIGINT NOT NULL,
    note TEXT NOT NULL
);
"""
_INTENT_TABLE = """
CREATE TABLE IF NOT EXISTS {table} (
    repo TEXT COLLATE "C" NOT NULL,
    session TEXT COLLATE "C" NOT NULL,
    token_id TEXT COLLATE "C" NOT NULL,
    agent TEXT NOT NULL,
    paths TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (repo, session, token_id)
);
CREATE INDEX IF NOT EXISTS {table}_expiry ON {table} (repo, expires_at);
"""
_VERSION_1 += "".join(_INTENT_TABLE.format(table=table) for table in ("intents", "staged_paths"))

_VERSION_2 = """
CREATE TABLE IF NOT EXISTS chit_schema (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_events (
    key TEXT COLLATE "C" NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    expires DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS rate_events_key ON rate_events (key, at);
CREATE INDEX IF NOT EXISTS rate_events_expires ON rate_events (expires);
CREATE TABLE IF NOT EXISTS changes (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS engine_sessions (
    session TEXT COLLATE "C" PRIMARY KEY,
    owner TEXT COLLATE "C" NOT NULL,
    placed_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS engine_sessions_owner ON engine_sessions (owner);
"""

_VERSION_3 = """
CREATE TABLE IF NOT EXISTS operators (
    key_id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL,
    public BYTEA NOT NULL,
    groups TEXT NOT NULL,
    added_at BIGINT NOT NULL,
    removed_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS operators_active ON operators (name) WHERE removed_at = 0;
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT COLLATE "C" PRIMARY KEY,
    request TEXT COLLATE "C" NOT NULL,
    tool TEXT NOT NULL,
    agent TEXT NOT NULL,
    token_id TEXT COLLATE "C" NOT NULL,
    session TEXT COLLATE "C" NOT NULL,
    repo TEXT COLLATE "C" NOT NULL,
    asked TEXT NOT NULL,
    approvers TEXT NOT NULL,
    reason TEXT NOT NULL,
    rule TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    state TEXT COLLATE "C" NOT NULL,
    decision BYTEA NOT NULL,
    decided_by TEXT NOT NULL,
    decided_at BIGINT NOT NULL,
    note TEXT NOT NULL,
    used_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_request ON approvals (request, created_at);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, created_at);
CREATE INDEX IF NOT EXISTS approvals_token ON approvals (token_id, state);
"""


_VERSION_4 = """
-- Whose the store is (docs/vital-signs.md): written once, by the first engine.
CREATE TABLE IF NOT EXISTS chit_owner (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    owner TEXT NOT NULL
);
-- The engines and edges seen recently (docs/vital-signs.md): not durable.
CREATE TABLE IF NOT EXISTS chit_presence (
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    role TEXT NOT NULL,
    started BIGINT NOT NULL,
    seen BIGINT NOT NULL,
    PRIMARY KEY (kind, label)
);
CREATE INDEX IF NOT EXISTS chit_presence_seen ON chit_presence (seen);
"""


def _statements(script: str) -> tuple[str, ...]:
    """A script's statements (they hold no ``;`` inside), without comment lines."""
    lines = (line for line in script.splitlines() if not line.lstrip().startswith("--"))
    return tuple(s.strip() for s in "\n".join(lines).split(";") if s.strip())


MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _statements(_VERSION_1),
    2: _statements(_VERSION_2),
    3: _statements(_VERSION_3),
    4: _statements(_VERSION_4),
}
"""Statements taking the schema from version ``v - 1`` to ``v``, run in one transaction."""
if max(MIGRATIONS) != SCHEMA_VERSION:  # pragma: no cover - a programming error
    raise RuntimeError("the PostgreSQL migrations end at another version than the contract's")


def read_version(conn: Connection, location: str) -> int:
    """The schema version the database holds; refuse one newer than this chit knows.

    Returns:
        The version recorded in ``chit_schema``; 1 for chit's tables without
        it; 0 for a database without chit's tables.

    Raises:
        SchemaError: If the recorded version is newer than :data:`SCHEMA_VERSION`.
    """
    row = conn.execute(
        "SELECT to_regclass('chit_schema') IS NOT NULL, to_regclass('revocations') IS NOT NULL"
    ).fetchone()
    has_schema, has_tables = bool(row and row[0]), bool(row and row[1])
    version = 1 if has_tables else 0
    if has_schema:
        stored = conn.execute("SELECT version FROM chit_schema WHERE id = 1").fetchone()
        if stored is not None and type(stored[0]) is int:
            version = stored[0]
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"the state store {location} has schema version {version}; this chit "
            f"knows versions up to {SCHEMA_VERSION}: upgrade chit"
        )
    return version


def migrate(conn: Connection, location: str) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` in one transaction under the migration lock.

    Returns:
        :data:`SCHEMA_VERSION`.

    Raises:
        SchemaError: If the database holds a newer version (nothing changes).
        psycopg.Error: If a statement fails (nothing changes).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        version = read_version(conn, location)
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(
                "INSERT INTO chit_schema (id, version) VALUES (1, %s)"
                " ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version",
                (SCHEMA_VERSION,),
            )
    return SCHEMA_VERSION


# Expired rows are deleted by whoever gets them first: rows another transaction
# already holds are skipped (it deletes them), so two writers never wait on each
# other's sweep, in any order.
_INTENT_SQL_TEMPLATES = {
    "expire": "DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table}"
    " WHERE expires_at <= %s FOR UPDATE SKIP LOCKED))",
    "touch": "UPDATE {table} SET agent = %s, paths = %s, expires_at = %s"
    " WHERE repo = %s AND session = %s AND token_id = %s",
    "put": "INSERT INTO {table} (repo, session, token_id, agent, paths, expires_at)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (repo, session, token_id) DO UPDATE"
    " SET agent = EXCLUDED.agent, paths = EXCLUDED.paths, expires_at = EXCLUDED.expires_at",
    "per_token": "DELETE FROM {table} WHERE repo = %s AND token_id = %s AND expires_at > %s"
    " AND session NOT IN (SELECT session FROM {table} WHERE repo = %s AND token_id = %s"
    " ORDER BY expires_at DESC LIMIT %s)",
    "per_repo": "DELETE FROM {table} WHERE repo = %s AND expires_at > %s"
    " AND (session, token_id) NOT IN (SELECT session, token_id FROM {table} WHERE repo = %s"
    " ORDER BY expires_at DESC LIMIT %s)",
    "live": "SELECT session, token_id, agent, paths, expires_at FROM {table}"
    " WHERE repo = %s AND expires_at > %s ORDER BY session, token_id LIMIT %s",
}
INTENT_SQL: dict[bool, dict[str, sql.Composed | sql.SQL]] = {
    staged: {
        name: sql.SQL(text.replace("{table}", "{t}")).format(t=sql.Identifier(table))
        for name, text in _INTENT_SQL_TEMPLATES.items()
    }
    for staged, table in ((False, "intents"), (True, "staged_paths"))
}
"""Statements on declared intents (False) and on sessions' staged paths (True): two
tables of one shape, their names fixed here (values are always bound parameters)."""
