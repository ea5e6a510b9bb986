"""The engine's shared state behind one :class:`Store` protocol (docs/architecture.md).

Revocations, delegations, freeze, the call log, exchanged JWT ids, intents and
staged paths, rate windows, engine sessions and the change feed. The contract
and its records are in :mod:`engine.state.store`, what of it is durable (what
``chit state copy`` moves) in :mod:`engine.state.durable`; :func:`open_store`
opens the store a state URL names (:mod:`engine.state.url`): SQLite
(:mod:`engine.state.sqlite`) by default, PostgreSQL (:mod:`engine.state.postgres`)
for several hosts (docs/deployment.md).
"""

from engine.errors import SchemaError, StoreError
from engine.state.durable import DURABLE_TABLES, NOT_COPIED
from engine.state.leftover import refuse_left_behind
from engine.state.opening import open_store
from engine.state.sqlite import SQLiteStore
from engine.state.store import (
    CHANGE_KINDS,
    GENESIS,
    MAX_JTI_KEEP_UNTIL,
    SCHEMA_VERSION,
    Delegation,
    FreezeState,
    Intent,
    LogBatch,
    LogCheckpoint,
    LogEntry,
    LogRow,
    LogTree,
    Presence,
    RateWindow,
    Store,
)
from engine.state.url import (
    ENGINE_TOML,
    StateURL,
    parse_state_url,
    read_engine_toml,
    resolve_state_url,
)

__all__ = [
    "CHANGE_KINDS",
    "DURABLE_TABLES",
    "ENGINE_TOML",
    "GENESIS",
    "MAX_JTI_KEEP_UNTIL",
    "NOT_COPIED",
    "SCHEMA_VERSION",
    "Delegation",
    "FreezeState",
    "Intent",
    "LogBatch",
    "LogCheckpoint",
    "LogEntry",
    "LogRow",
    "LogTree",
    "Presence",
    "RateWindow",
    "SQLiteStore",
    "SchemaError",
    "StateURL",
    "Store",
    "StoreError",
    "open_store",
    "parse_state_url",
    "read_engine_toml",
    "refuse_left_behind",
    "resolve_state_url",
]
