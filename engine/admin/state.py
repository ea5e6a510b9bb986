"""The state store an operator's command works on, ``chit state migrate`` and ``chit state copy``.

``--state URL``, else ``$CHIT_STATE``, else ``[state] url`` in
``<home>/engine.toml``, else ``<home>/state.db`` (docs/deployment.md; switching
stores: "Switching stores" there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

from engine.errors import ConfigurationError
from engine.state import (
    NOT_COPIED,
    SCHEMA_VERSION,
    StateURL,
    Store,
    open_store,
    parse_state_url,
    resolve_state_url,
)

__all__ = ["copy_state", "migrate_state", "state_store"]


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


def copy_state(
    home: str | os.PathLike[str],
    source: str,
    *,
    state: str | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    """Copy every durable row of the store ``source`` names into the home's store.

    Both stores are migrated to this chit's schema first. The source is read
    from one snapshot; the destination (resolved as every command resolves
    it) is written in one transaction that first checks it holds no durable
    state, and that announces ``revocation`` and ``freeze`` on its change
    feed. The call log is copied row for row (entries with their ``sig``
    column, the tree head, the checkpoints, the first form's chain head), so it
    verifies on the destination as it did on the source. Intents, staged
    paths, rate windows, session placements and the change feed are not copied.

    Args:
        home: The chit home.
        source: The state URL to copy from (``--from``).
        state: The state URL to copy into (``--state``); ``None``: the home's.
        now: Unix seconds (default: the clock); replay-cache entries kept only
            until before it are not copied.

    Returns:
        ``{"from", "to", "copied": {table: rows}, "not_copied", "announced"}``:
        both URLs without a password, the rows written per durable table,
        what stays behind and the change kinds announced.

    Raises:
        ConfigurationError: If a URL is unusable, both name the same store, or
            the source holds no chit tables (a SQLite file that does not
            exist included); nothing is written.
        ValueError: If the destination already holds durable state, or a
            source row is malformed; nothing is written.
        StoreError: If a store cannot be reached or fails (``SchemaError``:
            newer than this chit knows); nothing is written.
    """
    origin = parse_state_url(source, source="--from")
    target = resolve_state_url(home, state)
    if _same_store(origin, target):
        raise ConfigurationError(f"--from names {target.redacted}, the store the copy would "
                                 "write to; name the store to copy from")
    if origin.path is not None and not origin.path.is_file():
        raise ConfigurationError(f"no state store at {origin.path}")
    moment = int(time.time()) if now is None else int(now)
    # Read the source's version first: a database without chit's tables holds
    # nothing to copy, and is not given them.
    probe = open_store(home, origin, migrate=False)
    try:
        version = probe.schema_version()
    finally:
        probe.close()
    if version == 0:
        raise ConfigurationError(f"--from: {origin.redacted} holds no chit state store")
    src = open_store(home, origin)
    try:
        dst = open_store(home, target)
        try:
            with closing(src.export_durable(now=moment)) as rows:
                copied = dst.import_durable(rows, now=moment)
        finally:
            dst.close()
    finally:
        src.close()
    return {"from": origin.redacted, "to": target.redacted, "copied": copied,
            "not_copied": list(NOT_COPIED), "announced": ["revocation", "freeze"]}


def _same_store(a: StateURL, b: StateURL) -> bool:
    if a.path is not None and b.path is not None:
        if os.path.realpath(a.path) == os.path.realpath(b.path):
            return True
        try:
            return os.path.samefile(a.path, b.path)
        except OSError:
            return False
    return a.redacted == b.redacted
