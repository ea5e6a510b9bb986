"""The call log: every tool call and token exchange, allowed or refused, in a signed hash chain.

Each entry (``chit-call-log/1``) is a ``chit-det/1`` map: sequence number,
``prev`` (SHA-256 of the previous entry's bytes, 32 zero bytes for the first),
time, the signing key id, agent (``-`` when the token did not verify), the
delegation chain's block ids, session, tool, the arguments with file contents
replaced by their size and SHA-256 and everything else bounded, the decision and
its code, and the policy and catalog hashes. A token exchange (engine/exchange.py)
is an entry too: agent :data:`EXCHANGE_AGENT`, tool :data:`EXCHANGE_TOOL`, and
what it verified and minted as its arguments. Entries live in ``<home>/state.db``
(:meth:`engine.state.SQLiteStore.append_log`, one ``BEGIN IMMEDIATE`` transaction
per call, so appends from several processes never fork the chain).

Each append makes one Ed25519 signature, with the engine's signing key, over
:data:`HEAD_CONTEXT` + the chain *head* at that entry: ``{v, seq, hash, kid,
time}`` naming the entry's sequence number and SHA-256 (:func:`entry_head`).
That signature is stored with the entry (it authenticates the entry through its
hash) and, with the head bytes, as the log's current head (it says how long the
log is). :func:`verify` therefore detects an edited, deleted, inserted or reordered entry
(signatures, sequence numbers and ``prev`` links), and a tail cut off (the head
names an entry that is gone), against anyone who can write ``state.db`` but does
not hold the signing key. Limits (docs/audit.md, *The call log*): a holder of
the key can rewrite everything; a copy of an older head and its signature lets
someone cut the log back to that head unless an anchor (a ``(seq, hash)`` pair
kept elsewhere, :func:`verify`'s ``anchors``) says otherwise; deleting the whole
log looks like a fresh one.

No token, key or file content is ever written: arguments pass through
:func:`redact_arguments`, and token-like text anywhere is replaced by its size.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from engine.auth import cbor, signkeys
from engine.errors import ProfileError
from engine.state import GENESIS, LogAppend, LogRow, Store

__all__ = [
    "EXCHANGE_AGENT",
    "EXCHANGE_TOOL",
    "HEAD_CONTEXT",
    "LOG_VERSION",
    "CallRecord",
    "LogSigner",
    "append",
    "decode_entry",
    "entry_head",
    "redact_arguments",
    "redact_label",
    "verify",
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

MAX_TEXT_CHARS: Final = 256
MAX_LABEL_CHARS: Final = 128
MAX_KEY_CHARS: Final = 64
MAX_ITEMS: Final = 32
MAX_ARGUMENT_DEPTH: Final = 4
MAX_ARGUMENTS_BYTES: Final = 8192
MAX_ENTRY_BYTES: Final = 65536
CONTENT_FIELDS: Final = frozenset({"content"})
"""Argument names whose value is file content: logged as ``{size, sha256}`` only."""

# A chit token anywhere in a string ("chit_" then base64url), or a long run of
# base64url alone (a token with its prefix stripped): the whole string is dropped.
_TOKEN_LIKE = re.compile(r"chit_[A-Za-z0-9_-]{16}|[A-Za-z0-9_-]{96}")
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


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _digest(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "sha256": _sha256(data)}


def _clean_text(value: str, limit: int) -> bool:
    """True iff ``value`` may be logged verbatim: short, NFC UTF-8, no token in it."""
    if len(value) > limit or _TOKEN_LIKE.search(value):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return unicodedata.is_normalized("NFC", value)


def redact_label(value: object) -> str:
    """A tool name or session id as it may be logged: itself if clean, else a marker.

    Args:
        value: Whatever the edge sent (untrusted).

    Returns:
        ``value`` if it is text of at most :data:`MAX_LABEL_CHARS` characters,
        NFC and token-free; otherwise ``~not-text``, ``~token-like``,
        ``~too-long`` or ``~not-nfc``.
    """
    if not isinstance(value, str):
        return "~not-text"
    if _clean_text(value, MAX_LABEL_CHARS):
        return value
    if _TOKEN_LIKE.search(value):
        return "~token-like"
    return "~too-long" if len(value) > MAX_LABEL_CHARS else "~not-nfc"


def _text(value: str) -> Any:
    if _clean_text(value, MAX_TEXT_CHARS):
        return value
    if _TOKEN_LIKE.search(value):
        return {"redacted": "token-like text", "chars": len(value)}
    raw = value.encode("utf-8", "surrogatepass")
    out: dict[str, Any] = _digest(raw)
    prefix = value[:MAX_TEXT_CHARS]
    if len(value) > MAX_TEXT_CHARS and _clean_text(prefix, MAX_TEXT_CHARS):
        out["prefix"] = prefix
    elif len(value) <= MAX_TEXT_CHARS:
        out["text"] = "not NFC UTF-8"
    return out


def _content(value: object, encoding: object) -> dict[str, Any]:
    """File content as ``{size, sha256}`` of the bytes the call would write."""
    data: bytes | None = None
    if isinstance(value, str):
        if encoding == "base64":
            try:
                data = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                data = None
        if data is None:
            data = value.encode("utf-8", "surrogatepass")
        return _digest(data)
    try:
        data = json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr).encode()
    except (TypeError, ValueError, RecursionError):
        return {"size": None, "sha256": None}
    return _digest(data)


def _value(value: object, depth: int, sealed: Callable[[str], bool] | None = None) -> Any:
    if value is None or type(value) is bool:
        return value
    if type(value) is int:
        return value if -(2**64) <= value <= 2**64 - 1 else {"int_bits": value.bit_length()}
    if isinstance(value, str):
        return _text(str(value))
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, list | tuple | dict):
        if depth >= MAX_ARGUMENT_DEPTH:
            return {"omitted": "nested too deep"}
        if isinstance(value, dict):
            return _object(value, depth, sealed)
        items = [_value(v, depth + 1, sealed) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append({"omitted_items": len(value) - MAX_ITEMS})
        return items
    return {"type": type(value).__name__[:MAX_KEY_CHARS]}


def _object(
    value: Mapping[Any, Any], depth: int, sealed: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    encoding = value.get("encoding")
    for i, (key, item) in enumerate(value.items()):
        if i >= MAX_ITEMS:
            out["~omitted"] = len(value) - MAX_ITEMS
            break
        name = key if isinstance(key, str) and _clean_text(key, MAX_KEY_CHARS) else f"~{i}"
        while name in out:
            name += "~"
        if name in CONTENT_FIELDS:
            out[name] = _content(item, encoding)
            path = value.get("path")
            if sealed is not None and isinstance(path, str) and _sealed_path(sealed, path):
                # A hash of protected plaintext would let a short secret be guessed.
                out[name] = {"size": out[name]["size"], "sealed": True}
        else:
            out[name] = _value(item, depth + 1, sealed)
    return out


def _sealed_path(sealed: Callable[[str], bool], path: str) -> bool:
    try:
        return bool(sealed(path))
    except Exception:  # an invalid path: err on the side of not hashing
        return True


def redact_arguments(arguments: object, sealed: Callable[[str], bool] | None = None) -> Any:
    """Tool arguments as the log keeps them.

    Every field named ``content`` (at any depth, under any tool name) becomes
    ``{"size", "sha256"}`` of the bytes it would write (base64 decoded when the
    sibling ``encoding`` is ``base64``). Text longer than :data:`MAX_TEXT_CHARS`
    keeps its size, SHA-256 and a prefix; text holding anything token-like keeps
    only its length; lists and objects keep :data:`MAX_ITEMS` members and
    :data:`MAX_ARGUMENT_DEPTH` levels; floats and huge integers are described.
    If the result still encodes to more than :data:`MAX_ARGUMENTS_BYTES`, only
    its size and hash are kept.

    Content written to a path ``sealed`` says is protected (sealed at rest) keeps
    only its size: a hash of protected plaintext would let a short secret be
    guessed from the log.

    Args:
        arguments: The JSON arguments object as the edge sent it (untrusted).
        sealed: Whether a repository path is protected by the policy now.

    Returns:
        A ``chit-det/1`` value.
    """
    out = _value(arguments, 0, sealed)
    # repr() is never shorter than a quarter of the encoding (UTF-8 takes at most
    # 4 bytes per character, and each CBOR head is matched by repr's quotes,
    # brackets or separators), so small arguments skip the exact check.
    if len(repr(out)) * 4 <= MAX_ARGUMENTS_BYTES:
        return out
    encoded = cbor.encode(out)
    if len(encoded) > MAX_ARGUMENTS_BYTES:
        return {"omitted": "arguments too large", **_digest(encoded)}
    return out


@dataclass(frozen=True)
class CallRecord:
    """What the engine knows about one call, before it becomes an entry.

    Attributes:
        time: Unix seconds (the engine's clock).
        agent: The verified token's agent, or ``-``.
        chain: Block ids of the root and of every delegation block, root first;
            empty when the token did not verify.
        session: The edge's session id (redacted by :func:`redact_label`).
        tool: The tool name as sent (redacted by :func:`redact_label`).
        arguments: Already passed through :func:`redact_arguments`.
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
        value = cbor.decode(data, max_size=MAX_ENTRY_BYTES)
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


def _verify_sig(
    public_keys: Mapping[str, Ed25519PublicKey], kid: str, sig: object, message: bytes
) -> str | None:
    key = public_keys.get(kid)
    if key is None:
        return f"signed by unknown key id {kid!r}"
    if not isinstance(sig, bytes):
        return "the signature is missing"
    try:
        key.verify(sig, message)
    except InvalidSignature:
        return "the signature does not verify"
    return None


class _Report:
    def __init__(self) -> None:
        self.findings: list[dict[str, Any]] = []

    def add(self, seq: int | None, check: str, reason: str) -> None:
        self.findings.append({"seq": seq, "check": check, "reason": reason})


def _missing(first: int, last: int) -> str:
    return f"entry {first} is missing" if first == last else f"entries {first}..{last} are missing"


def verify(
    rows: Iterable[LogRow],
    head: tuple[Any, Any, Any, Any] | None,
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    anchors: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """Verify the call log: every entry, every link, the head and any anchors.

    Checks, each finding naming the entry (``seq``) it is about:

    - ``decodes``: the entry is a ``chit-call-log/1`` entry in ``chit-det/1``;
    - ``signature``: the entry's Ed25519 signature (over the chain head at that
      entry, :func:`entry_head`) verifies under a known key;
    - ``sequence``: the row's number is the entry's own, and numbers run 1, 2, ...
      without a gap (a deleted entry) or a repeat;
    - ``chain``: ``prev`` is the SHA-256 of the previous entry's bytes;
    - ``columns``: the row's ``time`` and ``agent`` columns (used by ``show``
      filters) equal the signed entry's;
    - ``head``: the signed head names the last entry's number and hash (a cut
      tail, or entries appended by someone without the key);
    - ``anchor``: each anchor's entry exists with that hash.

    Args:
        rows: Stored rows in ascending ``seq`` (:meth:`SQLiteStore.log_rows`).
        head: The stored head ``(seq, hash, head bytes, sig)`` or ``None``.
        public_keys: Trusted key id to Ed25519 public key (retired keys included).
        anchors: ``{seq: "sha256:<hex>"}`` recorded earlier from a verified log.

    Returns:
        ``{"ok", "entries", "head": {"seq", "hash"} | None, "findings": [{"seq",
        "check", "reason"}]}``; ``ok`` iff there is no finding.
    """
    report = _Report()
    wanted = dict(anchors or {})
    seen_anchor: dict[int, str] = {}
    prev_seq, prev_hash, count = 0, GENESIS, 0
    for row in rows:
        count += 1
        seq = int(row.seq)
        data = row.entry if isinstance(row.entry, bytes) else b""
        digest = hashlib.sha256(data).digest()
        if seq in wanted:
            seen_anchor[seq] = "sha256:" + digest.hex()
        if seq <= prev_seq:
            report.add(seq, "sequence", f"entry {seq} repeats or precedes entry {prev_seq}")
        elif seq != prev_seq + 1:
            report.add(seq, "sequence", f"{_missing(prev_seq + 1, seq - 1)} before entry {seq}")
        try:
            entry = decode_entry(row.entry)
        except ValueError as exc:
            report.add(seq, "decodes", str(exc))
            prev_seq, prev_hash = seq, digest
            continue
        signed = entry_head(entry["seq"], data, entry["kid"], entry["time"])
        problem = _verify_sig(public_keys, entry["kid"], row.sig, HEAD_CONTEXT + signed)
        if problem:
            report.add(seq, "signature", problem)
        if entry["seq"] != seq:
            report.add(seq, "sequence", f"row {seq} holds entry {entry['seq']}")
        if entry["prev"] != prev_hash:
            after = f"entry {prev_seq}" if prev_seq else "the start of the log"
            lost = " (it starts a new chain: the head was lost)" if entry["prev"] == GENESIS else ""
            report.add(seq, "chain", f"entry {seq}'s prev is not the hash of {after}{lost}")
        if row.time != entry["time"] or row.agent != entry["agent"]:
            report.add(seq, "columns", f"row {seq}'s time or agent column differs from its entry")
        prev_seq, prev_hash = seq, digest
    shown_head: dict[str, Any] | None = None
    if head is None:
        if count:
            report.add(prev_seq, "head", "the chain head is missing")
    else:
        shown_head = _check_head(report, head, public_keys, count, prev_seq, prev_hash)
    for seq, expected in sorted(wanted.items()):
        if seq not in seen_anchor:
            report.add(seq, "anchor", f"anchored entry {seq} is missing")
        elif seen_anchor[seq] != expected:
            report.add(seq, "anchor", f"entry {seq}'s hash differs from the anchor")
    return {
        "ok": not report.findings,
        "entries": count,
        "head": shown_head,
        "findings": report.findings,
    }


def _check_head(
    report: _Report,
    head: tuple[Any, Any, Any, Any],
    public_keys: Mapping[str, Ed25519PublicKey],
    count: int,
    last_seq: int,
    last_hash: bytes,
) -> dict[str, Any] | None:
    col_seq, col_hash, data, sig = head
    try:
        value = cbor.decode(data, max_size=4096) if isinstance(data, bytes) else None
    except ProfileError:
        value = None
    decoded = _shaped(value, _HEAD_KEYS)
    if decoded is None or decoded["v"] != LOG_VERSION or len(decoded["hash"]) != 32:
        report.add(None, "head", "the chain head does not decode")
        return None
    seq, digest = decoded["seq"], decoded["hash"]
    problem = _verify_sig(public_keys, decoded["kid"], sig, HEAD_CONTEXT + data)
    if problem:
        report.add(seq, "head", f"the chain head: {problem}")
    if col_seq != seq or col_hash != digest:
        report.add(seq, "head", "the head's seq or hash column differs from the signed head")
    if not count:
        report.add(seq, "head", f"the head names entry {seq} but the log is empty")
    elif seq > last_seq:
        report.add(
            seq, "head", f"the head names entry {seq}; the log ends at {last_seq}: "
            + _missing(last_seq + 1, seq)
        )
    elif seq < last_seq:
        report.add(
            seq + 1, "head", f"the head names entry {seq} but the log goes on to {last_seq}"
        )
    elif digest != last_hash:
        report.add(seq, "head", f"entry {seq} is not the entry the head names")
    return {"seq": seq, "hash": "sha256:" + digest.hex()}
