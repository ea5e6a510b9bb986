"""How far the call under way has got, for a client that asked (docs/tools.md, "Progress").

Long work (the first index of a repository, a search over a large tree) calls
:func:`report`; whoever runs the call may listen with :func:`reporting`. The
listener is held in a context variable, so it belongs to one call on one
thread and nothing else hears it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = ["Reporter", "report", "reporting"]

logger = logging.getLogger("chit.engine")

Reporter = Callable[[int, int | None, str], None]
"""``(done, total or None, message)``: units of work done so far, of how many."""

_current: ContextVar[Reporter | None] = ContextVar("chit_progress", default=None)


def report(done: int, total: int | None, message: str) -> None:
    """Tell the call's listener how far the work has got; nothing if none listens.

    Cheap enough to call per file: a listener keeps only the newest report and
    sends at its own pace. A listener's failure never fails the work.

    Args:
        done: Units done so far (files indexed, files searched), from 0.
        total: Units in all, or ``None`` if unknown.
        message: A short phrase naming the work (no paths, no arguments).
    """
    listener = _current.get()
    if listener is None:
        return
    try:
        listener(done, total, message)
    except Exception:  # the work goes on without its listener
        logger.debug("a progress listener failed", exc_info=True)


@contextlib.contextmanager
def reporting(listener: Reporter) -> Iterator[None]:
    """Hear :func:`report` from the work this thread does inside the block.

    Args:
        listener: Called with ``(done, total, message)`` on every report.
    """
    token = _current.set(listener)
    try:
        yield
    finally:
        _current.reset(token)
