"""The call log's entries: every tool call and token exchange, allowed or refused.

This module is the entry format (docs/audit.md §8, *What an entry holds*):
``chit-call-log/2`` entries built from a :class:`CallRecord`, and the decoding
of stored entries of both forms, with the ``chit-call-log/1`` chain head that
older logs signed entry by entry. The tree and its checkpoints are
engine/audit/tlog.py; arguments are redacted before they get here
(engine/audit/redact.py); engine/audit/logverify.py verifies the log.
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

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.auth import cbor, signkeys
from engine.errors import ProfileError
from engine.limits import LIMITS

__all__ = [
    "EXCHANGE_AGENT",
    "EXCHANGE_TOOL",
    "HEAD_CONTEXT",
    "LEGACY_VERSION",
    "LOG_VERSION",
    "CallRecord",
    "LogSigner",
    "decode_entry",
    "decode_head",
    "encode_entry",
    "entry_head",
]

LOG_VERSION: Final = "chit-call-log/2"
"""Entries of the transparency-log form: leaves of the tree, signed by its checkpoints."""
LEGACY_VERSION: Final = "chit-call-log/1"
"""Entries of the first form, each signed (through its chain head) when appended."""
HEAD_CONTEXT: Final = b"chit-call-log/1 head\x00"
"""Prefixed to a ``chit-call-log/1`` chain head's bytes before signing (domain separation)."""
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
_REPO_ENTRY_KEYS = {**_ENTRY_KEYS, "repo": str}
"""A ``chit-call-log/2`` entry of a call on a named repository also holds ``repo``."""
_LEGACY_ENTRY_KEYS = {**_ENTRY_KEYS, "kid": str}
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
        repo: The repository the call was made on (its name; the name as sent,
            redacted, if it was not one), ``None`` when none was named or
            implied (the entry then has no ``repo`` field, as before
            repositories had names).
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
    repo: str | None = None


