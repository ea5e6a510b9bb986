"""Open the state store a state URL names: SQLite, or PostgreSQL for several hosts.

docs/deployment.md, "Choosing the store": ``--state``, ``$CHIT_STATE``,
``[state] url`` in ``<home>/engine.toml``, else ``<home>/state.db``.
"""

from __future__ import annotations

import os

from engine.state.store import Store
from engine.state.url import StateURL, parse_state_url, resolve_state_url

__all__ = ["open_store"]


def open_store(
    home: str | os.PathLike[str],
    url: str | StateURL | None = None,
    *,
    migrate: bool = True,
) -> Store:
    """Open the state store of ``home`` (or the one ``url`` names), migrating it forward.

    Args:
        home: The chit home.
        url: A state URL (``--state``); ``None`` resolves it as
            :func:`~engine.state.url.resolve_state_url` does.
        migrate: Bring the schema to the newest version this chit knows.

    Returns:
        The store; close it with ``close()`` when done.

    Raises:
        ConfigurationError: If the URL is unusable.
        SchemaError: If the store's schema is newer than this chit knows.
        StoreError: If the store cannot be reached or migrated.
    """
    if isinstance(url, str):
        url = parse_state_url(url)
    if url is None:
        url = resolve_state_url(home, None)
    if url.kind == "postgresql":
        from engine.state.postgres import PostgresStore

        return PostgresStore(url, migrate=migrate)
    from engine.state.sqlite import SQLiteStore

    if url.path is None:  # a sqlite URL always has one; refuse rather than guess
        raise ValueError("a SQLite state URL without a path")
    return SQLiteStore(url.path, migrate=migrate)
