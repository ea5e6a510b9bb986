"""Refuse to serve from a new store while the home's old ``state.db`` still holds the state.

An operator who points a home at another store (``--state``, ``$CHIT_STATE``,
``[state] url`` in ``<home>/engine.toml``) without copying would have engines
forget every revocation, delegation and call-log entry: revoked tokens would
work again. An engine checks at start and refuses (docs/deployment.md,
"Switching stores"); operator commands do not.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from engine.errors import ConfigurationError
from engine.state.durable import LEFT_BEHIND
from engine.state.sqlite import SQLiteStore
from engine.state.store import Store
from engine.state.url import StateURL

__all__ = ["refuse_left_behind"]


def refuse_left_behind(home: str | os.PathLike[str], url: StateURL, store: Store) -> None:
    """Refuse an engine whose store is empty while ``<home>/state.db`` holds state.

    Nothing is checked when ``url`` names ``<home>/state.db`` itself, when that
    file is absent, or when the chosen store holds any revocation, delegation
    or call-log entry (it is in use: state was copied, or the old state was
    dropped on purpose). ``<home>/state.db`` is only read, never migrated.

    Args:
        home: The chit home.
        url: The state URL the engine resolved.
        store: The store it opened from ``url``.

    Raises:
        ConfigurationError: If ``<home>/state.db`` holds a revocation, a
            delegation or a call-log entry and ``store`` holds none; the message
            names both stores (no password) and ``chit state copy``.
        StoreError: If either store cannot be read.
    """
    old = Path(home).absolute() / "state.db"
    if not old.is_file() or _same_file(url, old):
        return
    if store.durable_state() & LEFT_BEHIND:
        return
    previous = SQLiteStore(old, migrate=False)
    try:
        held = previous.durable_state() if previous.schema_version() > 0 else frozenset()
    finally:
        previous.close()
    if not held & LEFT_BEHIND:
        return
    source = "sqlite://" + str(old)
    raise ConfigurationError(
        f"the state store {store.location} holds no revocation, delegation or call log, but "
        f"{source} does: an engine on the new store would forget them (revoked tokens would "
        f"work again). Copy them first: `chit state copy --from {shlex.quote(source)}` "
        "(docs/deployment.md, \"Switching stores\"); or, if the old state is really to be "
        f"dropped, move {old} away"
    )


def _same_file(url: StateURL, old: Path) -> bool:
    if url.kind != "sqlite" or url.path is None:
        return False
    try:
        return url.path.exists() and os.path.samefile(url.path, old)
    except OSError:
        return os.path.realpath(url.path) == os.path.realpath(old)
