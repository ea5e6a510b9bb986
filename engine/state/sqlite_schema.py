"""The SQLite store's schema, version by version, and the statements on the intent tables.

``MIGRATIONS[v]`` takes a store from version ``v - 1`` to ``v``; a store opens
by applying those above the version it records (docs/deployment.md, "Schema
versions"). Version 1 is the schema of stores made before versions were
recorded, so its statements are idempotent. The statements on declared intents
and on sessions' staged paths are one set over two tables of one shape
(docs/semantic.md, "Intents").
"""

from __future__ import annotations

from engine.state.store import SCHEMA_VERSION

__all__ = ["INTENT_SQL", "MIGRATIONS", "SCHEMA"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS revocations (
    id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS delegations (
    child_id TEXT PRIMARY KEY,
    parent_id TEXT NOT NULL,
    parent_agent TEXT NOT NULL,
    child_agent TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    scope TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS delegations_parent ON delegations (parent_id);
CREATE TABLE IF NOT EXISTS engine_mode (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    frozen INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    changed_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS call_log (
    seq INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    agent TEXT NOT NULL,
    entry BLOB NOT NULL,
    sig BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS call_log_agent ON call_log (agent, seq);
-- No index on time: every append would pay for it, and `show --since` reads in
-- seq order anyway (seq and time rise together).
DROP INDEX IF EXISTS call_log_time;
CREATE TABLE IF NOT EXISTS exchange_jti (
    issuer TEXT NOT NULL,
    jti TEXT NOT NULL,
    used_at INTEGER NOT NULL,
    keep_until INTEGER NOT NULL,
    PRIMARY KEY (issuer, jti)
);
CREATE INDEX IF NOT EXISTS exchange_jti_keep ON exchange_jti (keep_until);
CREATE TABLE IF NOT EXISTS call_log_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash BLOB NOT NULL,
    head BLOB NOT NULL,
    sig BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS call_log_tree (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    last BLOB NOT NULL,
    frontier BLOB NOT NULL,
    signed INTEGER NOT NULL,
    signed_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS call_log_checkpoint (
    size INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    note TEXT NOT NULL
);
"""
_INTENT_TABLE = """
CREATE TABLE IF NOT EXISTS {table} (
    repo TEXT NOT NULL,
    session TEXT NOT NULL,
    token_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    paths TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (repo, session, token_id)
);
CREATE INDEX IF NOT EXISTS {table}_expiry ON {table} (repo, expires_at);
"""
SCHEMA += "".join(_INTENT_TABLE.format(table=table) for table in ("intents", "staged_paths"))

_VERSION_2 = """
CREATE TABLE IF NOT EXISTS chit_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_events (
    key TEXT NOT NULL,
    at REAL NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS rate_events_key ON rate_events (key, at);
CREATE INDEX IF NOT EXISTS rate_events_expires ON rate_events (expires);
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS engine_sessions (
    session TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    placed_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS engine_sessions_owner ON engine_sessions (owner);
"""

_VERSION_3 = """
CREATE TABLE IF NOT EXISTS operators (
    key_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    public BLOB NOT NULL,
    groups TEXT NOT NULL,
    added_at INTEGER NOT NULL,
    removed_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS operators_active ON operators (name) WHERE removed_at = 0;
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    tool TEXT NOT NULL,
    agent TEXT NOT NULL,
    token_id TEXT NOT NULL,
    session TEXT NOT NULL,
    repo TEXT NOT NULL,
    asked TEXT NOT NULL,
    approvers TEXT NOT NULL,
    reason TEXT NOT NULL,
    rule TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    state TEXT NOT NULL,
    decision BLOB NOT NULL,
    decided_by TEXT NOT NULL,
    decided_at INTEGER NOT NULL,
    note TEXT NOT NULL,
    used_at INTEGER NOT NULL
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
    started INTEGER NOT NULL,
    seen INTEGER NOT NULL,
    PRIMARY KEY (kind, label)
);
CREATE INDEX IF NOT EXISTS chit_presence_seen ON chit_presence (seen);
"""


def _statements(script: str) -> tuple[str, ...]:
    """A script's statements (they hold no ``;`` inside), without comment lines."""
    lines = (line for line in script.splitlines() if not line.lstrip().startswith("--"))
    return tuple(s.strip() for s in "\n".join(lines).split(";") if s.strip())


MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _statements(SCHEMA),
    2: _statements(_VERSION_2),
    3: _statements(_VERSION_3),
    4: _statements(_VERSION_4),
}
"""Statements taking the schema from version ``v - 1`` to ``v``, run in one transaction."""
if max(MIGRATIONS) != SCHEMA_VERSION:  # pragma: no cover - a programming error
    raise RuntimeError("the SQLite migrations end at another version than the contract's")

_INTENT_SQL_TEMPLATES = {
    "expire": "DELETE FROM {table} WHERE expires_at <= ?",
    "touch": "UPDATE {table} SET agent = ?, paths = ?, expires_at = ?"
    " WHERE repo = ? AND session = ? AND token_id = ?",
    "put": "INSERT OR REPLACE INTO {table} (repo, session, token_id, agent, paths, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?)",
    "per_token": "DELETE FROM {table} WHERE repo = ? AND token_id = ? AND session NOT IN ("
    "SELECT session FROM {table} WHERE repo = ? AND token_id = ?"
    " ORDER BY expires_at DESC LIMIT ?)",
    "per_repo": "DELETE FROM {table} WHERE repo = ? AND (session, token_id) NOT IN ("
    "SELECT session, token_id FROM {table} WHERE repo = ? ORDER BY expires_at DESC LIMIT ?)",
    "live": "SELECT session, token_id, agent, paths, expires_at FROM {table}"
    " WHERE repo = ? AND expires_at > ? ORDER BY session, token_id LIMIT ?",
}
INTENT_SQL = {
    staged: {name: sql.format(table=table) for name, sql in _INTENT_SQL_TEMPLATES.items()}
    for staged, table in ((False, "intents"), (True, "staged_paths"))
}
"""Statements on declared intents (False) and on sessions' staged paths (True): two
tables of one shape, their names fixed here (values are always bound parameters)."""
