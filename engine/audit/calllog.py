"""The call log: every tool call and token exchange, allowed or refused, in a signed hash chain.

This module is the ``chit-call-log/1`` entry and chain head (docs/audit.md §8,
*What an entry holds* and *How it is protected*): building an entry from a
:class:`CallRecord`, signing its head with the engine's Ed25519 key and
appending it through the state store (:meth:`engine.state.Store.append_log`,
one transaction per call), and decoding stored entries and heads. Arguments are
redacted before they get here (engine/audit/redact.py); engine/audit/logverify.py
verifies the log.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.auth import cbor, signkeys
from engine.errors import ProfileError
from engine.limits import LIMITS
from engine.state import LogAppend, Store

__all__ = [
    "EXCHANGE_AGENT",
    "EXCHANGE_TOOL",
    "HEAD_CONTEXT",
    "LOG_VERSION",
    "CallRecord",
    "LogSigner",
    "append",
    "decode_entry",
    "decode_head",
    "entry_head",
]

LOG_VERSION: Final = "chit-call-log/1"
HEAD_CONTEXT: Final = b"chit-call-log/1 head\x00"
"""Prefixed to a chain head's bytes before signing (domain separation)."""
UNKNOWN_AGENT: Final = "-"
OPERATOR: Final = "(operator)"
"""The agent recorded for operator actions (``chit freeze``); no agent name has parentheses."""
EXCHANGE_AGENT: Final = "(exchange)"
"""The agent recorded for token exchanges (``chit exchange``, ``POST /token``).

No token's call can be recorded under it (agent names have no parentheses), so
an entry with this agent was written by the exchange, whatever its tool says.
"""
EXCHANGE_TOOL: Final = "token_exchange"
"""The tool recorded for token exchanges (not a tool of the catalog)."""

_ENTRY_KEYS = {
    "v": str,
    "seq": int,
    "prev": bytes,
    "time": int,
    "kid": str,
    "agent": str,
    "chain": list,
    "session": str,
    "tool": str,
    "arguments": object,
    "decision": str,
    "code": (str, type(None)),
    "policy_hash": str,
    "catalog_hash": (str, type(None)),
}
_HEAD_KEYS = {"v": str, "seq": int, "hash": bytes, "kid": str, "time": int}
DECISIONS: Final = frozenset({"allowed", "refused", "failed"})


@dataclass(frozen=True)
class CallRecord:
    """What the engine knows about one call, before it becomes an entry.

    Attributes:
        time: Unix seconds (the engine's clock).
        agent: The verified token's agent, or ``-``.
        chain: Block ids of the root and of every delegation block, root first;
            empty when the token did not verify.
        session: The edge's session id (redacted by :func:`~engine.audit.redact.redact_label`).
        tool: The tool name as sent (redacted by :func:`~engine.audit.redact.redact_label`).
        arguments: Already passed through :func:`~engine.audit.redact.redact_arguments`.
        decision: ``allowed``, ``refused`` (an error code) or ``failed``
            (``internal_error``).
        code: The error code, ``None`` when allowed.
        policy_hash: The engine's policy hash.
        catalog_hash: The catalog offered to the token for this call, ``None``
            when the token did not verify.
    """

    time: int
    agent: str
    chain: tuple[str, ...]
    session: str
    tool: str
    arguments: Any
    decision: str
    code: str | None
    policy_hash: str
    catalog_hash: str | None


class LogSigner:
    """The engine's active signing key, cached between calls.

    The key is reloaded when ``<home>/keys/signing`` changes (a rotation writes a
    file there) and at least once a second, so one directory ``stat`` is the
    usual cost of a call.

    Args:
        home: The chit home.
    """

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self._home = Path(home)
        self._folder = os.fspath(self._home / "keys" / "signing")
        self._lock = threading.Lock()
        self._key: tuple[str, Ed25519PrivateKey] | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._loaded = 0.0

    def __repr__(self) -> str:
        return "LogSigner()"

    def current(self) -> tuple[str, Ed25519PrivateKey]:
        """Return ``(key id, private key)`` of the active signing key.

        Raises:
            ConfigurationError: If the signing keys cannot be loaded.
            OSError: If the signing key folder cannot be read.
        """
        info = os.stat(self._folder)
        stamp = (info.st_mtime_ns, info.st_ino, info.st_size)
        now = time.monotonic()
        with self._lock:
            if self._key is None or stamp != self._stamp or now - self._loaded >= 1.0:
                key = signkeys.active_signing_key(self._home)
                if self._key is None or self._key[0] != key.key_id:
                    self._key = (key.key_id, Ed25519PrivateKey.from_private_bytes(key.seed))
                self._stamp, self._loaded = stamp, now
            return self._key


