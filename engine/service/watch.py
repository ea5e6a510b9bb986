"""The engine's own files, watched for changes that others must hear of.

The policy and the root keys are files in the home (on each host, distributed
by the operator), not rows of the state store. While an edge waits on the
change feed (:meth:`engine.service.Engine.wait_change`), this engine checks
``policy.toml`` and ``keys/root`` every ``LIMITS.change_poll_seconds`` and
announces a change it sees on the feed (``policy`` or ``keys``), so its own
edges and every other engine's re-check the offers of the tokens they hold
(docs/deployment.md, "The change feed").
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from engine.limits import LIMITS
from engine.state import Store

__all__ = ["LocalChanges"]

logger = logging.getLogger("chit.engine")

_Stat = tuple[int, int, int, int, int] | None


def _stat(path: Path) -> _Stat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _folder(path: Path) -> tuple[tuple[str, _Stat], ...]:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return ()
    return tuple((name, _stat(path / name)) for name in names if name.endswith(".json"))


class LocalChanges:
    """Watches ``policy.toml`` and ``keys/root`` of one home; announces what changed.

    Args:
        store: The state store whose feed hears the announcements.
        home: The chit home.
        now: The engine's clock, unix seconds.
    """

    def __init__(self, store: Store, home: Path, now: Callable[[], int]) -> None:
        self._store = store
        self._policy = home / "policy.toml"
        self._keys = home / "keys" / "root"
        self._now = now
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def __repr__(self) -> str:
        return "LocalChanges()"

    def watch(self) -> None:
        """Start watching (once); the first look only records what is there."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="chit-local-changes",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        policy, keys = _stat(self._policy), _folder(self._keys)
        while not self._stop.wait(LIMITS.change_poll_seconds):
            seen_policy, seen_keys = _stat(self._policy), _folder(self._keys)
            for kind, changed in (("policy", seen_policy != policy), ("keys", seen_keys != keys)):
                if not changed:
                    continue
                try:
                    self._store.announce(kind, now=self._now())
                except Exception:
                    # Retried on the next look: what was seen is not recorded yet.
                    logger.warning("a %s change could not be announced", kind, exc_info=True)
                    continue
                if kind == "policy":
                    policy = seen_policy
                else:
                    keys = seen_keys

    def close(self) -> None:
        """Stop watching; idempotent."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=LIMITS.change_poll_seconds + 1)
