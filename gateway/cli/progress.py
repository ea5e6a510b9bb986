"""A progress bar on stderr for long commands (``chit index``, ``chit audit verify``).

Drawn only when stderr is a terminal, at most ten times a second; otherwise
nothing is written, so logs and pipes stay clean (docs/cli.md).
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

__all__ = ["Bar"]

_EVERY = 0.1  # seconds between redraws


class Bar:
    """One line, redrawn in place: ``message [#####-----] done/total``.

    Args:
        stream: Where to draw (default: stderr).
        enabled: Draw at all (default: when ``stream`` is a terminal).

    Call it as an ``engine.progress`` listener: ``bar(done, total, message)``;
    :meth:`close` ends the line.
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = self._stream.isatty() if enabled is None else enabled
        self._drawn = 0.0
        self._shown = False

    def __repr__(self) -> str:
        return f"Bar(enabled={self._enabled})"

    def __call__(self, done: int, total: int | None, message: str) -> None:
        """Draw the newest state, unless the last draw was under 0.1 s ago (the end always)."""
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._drawn < _EVERY and done != total:
            return
        self._drawn = now
        width = shutil.get_terminal_size((80, 24)).columns
        if total:
            count = f" {done}/{total}"
            room = max(10, min(40, width - len(message) - len(count) - 4))
            filled = min(room, room * done // total)
            line = f"{message} [{'#' * filled}{'-' * (room - filled)}]{count}"
        else:
            line = f"{message}: {done}"
        self._stream.write("\r" + line[: width - 1].ljust(width - 1))
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the bar's line (nothing if none was drawn)."""
        if self._shown:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = False
