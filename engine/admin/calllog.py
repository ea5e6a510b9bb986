"""The auditor's view of the call log: show its entries, verify its signed chain.

``chit audit log show|verify`` call these, with the ``--since`` and ``--anchor``
parsers. The log's format and checks are in docs/audit.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.audit import calllog, logverify
from engine.errors import ConfigurationError
from engine.state.sqlite import SQLiteStore, open_store

__all__ = ["call_log_entries", "parse_anchor", "parse_since", "verify_call_log"]

_ANCHOR = re.compile(r"^([0-9]{1,18}):(sha256:[0-9a-f]{64})$")


def _state(home: str | os.PathLike[str]) -> SQLiteStore:
    if not (Path(home) / "state.db").is_file():
        raise ConfigurationError(f"no state store at {Path(home) / 'state.db'}")
    return open_store(home)


def parse_since(text: str) -> int:
    """Parse ``--since``: unix seconds, or ISO-8601 (no zone: UTC).

    Raises:
        ValueError: If ``text`` is neither.
    """
    text = text.strip()
    if re.fullmatch(r"[0-9]{1,12}", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("--since is unix seconds or ISO-8601, e.g. 2026-12-01T09:30Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


def parse_anchor(text: str) -> tuple[int, str]:
    """Parse ``--anchor SEQ:sha256:HEX`` (an entry and hash from an earlier verify).

    Raises:
        ValueError: If ``text`` is not of that form.
    """
    match = _ANCHOR.fullmatch(text.strip())
    if match is None:
        raise ValueError("--anchor is SEQ:sha256:<64 hex digits>, as `verify --json` prints")
    return int(match.group(1)), match.group(2)


def verify_call_log(
    home: str | os.PathLike[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    anchors: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """Verify the home's call log (:func:`engine.audit.logverify.verify`).

    Raises:
        ConfigurationError: If the home has no state store.
    """
    store = _state(home)
    return logverify.verify(store.log_rows(), store.log_head(), public_keys, anchors=anchors)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def call_log_entries(
    home: str | os.PathLike[str], *, agent: str | None = None, since: int | None = None
) -> Iterator[dict[str, Any]]:
    """The stored entries, oldest first, as JSON-ready dicts (``prev`` in hex).

    Unverified: ``chit audit log verify`` says whether they can be trusted. An
    entry that does not decode is shown as ``{"seq", "undecodable": reason}``.

    Args:
        home: The chit home.
        agent: Only entries for this agent (``-``: tokens that did not verify;
            ``(operator)``: freeze changes).
        since: Only entries at or after this time, unix seconds.

    Raises:
        ConfigurationError: If the home has no state store.
    """
    for row in _state(home).log_rows(agent=agent, since=since):
        try:
            entry = calllog.decode_entry(row.entry)
        except ValueError as exc:
            yield {"seq": row.seq, "undecodable": str(exc)}
            continue
        if (agent is not None and entry["agent"] != agent) or (
            since is not None and entry["time"] < since
        ):
            continue
        yield _plain(entry)
