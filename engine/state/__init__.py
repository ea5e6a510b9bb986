"""The engine's shared state behind one :class:`Store` protocol (docs/architecture.md).

Revocations, delegations, freeze, the call log, exchanged JWT ids, intents and
staged paths. :func:`open_store` opens the SQLite store in the chit home.
"""

from engine.state.sqlite import (
    GENESIS,
    Delegation,
    FreezeState,
    Intent,
    LogAppend,
    LogRow,
    SQLiteStore,
    Store,
    open_store,
)

__all__ = [
    "GENESIS",
    "Delegation",
    "FreezeState",
    "Intent",
    "LogAppend",
    "LogRow",
    "SQLiteStore",
    "Store",
    "open_store",
]