def append(store: Store, signer: LogSigner, record: CallRecord) -> int:
    """Append one call to the log (one transaction, serialised across processes).

    Args:
        store: The engine's state store.
        signer: The engine's signing key cache.
        record: The call.

    Returns:
        The entry's sequence number.

    Raises:
        ProfileError: If the record is outside ``chit-det/1`` (a programming error).
        sqlite3.Error: If the store fails; nothing is appended.
    """
    kid, private = signer.current()

    def compose(seq: int, prev: bytes) -> LogAppend:
        entry = cbor.encode(
            {
                "v": LOG_VERSION,
                "seq": seq,
                "prev": prev,
                "time": record.time,
                "kid": kid,
                "agent": record.agent,
                "chain": list(record.chain),
                "session": record.session,
                "tool": record.tool,
                "arguments": record.arguments,
                "decision": record.decision,
                "code": record.code,
                "policy_hash": record.policy_hash,
                "catalog_hash": record.catalog_hash,
            }
        )
        head = entry_head(seq, entry, kid, record.time)
        sig = private.sign(HEAD_CONTEXT + head)
        return LogAppend(
            entry=entry, sig=sig, head=head, head_sig=sig, time=record.time, agent=record.agent
        )

    return store.append_log(compose)


def entry_head(seq: int, entry: bytes, kid: str, time: int) -> bytes:
    """The chain head at an entry: what the entry's signature signs.

    Args:
        seq: The entry's sequence number (from 1).
        entry: The entry's ``chit-det/1`` bytes.
        kid: The signing key id named in the entry.
        time: The entry's time, unix seconds.

    Returns:
        ``chit-det/1`` bytes of ``{"v": LOG_VERSION, "seq", "hash": SHA-256 of
        entry, "kid", "time"}`` (docs/audit.md, *How it is protected*); the
        signature is over :data:`HEAD_CONTEXT` + these bytes.
    """
    return cbor.encode(
        {
            "v": LOG_VERSION,
            "seq": seq,
            "hash": hashlib.sha256(entry).digest(),
            "kid": kid,
            "time": time,
        }
    )


def _shaped(value: object, shape: Mapping[str, Any]) -> dict[str, Any] | None:
    if not isinstance(value, dict) or set(value) != set(shape):
        return None
    for key, kind in shape.items():
        item = value[key]
        if kind is int and type(item) is not int:
            return None
        if kind is not object and not isinstance(item, kind):
            return None
    return value


def decode_entry(data: object) -> dict[str, Any]:
    """Decode stored entry bytes under ``chit-det/1`` and check the entry's shape.

    Args:
        data: The stored bytes (untrusted).

    Returns:
        The entry map.

    Raises:
        ValueError: If the bytes are not a ``chit-call-log/1`` entry.
    """
    if not isinstance(data, bytes):
        raise ValueError("the stored entry is not bytes")
    try:
        value = cbor.decode(data, max_size=LIMITS.calllog_entry_bytes)
    except ProfileError as exc:
        raise ValueError(f"not chit-det/1: {exc.reason}") from None
    entry = _shaped(value, _ENTRY_KEYS)
    if (
        entry is None
        or entry["v"] != LOG_VERSION
        or len(entry["prev"]) != 32
        or entry["decision"] not in DECISIONS
        or not all(isinstance(c, str) for c in entry["chain"])
    ):
        raise ValueError(f"not a {LOG_VERSION} entry")
    return entry


def decode_head(data: object) -> dict[str, Any]:
    """Decode stored chain-head bytes under ``chit-det/1`` and check the head's shape.

    Args:
        data: The stored head bytes (untrusted).

    Returns:
        The head map ``{"v", "seq", "hash", "kid", "time"}`` (see :func:`entry_head`).

    Raises:
        ValueError: If the bytes are not a ``chit-call-log/1`` chain head.
    """
    try:
        value = (
            cbor.decode(data, max_size=LIMITS.calllog_head_bytes)
            if isinstance(data, bytes)
            else None
        )
    except ProfileError:
        value = None
    decoded = _shaped(value, _HEAD_KEYS)
    if decoded is None or decoded["v"] != LOG_VERSION or len(decoded["hash"]) != 32:
        raise ValueError(f"not a {LOG_VERSION} chain head")
    return decoded