class LogSigner:
    """The engine's active signing key, cached between checkpoints.

    The key is reloaded when ``<home>/keys/signing`` changes (a rotation writes a
    file there) and at least once a second, so one directory ``stat`` is the
    usual cost of a checkpoint.

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


def encode_entry(seq: int, prev: bytes, record: CallRecord) -> bytes:
    """A ``chit-call-log/2`` entry's ``chit-det/1`` bytes.

    Args:
        seq: The entry's sequence number (from 1; leaf ``seq - 1`` of the tree).
        prev: SHA-256 of the previous entry's bytes (32 zero bytes for entry 1).
        record: The call.

    Returns:
        The entry bytes (docs/audit.md §8, *What an entry holds*); ``repo`` is
        there only when the record names one.

    Raises:
        ProfileError: If the record is outside ``chit-det/1`` (a programming error).
    """
    entry: dict[str, Any] = {
        "v": LOG_VERSION,
        "seq": seq,
        "prev": prev,
        "time": record.time,
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
    if record.repo is not None:
        entry["repo"] = record.repo
    return cbor.encode(entry)


def entry_head(seq: int, entry: bytes, kid: str, time: int) -> bytes:
    """The chain head at a ``chit-call-log/1`` entry: what the entry's signature signs.

    Args:
        seq: The entry's sequence number (from 1).
        entry: The entry's ``chit-det/1`` bytes.
        kid: The signing key id named in the entry.
        time: The entry's time, unix seconds.

    Returns:
        ``chit-det/1`` bytes of ``{"v": LEGACY_VERSION, "seq", "hash": SHA-256 of
        entry, "kid", "time"}`` (docs/audit.md, *How it is protected*); the
        signature is over :data:`HEAD_CONTEXT` + these bytes.
    """
    return cbor.encode(
        {
            "v": LEGACY_VERSION,
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


def decode_entry(data: object, *, strict: bool = True) -> dict[str, Any]:
    """Decode stored entry bytes under ``chit-det/1`` and check the entry's shape.

    Args:
        data: The stored bytes (untrusted).
        strict: Refuse any encoding but the profile's own (engine/auth/cbor.py).
            ``False`` only for bytes already authenticated through a verified
            checkpoint: they are decoded by cbor2's C decoder, within the same
            size bound and shape checks.

    Returns:
        The entry map: a ``chit-call-log/2`` entry (with ``repo`` when the
        call named a repository), or a ``chit-call-log/1`` one (which also has
        ``kid``).

    Raises:
        ValueError: If the bytes are an entry of neither form.
    """
    if not isinstance(data, bytes):
        raise ValueError("the stored entry is not bytes")
    if not strict and len(data) <= LIMITS.calllog_entry_bytes:  # the verifier's usual case
        try:
            fast = cbor2.loads(data)
        except Exception:  # cbor2 raises several kinds on malformed input
            fast = None
        if type(fast) is dict and _is_v2_shape(fast):
            return fast
    value: object
    if strict:
        try:
            value = cbor.decode(data, max_size=LIMITS.calllog_entry_bytes)
        except ProfileError as exc:
            raise ValueError(f"not chit-det/1: {exc.reason}") from None
    else:
        value = _loads(data)
    if type(value) is dict and _is_v2_shape(value):
        return value
    version = value.get("v") if isinstance(value, dict) else None
    if version == LEGACY_VERSION:
        shape = _LEGACY_ENTRY_KEYS
    else:
        shape = _REPO_ENTRY_KEYS if isinstance(value, dict) and "repo" in value else _ENTRY_KEYS
    entry = _shaped(value, shape)
    if (
        entry is None
        or entry["v"] not in (LOG_VERSION, LEGACY_VERSION)
        or len(entry["prev"]) != 32
        or entry["decision"] not in DECISIONS
        or not all(isinstance(c, str) for c in entry["chain"])
    ):
        raise ValueError("not a chit-call-log entry")
    return entry


def _is_v2_shape(e: dict[str, Any]) -> bool:
    """A ``chit-call-log/2`` entry's keys, with or without ``repo``, and their types."""
    keys = e.keys()
    if keys == _ENTRY_KEYS.keys():
        return _is_v2(e)
    return keys == _REPO_ENTRY_KEYS.keys() and type(e["repo"]) is str and _is_v2(e)


def _is_v2(e: dict[str, Any]) -> bool:
    """The common case of :func:`decode_entry`'s shape check, unrolled (it runs per entry)."""
    prev, code, catalog, chain = e["prev"], e["code"], e["catalog_hash"], e["chain"]
    return (
        e["v"] == LOG_VERSION
        and type(e["seq"]) is int
        and type(prev) is bytes
        and len(prev) == 32
        and type(e["time"]) is int
        and type(e["agent"]) is str
        and type(chain) is list
        and all(type(c) is str for c in chain)
        and type(e["session"]) is str
        and type(e["tool"]) is str
        and type(e["decision"]) is str
        and e["decision"] in DECISIONS
        and (code is None or type(code) is str)
        and type(e["policy_hash"]) is str
        and (catalog is None or type(catalog) is str)
    )


def _loads(data: bytes) -> object:
    if len(data) > LIMITS.calllog_entry_bytes:
        raise ValueError(f"not chit-det/1: more than {LIMITS.calllog_entry_bytes} bytes")
    try:
        return cbor2.loads(data)
    except Exception:  # cbor2 raises several kinds on malformed input
        raise ValueError("not chit-det/1: it does not decode") from None


def decode_head(data: object) -> dict[str, Any]:
    """Decode a stored ``chit-call-log/1`` chain head under ``chit-det/1`` and check its shape.

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
    if decoded is None or decoded["v"] != LEGACY_VERSION or len(decoded["hash"]) != 32:
        raise ValueError(f"not a {LEGACY_VERSION} chain head")
    return decoded
