"""The state store an operator's command works on, and ``chit state migrate``.

``--state URL``, else ``$CHIT_STATE``, else ``[state] url`` in
``<home>/engine.toml``, else ``<home>/state.db`` (docs/deployment.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engine.errors import ConfigurationError
from engine.state import SCHEMA_VERSION, Store, open_store, resolve_state_url

__all__ = ["migrate_state", "state_store"]


@contextmanager
def state_store(
    home: str | os.PathLike[str], state: str | None = None, *, must_exist: bool = False
) -> Iterator[Store]:
    """Open the state store of ``home`` (or ``state``), and close it afterwards.

    Args:
        home: The chit home.
        state: A state URL (``--state``), or ``None`` to resolve it.
        must_exist: Refuse a SQLite file that is not there yet (reading
            commands), rather than create an empty store.

    Yields:
        The store, migrated forward.

    Raises:
        ConfigurationError: If the URL is unusable, or ``must_exist`` and the
            SQLite file is missing.
        StoreError: If the store cannot be opened (``SchemaError``: newer than
            this chit knows).
    """
    url = resolve_state_url(home, state)
    if must_exist and url.path is not None and not url.path.is_file():
        raise ConfigurationError(f"no state store at {url.path}")
    store = open_store(home, url)
    try:
        yield store
    finally:
        store.close()


def migrate_state(
    home: str | os.PathLike[str], *, state: str | None = None, check: bool = False
) -> dict[str, Any]:
    """Migrate the state store's schema forward to this chit's version, or only report it.

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's.
        check: Change nothing; report whether a migration is due.

    Returns:
        ``{"store", "before", "version", "known", "due"}``: the store's URL
        without a password, its version before and after, the newest version
        this chit knows, and whether a migration is (still) due.

    Raises:
        ConfigurationError: If the URL is unusable.
        SchemaError: If the store's schema is newer than this chit knows.
        StoreError: If the store cannot be reached or migrated.
    """
    url = resolve_state_url(home, state)
    if check and url.path is not None and not url.path.exists():
        # A check writes nothing, not even an empty store.
        return {"store": url.redacted, "before": 0, "version": 0,
                "known": SCHEMA_VERSION, "due": True}
    before_store = open_store(home, url, migrate=False)
    try:
        before = before_store.schema_version()
    finally:
        before_store.close()
    version = before
    if not check and before < SCHEMA_VERSION:
        store = open_store(home, url)
        try:
            version = store.schema_version()
        finally:
            store.close()
    return {"store": url.redacted, "before": before, "version": version,
            "known": SCHEMA_VERSION, "due": version < SCHEMA_VERSION}
