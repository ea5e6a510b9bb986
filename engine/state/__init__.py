"""The engine's shared state behind one :class:`Store` protocol (docs/architecture.md).

Revocations, delegations, freeze, the call log, exchanged JWT ids, intents and
staged paths. The contract and its records are in :mod:`engine.state.store`;
:func:`open_store` opens the SQLite store (:mod:`engine.state.sqlite`) in the
chit home.
"""

from engine.state.sqlite import SQLiteStore, open_store
from engine.state.store import (
    GENESIS,
    MAX_JTI_KEEP_UNTIL,
    Delegation,
    FreezeState,
    Intent,
    LogBatch,
    LogCheckpoint,
    LogEntry,
    LogRow,
    LogTree,
    Store,
)

__all__ = [
    "GENESIS",
    "MAX_JTI_KEEP_UNTIL",
    "Delegation",
    "FreezeState",
    "Intent",
    "LogBatch",
    "LogCheckpoint",
    "LogEntry",
    "LogRow",
    "LogTree",
    "SQLiteStore",
    "Store",
    "open_store",
]
