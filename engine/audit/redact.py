"""Redaction of what the call log records: tool arguments, tool names and session ids.

No token, key or file content is ever written to the call log: file content
becomes its size and SHA-256, token-like text its length, and everything else is
bounded (docs/audit.md, *What an entry holds*). Pure: values in, loggable
``chit-det/1`` values out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Final

from engine.auth import cbor
from engine.limits import LIMITS

__all__ = [
    "CONTENT_FIELDS",
    "redact_arguments",
    "redact_label",
]

CONTENT_FIELDS: Final = frozenset({"content"})
"""Argument names whose value is file content: logged as ``{size, sha256}`` only."""

# A chit token anywhere in a string ("chit_" then base64url), or a long run of
# base64url alone (a token with its prefix stripped): the whole string is dropped.
_TOKEN_LIKE = re.compile(r"chit_[A-Za-z0-9_-]{16}|[A-Za-z0-9_-]{96}")

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
        ``value`` if it is text of at most ``LIMITS.calllog_label_chars`` characters,
        NFC and token-free; otherwise ``~not-text``, ``~token-like``,
        ``~too-long`` or ``~not-nfc``.
    """
    if not isinstance(value, str):
        return "~not-text"
    if _clean_text(value, LIMITS.calllog_label_chars):
        return value
    if _TOKEN_LIKE.search(value):
        return "~token-like"
    return "~too-long" if len(value) > LIMITS.calllog_label_chars else "~not-nfc"


def _text(value: str) -> Any:
    if _clean_text(value, LIMITS.calllog_text_chars):
        return value
    if _TOKEN_LIKE.search(value):
        return {"redacted": "token-like text", "chars": len(value)}
    raw = value.encode("utf-8", "surrogatepass")
    out: dict[str, Any] = _digest(raw)
    prefix = value[: LIMITS.calllog_text_chars]
    if len(value) > LIMITS.calllog_text_chars and _clean_text(prefix, LIMITS.calllog_text_chars):
        out["prefix"] = prefix
    elif len(value) <= LIMITS.calllog_text_chars:
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
        if depth >= LIMITS.calllog_argument_depth_levels:
            return {"omitted": "nested too deep"}
        if isinstance(value, dict):
            return _object(value, depth, sealed)
        items = [_value(v, depth + 1, sealed) for v in value[: LIMITS.calllog_items]]
        if len(value) > LIMITS.calllog_items:
            items.append({"omitted_items": len(value) - LIMITS.calllog_items})
        return items
    return {"type": type(value).__name__[: LIMITS.calllog_key_chars]}


def _object(
    value: Mapping[Any, Any], depth: int, sealed: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    encoding = value.get("encoding")
    for i, (key, item) in enumerate(value.items()):
        if i >= LIMITS.calllog_items:
            out["~omitted"] = len(value) - LIMITS.calllog_items
            break
        clean = isinstance(key, str) and _clean_text(key, LIMITS.calllog_key_chars)
        name = key if clean else f"~{i}"
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
    sibling ``encoding`` is ``base64``). Text longer than ``LIMITS.calllog_text_chars``
    keeps its size, SHA-256 and a prefix; text holding anything token-like keeps
    only its length; lists and objects keep ``LIMITS.calllog_items`` members and
    ``LIMITS.calllog_argument_depth_levels`` levels; floats and huge integers are described.
    If the result still encodes to more than ``LIMITS.calllog_arguments_bytes``, only
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
    if len(repr(out)) * 4 <= LIMITS.calllog_arguments_bytes:
        return out
    encoded = cbor.encode(out)
    if len(encoded) > LIMITS.calllog_arguments_bytes:
        return {"omitted": "arguments too large", **_digest(encoded)}
    return out
