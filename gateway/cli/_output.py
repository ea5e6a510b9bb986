"""How the CLI's commands answer: exit statuses, JSON, terminal-safe text, new files.

Whatever a command prints that came from elsewhere (a token's agent, a freeze
reason, a call-log entry) goes through :func:`shown` or :func:`term`, never
raw: it could hold control sequences. Exit statuses: docs/errors.md.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_OK",
    "print_json",
    "shown",
    "term",
    "when",
    "write_new_file",
]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def print_json(doc: Any) -> None:
    """Print ``doc`` as indented JSON with sorted keys."""
    print(json.dumps(doc, indent=2, sort_keys=True))


def shown(value: object) -> str:
    """Render untrusted text for a terminal: escapes, never control sequences."""
    return json.dumps(value, ensure_ascii=True)


def term(value: object) -> str:
    """Untrusted text for a terminal: as is if plain printable ASCII, else JSON-escaped."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if text and all("!" <= c <= "~" for c in text):
        return text
    return json.dumps(text, ensure_ascii=True)


def when(seconds: int) -> str:
    """``seconds`` (unix) as ISO-8601 UTC, to the second."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_new_file(path: str, text: str, mode: int) -> None:
    """Write ``text`` to a file that must not exist yet (``O_EXCL``), with ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
