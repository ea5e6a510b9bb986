"""Regenerate tests/vectors/cbor_det1.json (the ``chit-det/1`` vectors).

Run from the repository root:
``PYTHONPATH=. python tests/vectors/make_cbor_vectors.py``.

Valid encodings come from cbor2's canonical mode (RFC 7049 §3.9 length-first key
order, equal to ``chit-det/1`` order for text keys), not from ``engine.auth.cbor``, so
the vectors check the engine against an independent encoder. Invalid inputs are
written out by hand, each with the reason docs/cbor-profile.md gives for it.
Regenerate only with a deliberate profile change.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path
from typing import Any

import cbor2

PROFILE = "chit-det/1"

# A JSON Schema as chit's catalogs carry them: nested maps and arrays, text keys of
# many lengths, integers, booleans and null, no floats.
SCHEMA = {
    "type": "object",
    "title": "WriteFileArgs",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 4096},
        "content": {"type": "string"},
        "encoding": {"enum": ["utf-8", "base64"], "type": "string", "default": "utf-8"},
        "mode": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
                 "default": None},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}



def _maps_in_arrays(depth: int) -> Any:
    """``{"a": [{"a": [...]}]}``: maps and arrays alternating, ``depth`` levels."""
    value: Any = 0
    for level in range(depth):
        value = [value] if level % 2 == 0 else {"a": value}
    return value


VALID: list[tuple[str, Any]] = [
    ("uint 0", 0),
    ("uint 23 (largest immediate)", 23),
    ("uint 24 (smallest 1-byte)", 24),
    ("uint 255", 255),
    ("uint 256 (smallest 2-byte)", 256),
    ("uint 65535", 65535),
    ("uint 65536 (smallest 4-byte)", 65536),
    ("uint 1000000 (RFC 8949 App. A)", 1000000),
    ("uint 2**32-1", 2**32 - 1),
    ("uint 2**32 (smallest 8-byte)", 2**32),
    ("uint 2**64-1 (largest)", 2**64 - 1),
    ("nint -1", -1),
    ("nint -24", -24),
    ("nint -25", -25),
    ("nint -256", -256),
    ("nint -257", -257),
    ("nint -65537", -65537),
    ("nint -2**32-1", -(2**32) - 1),
    ("nint -2**64 (smallest)", -(2**64)),
    ("false", False),
    ("true", True),
    ("null", None),
    ("empty text", ""),
    ("text a", "a"),
    ("NFC text é (U+00E9)", "\u00e9"),
    ("text 水 (RFC 8949 App. A)", "\u6c34"),
    ("text of 24 bytes", "x" * 24),
    ("text of 256 bytes", "y" * 256),
    ("empty bytes", b""),
    ("bytes 01020304 (RFC 8949 App. A)", bytes.fromhex("01020304")),
    ("bytes of 24 bytes", bytes(range(24))),
    ("empty array", []),
    ("empty map", {}),
    ("nested arrays [1,[2,3],[4,5]] (RFC 8949 App. A)", [1, [2, 3], [4, 5]]),
    ("array of 25 items", list(range(1, 26))),
    ("map {a:1,b:[2,3]} (RFC 8949 App. A)", {"a": 1, "b": [2, 3]}),
    ("array [a,{b:c}] (RFC 8949 App. A)", ["a", {"b": "c"}]),
    ("map key order across lengths b,aa,a,ccc", {"b": 1, "aa": 2, "a": 3, "ccc": 4}),
    ("map key order by UTF-8 length: z, ab, é", {"\u00e9": 1, "ab": 2, "z": 3}),
    ("map keys of 25, 24 and 23 bytes", {"k" * 25: 25, "k" * 24: 24, "k" * 23: 23}),
    (
        "nested maps and mixed values",
        {
            "tools": [{"name": "read", "ops": ["r"]}, {"name": "write", "ops": ["r", "w"]}],
            "version": 1,
            "digest": bytes(32),
            "ok": True,
            "note": None,
        },
    ),
    ("16 nested arrays (default depth limit)", [[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]),
    # -- added with docs/provenance-format.md: more ordering, NFC and nesting cases
    ("map key order: same length, bytewise (B < a < b)", {"b": 1, "a": 2, "B": 3}),
    ("map key order: empty key first", {"a": 1, "": 0}),
    ("map key order: 2-byte é after 1-byte z, before 3-byte €", {"\u20ac": 3, "\u00e9": 2, "z": 1}),
    ("map key order: a key of 256 bytes after one of 255", {"k" * 256: 2, "m" * 255: 1}),
    ("NFC text Å (U+00C5, the NFC of U+212B and of A + U+030A)", "\u00c5"),
    ("NFC text 한 (U+D55C, precomposed Hangul)", "\ud55c"),
    ("NFC text with a combining mark NFC keeps (q + U+0307)", "q\u0307"),
    ("NFC text as a map key: {é: [é]}", {"\u00e9": ["\u00e9"]}),
    ("text 𝄞 (U+1D11E, 4 UTF-8 bytes)", "\U0001d11e"),
    ("nested JSON Schema (a tool's input schema)", SCHEMA),
    ("maps and arrays nested 16 deep (default depth limit)", _maps_in_arrays(16)),
]

# (name, input hex, reason). Reasons as docs/cbor-profile.md §3 gives them.
INVALID: list[tuple[str, str, str]] = [
    ("empty input", "", "truncated input"),
    ("half float 1.0", "f93c00", "float not allowed"),
    ("single float 100000.0", "fa47c35000", "float not allowed"),
    ("double float 1.1", "fb3ff199999999999a", "float not allowed"),
    ("tag 2 bignum 2**64", "c249010000000000000000", "tag not allowed"),
    ("tag 1 epoch datetime", "c11a514b67b0", "tag not allowed"),
    ("tag 24 embedded CBOR", "d818420001", "tag not allowed"),
    ("indefinite array", "9f01ff", "indefinite length not allowed"),
    ("indefinite map", "bf616101ff", "indefinite length not allowed"),
    ("indefinite bytes", "5f4101ff", "indefinite length not allowed"),
    ("indefinite text", "7f616161ff", "indefinite length not allowed"),
    ("uint with additional info 31", "1f", "indefinite length not allowed"),
    ("non-shortest uint 5 in 1 byte", "1805", "argument not in shortest form"),
    ("non-shortest uint 255 in 2 bytes", "1900ff", "argument not in shortest form"),
    ("non-shortest uint 65535 in 4 bytes", "1a0000ffff", "argument not in shortest form"),
    ("non-shortest uint 2**32-1 in 8 bytes", "1b00000000ffffffff",
     "argument not in shortest form"),
    ("non-shortest nint -1 in 1 byte", "3800", "argument not in shortest form"),
    ("non-shortest bytes length 1 in 1 byte", "580100", "argument not in shortest form"),
    ("non-shortest text length 1 in 2 bytes", "79000161", "argument not in shortest form"),
    ("non-shortest array length 1 in 1 byte", "980100", "argument not in shortest form"),
    ("non-shortest map length 1 in 1 byte", "b801616100", "argument not in shortest form"),
    ("duplicate map key", "a2616101616102", "duplicate map key"),
    ("map keys out of order b before a", "a2616201616101", "map keys out of order"),
    ("map keys out of order aa before b (length-first)", "a262616101616202",
     "map keys out of order"),
    ("map key is an integer", "a10100", "map key is not a text string"),
    ("map key is bytes", "a1410100", "map key is not a text string"),
    ("map key is an array", "a1800100", "map key is not a text string"),
    ("non-NFC text e + U+0301", "6365cc81", "text is not NFC"),
    ("invalid UTF-8 lone continuation", "6180", "invalid UTF-8"),
    ("invalid UTF-8 byte ff", "61ff", "invalid UTF-8"),
    ("invalid UTF-8 overlong NUL", "62c080", "invalid UTF-8"),
    ("invalid UTF-8 surrogate U+D800", "63eda080", "invalid UTF-8"),
    ("trailing bytes", "0000", "trailing bytes after item"),
    ("truncated argument", "1a0000", "truncated input"),
    ("truncated text", "6261", "length exceeds input"),
    ("truncated array", "8201", "length exceeds input"),
    ("truncated map value", "a16161", "truncated input"),
    ("reserved additional info 28 (uint)", "1c", "reserved additional information"),
    ("reserved additional info 30 (text)", "7e", "reserved additional information"),
    ("reserved additional info 29 (tag)", "dd", "reserved additional information"),
    ("reserved additional info 28 (major 7)", "fc", "reserved additional information"),
    ("undefined", "f7", "undefined not allowed"),
    ("simple(16)", "f0", "simple value not allowed"),
    ("simple(255) two-byte form", "f8ff", "simple value not allowed"),
    ("stand-alone break", "ff", "unexpected break"),
    ("array announcing 2**32-1 items", "9affffffff", "length exceeds input"),
    ("map announcing 2**32-1 pairs", "baffffffff", "length exceeds input"),
    ("bytes announcing 2**64-1 bytes", "5bffffffffffffffff", "length exceeds input"),
    ("17 nested arrays (over default depth 16)", "81" * 17 + "00", "nesting too deep"),
    # -- added with docs/provenance-format.md
    ("half float -0.0", "f98000", "float not allowed"),
    ("half float NaN", "f97e00", "float not allowed"),
    ("float inside a nested schema {type: number, minimum: 0.5}",
     "a2647479706566" + "6e756d626572" + "676d696e696d756d" + "f93800", "float not allowed"),
    ("float as a map key", "a1f93c0000", "float not allowed"),
    ("tag 55799 (self-described CBOR) around 0", "d9d9f700", "tag not allowed"),
    ("tag 3 negative bignum", "c349010000000000000000", "tag not allowed"),
    ("tag inside an array", "8201c11a514b67b0", "tag not allowed"),
    ("tag as a map key", "a1c16161" + "00", "tag not allowed"),
    ("duplicate map key in a nested map", "a1616fa2616101616102", "duplicate map key"),
    ("duplicate map key, not adjacent to the first", "a3616101616202616101",
     "map keys out of order"),
    ("map key is true", "a1f500", "map key is not a text string"),
    ("map key is null", "a1f600", "map key is not a text string"),
    ("map key is a map", "a1a0" + "00", "map key is not a text string"),
    ("map key is a negative integer", "a12000", "map key is not a text string"),
    ("non-NFC map key e + U+0301", "a16365cc8100", "text is not NFC"),
    ("non-NFC text U+212B ANGSTROM SIGN (NFC is U+00C5)", "63e284ab", "text is not NFC"),
    ("non-NFC text A + U+030A (NFC is U+00C5)", "6341cc8a", "text is not NFC"),
    ("non-NFC text decomposed Hangul U+1112 U+1161 U+11AB", "69e18492e185a1e186ab",
     "text is not NFC"),
    ("non-NFC text in a nested schema description", "a16b6465736372697074696f6e6365cc81",
     "text is not NFC"),
    ("17 nested maps (over default depth 16)", "a16161" * 17 + "00", "nesting too deep"),
]


def to_json(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= 2**53 - 1 else {"$int": str(value)}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return {k: to_json(v) for k, v in value.items()}


def _check_input(name: str, value: Any) -> None:
    """A valid value must be in the profile: NFC text, no floats."""
    if isinstance(value, str):
        assert unicodedata.is_normalized("NFC", value), name
    elif isinstance(value, float):
        raise AssertionError(name)
    elif isinstance(value, list):
        for v in value:
            _check_input(name, v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_input(name, k)
            _check_input(name, v)


def main() -> None:
    valid = []
    for name, value in VALID:
        _check_input(name, value)
        data = cbor2.dumps(value, canonical=True)
        valid.append(
            {
                "name": name,
                "value": to_json(value),
                "hex": data.hex(),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    invalid = [{"name": n, "hex": h, "reason": r} for n, h, r in INVALID]
    names = [v["name"] for v in valid + invalid]
    assert len(names) == len(set(names)), "vector names must be unique"
    doc = {
        "profile": PROFILE,
        "conventions": {
            "value": 'JSON, except {"$bytes": hex} for a byte string and {"$int": decimal} '
            "for an integer outside [-(2**53-1), 2**53-1]",
            "hex": "lowercase hex of the chit-det/1 encoding",
            "sha256": "lowercase hex SHA-256 of those bytes",
            "reason": "the reference decoder's ProfileError reason (informative, not normative)",
            "limits": "default limits: max_size 65536 bytes, max_depth 16",
        },
        "valid": valid,
        "invalid": invalid,
    }
    Path(__file__).with_name("cbor_det1.json").write_text(
        json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
