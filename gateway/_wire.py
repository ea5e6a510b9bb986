"""The engine API's wire format, shared by the engine server and the remote client.

``chit-engine/1`` (docs/engine-api.md): JSON over HTTP/1.1 on a unix socket or a
loopback TCP port, under the path prefix ``/v1``. Both sides parse JSON strictly:
UTF-8 only (no byte-order mark), no duplicate object keys, no ``NaN`` or
``Infinity``, no lone surrogates, bounded nesting.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "API",
    "CHANGES_PATH",
    "EDGE_HEADER",
    "HEALTH_PATH",
    "INVOKE_PATH",
    "MAX_DEPTH",
    "OFFER_PATH",
    "WARNING_PATH",
    "WireError",
    "error",
    "is_approval_id",
    "loads_strict",
]

API = "chit-engine/1"
PREFIX = "/v1"
OFFER_PATH = f"{PREFIX}/offer"
INVOKE_PATH = f"{PREFIX}/invoke"
HEALTH_PATH = f"{PREFIX}/health"
CHANGES_PATH = f"{PREFIX}/changes"
EDGE_HEADER = "chit-edge"  # host/pid of the edge, untrusted (docs/engine-api.md)
WARNING_PATH = f"{PREFIX}/warning"
MAX_DEPTH = 64  # objects and arrays nested deeper than this are refused
_APPROVAL_ID = re.compile(r"apr_[a-z2-7]{26}")  # docs/approvals.md


def is_approval_id(value: object) -> bool:
    """Whether ``value`` is an approval id: ``apr_`` and 26 lowercase base32 letters.

    ``POST /v1/invoke`` refuses an ``approval`` of any other form before the
    engine sees it.
    """
    return isinstance(value, str) and _APPROVAL_ID.fullmatch(value) is not None


class WireError(ValueError):
    """A body that is not the strict JSON the API speaks (the message is caller-safe)."""


def error(code: str, message: str, **hints: Any) -> dict[str, Any]:
    """Return the engine's refusal shape ``{"ok": false, "error": {...}}``.

    Args:
        code: A stable code from docs/errors.md.
        message: A caller-safe explanation.
        **hints: Extra JSON fields for the caller (for example ``fields``).

    Returns:
        The answer, exactly as :class:`engine.service.Engine` shapes refusals.
    """
    return {"ok": False, "error": {"error": code, "message": message, **hints}}


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise WireError("duplicate object key")
        doc[key] = value
    return doc


def _constant(_name: str) -> Any:
    raise WireError("NaN and Infinity are not JSON")


def _check_tree(value: Any, depth: int = 0) -> None:
    """Refuse lone surrogates and nesting deeper than :data:`MAX_DEPTH`."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise WireError("a string holds a lone surrogate") from None
        return
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH} levels")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str):
                _check_tree(key, depth + 1)
            _check_tree(item, depth + 1)


def loads_strict(raw: bytes) -> Any:
    """Parse one JSON document strictly.

    Args:
        raw: The body bytes.

    Returns:
        The parsed value.

    Raises:
        WireError: If the bytes are not UTF-8 (or start with a byte-order mark),
            not JSON, repeat an object key, hold ``NaN``/``Infinity`` or a lone
            surrogate escape, nest deeper than :data:`MAX_DEPTH`, or hold an
            integer too long to convert.
    """
    if raw.startswith(b"\xef\xbb\xbf"):
        raise WireError("a byte-order mark is not allowed")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("the body is not UTF-8") from None
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except WireError:
        raise
    except RecursionError:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        # json.JSONDecodeError and int-conversion limits; their text quotes input.
        raise WireError("the body is not valid JSON") from None
    _check_tree(doc)
    return doc
