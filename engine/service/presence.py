"""Who was seen: an engine process notes itself and the edges it serves in the state store.

An engine writes its own row (host, pid, role, when it started, when last
seen) when it starts, then at most every ``presence_write_seconds`` from a
background thread, with the edges whose calls it served meanwhile (each names
itself in the ``chit-edge`` header: untrusted, escaped and cut). ``chit
doctor`` lists those seen within ``presence_window_seconds``
(docs/vital-signs.md, "Who was seen"). Signal-only: noting an edge costs a
call a dictionary update, and a failed write is logged once and retried.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable

from engine.errors import StoreError
from engine.limits import LIMITS
from engine.state import Presence, Store

__all__ = ["ROLES", "PresenceNotes", "escape_label"]

logger = logging.getLogger("chit.engine")

ROLES = frozenset({"engine", "worker", "embedded"})
"""An engine process's roles: ``chit engine serve``, one of its workers, an edge's own engine."""


def escape_label(raw: object) -> str | None:
    r"""An untrusted label as it is kept: printable ASCII, the rest escaped, cut.

    Args:
        raw: What an edge sent (any type; only a string is read).

    Returns:
        The label (``\`` and every character outside ``!``..``~`` written as
        ``\xNN``/``\uNNNN``/``\UNNNNNNNN``), at most
        ``LIMITS.presence_label_chars`` characters; ``None`` for nothing usable.
    """
    if not isinstance(raw, str):
        return None
    most = LIMITS.presence_label_chars
    out: list[str] = []
    size = 0
    for char in raw[:most]:
        if "!" <= char <= "~" and char != "\\":
            piece = char
        elif ord(char) <= 0xFF:
            piece = f"\\x{ord(char):02x}"
        elif ord(char) <= 0xFFFF:
            piece = f"\\u{ord(char):04x}"
        else:
            piece = f"\\U{ord(char):08x}"
        if size + len(piece) > most:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) or None


class PresenceNotes:
    """One engine process's notes of itself and the edges it served (thread-safe).

    Args:
        store: The state store.
        role: This process's role (one of :data:`ROLES`).
        clock: Unix seconds.
    """

    def __init__(self, store: Store, role: str, clock: Callable[[], float]) -> None:
        if role not in ROLES:
            raise ValueError(f"an engine's role is one of {sorted(ROLES)}")
        self._store = store
        self._role = role
        self._clock = clock
        self.label = escape_label(f"{socket.gethostname()}/{os.getpid()}") or "?"
        self._started = int(clock())
        self._edges: OrderedDict[str, tuple[int, int]] = OrderedDict()  # label -> (first, last)
        self._cond = threading.Condition()
        self._closed = False
        self._failing = False
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"PresenceNotes({self._role!r})"

    def start(self) -> None:
        """Write this engine's row now and start the background writes."""
        self.write()
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="chit-presence",
                                                daemon=True)
                self._thread.start()

    def note_edge(self, raw: object) -> None:
        """Note an edge whose call this engine is serving (its untrusted ``chit-edge`` value)."""
        label = escape_label(raw)
        if label is None:
            return
        now = int(self._clock())
        with self._cond:
            first = self._edges.pop(label, (now, now))[0]
            self._edges[label] = (first, now)
            while len(self._edges) > LIMITS.presence_rows:
                self._edges.popitem(last=False)

    def write(self) -> bool:
        """Write this engine's row and the edges noted since the last write; False if it failed."""
        now = int(self._clock())
        with self._cond:
            edges, self._edges = self._edges, OrderedDict()
        rows = [Presence("engine", self.label, self._role, self._started, now)]
        rows += [Presence("edge", label, "edge", first, last)
                 for label, (first, last) in edges.items()]
        try:
            self._store.note_presence(rows, now=now)
        except (StoreError, ValueError) as exc:
            if not self._failing:
                logger.warning("the engines and edges seen could not be recorded (%s); "
                               "retrying", type(exc).__name__)
            self._failing = True
            with self._cond:  # keep what was seen for the next write
                for label, seen in edges.items():
                    self._edges.setdefault(label, seen)
            return False
        self._failing = False
        return True

    def close(self) -> None:
        """Stop the background writes and write a last time (idempotent).

        The rows stay until they age out of ``presence_keep_seconds``.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        self.write()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait(LIMITS.presence_write_seconds)
                if self._closed:
                    return
            self.write()
