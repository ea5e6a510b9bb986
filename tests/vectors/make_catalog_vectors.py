"""Regenerate tests/vectors/catalog_chit_catalog1.json from the declared catalog.

Run from the repository root: ``python tests/vectors/make_catalog_vectors.py``.
Regenerate only with a deliberate catalog change (every hash changes with it).

Besides the real offers: worked examples (a one-tool document, and one with
nested schemas and non-ASCII NFC text), and documents an auditor must refuse as
``chit-catalog/1`` (``catalog_decodes``), each with the exact bytes and SHA-256.
The refused bytes are built with cbor2, not ``engine.auth.cbor``, since the profile's
encoder would not write them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2

from engine.auth import cbor
from engine.catalog.declarations import CATALOG_ENCODING
from engine.tools.offer import offer_for

EXAMPLE = {
    "encoding": "chit-catalog/1",
    "tools": [
        {
            "name": "t",
            "description": "d",
            "input_schema": {"type": "object"},
            "output_schema": {"type": "object"},
            "annotations": {"destructiveHint": False, "readOnlyHint": True},
            "requires": ["read"],
        }
    ],
}


def _tool(name: str, requires: list[str], **extra: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": f"The {name} tool.",
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
        "output_schema": {"type": "object"},
        "annotations": {"destructiveHint": False, "readOnlyHint": True},
        "requires": requires,
    }
    tool.update(extra)
    return tool


# Two tools: nested input schemas (properties, anyOf, items, enum, $defs/$ref),
# integers (negative too), booleans and null, non-ASCII NFC text. The tools list is
# sorted by name bytewise, not length-first like map keys: "read_café" before "z".
NESTED_EXAMPLE = {
    "encoding": "chit-catalog/1",
    "tools": [
        _tool(
            "read_caf\u00e9",
            ["read"],
            description="Lit un fichier du caf\u00e9 \u2014 \u00e9t\u00e9 comme hiver.",
            input_schema={
                "type": "object",
                "title": "ReadArgs",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "ref": {"anyOf": [{"type": "string", "maxLength": 256}, {"type": "null"}],
                            "default": None},
                    "lines": {"type": "array", "items": {"$ref": "#/$defs/Range"},
                              "maxItems": 8},
                },
                "$defs": {
                    "Range": {
                        "type": "object",
                        "properties": {"start": {"type": "integer", "minimum": 1},
                                       "end": {"type": "integer", "minimum": -1}},
                        "required": ["start"],
                    }
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        ),
        _tool(
            "z",
            ["commit", "write"],
            annotations={"destructiveHint": True, "readOnlyHint": False},
            input_schema={
                "type": "object",
                "properties": {"mode": {"enum": ["ours", "theirs", "content"],
                                        "type": "string"}},
                "additionalProperties": False,
            },
        ),
    ],
}


def _refused() -> list[dict[str, Any]]:
    """Documents whose bytes hash fine but are not chit-catalog/1 (check ``catalog_decodes``)."""
    good = _tool("read_file", ["read"])
    cases: list[tuple[str, bytes, str]] = []

    def doc(tools: list[Any], encoding: str = CATALOG_ENCODING) -> dict[str, Any]:
        return {"encoding": encoding, "tools": tools}

    def canonical(value: Any) -> bytes:
        return cbor2.dumps(value, canonical=True)

    cases.append(("a float in a schema (minimum 0.5)",
                  canonical(doc([_tool("t", ["read"], input_schema={
                      "type": "number", "minimum": 0.5})])),
                  "float not allowed"))
    cases.append(("a non-NFC description (e + U+0301)",
                  canonical(doc([_tool("t", ["read"], description="caf\u0065\u0301")])),
                  "text is not NFC"))
    cases.append(("a tag in a schema (tag 1, epoch date)",
                  canonical(doc([_tool("t", ["read"], input_schema={
                      "type": "object", "default": cbor2.CBORTag(1, 0)})])),
                  "tag not allowed"))
    cases.append(("a non-text key in a schema",
                  canonical(doc([_tool("t", ["read"], input_schema={1: "object"})])),
                  "map key is not a text string"))
    dup = canonical(doc([_tool("t", ["read"], input_schema={"title": "T"})]))
    single = canonical({"title": "T"})
    double = bytes([0xA2]) + single[1:] + single[1:]  # {"title": "T", "title": "T"}
    assert dup.count(single) == 1
    cases.append(("a duplicate key in a schema", dup.replace(single, double), "duplicate map key"))
    cases.append(("map keys out of order (insertion order, not canonical)",
                  cbor2.dumps(doc([good]), canonical=False), "map keys out of order"))
    cases.append(("another encoding name (chit-catalog/2)",
                  canonical(doc([good], "chit-catalog/2")),
                  "catalog does not name chit-catalog/1"))
    cases.append(("tools not sorted by name",
                  canonical(doc([_tool("write_file", ["write"]), good])),
                  "catalog tools are not sorted by unique name"))
    cases.append(("the same tool name twice",
                  canonical(doc([good, good])),
                  "catalog tools are not sorted by unique name"))
    no_requires = {k: v for k, v in good.items() if k != "requires"}
    cases.append(("a tool without a requires list",
                  canonical(doc([no_requires])),
                  "tool 'read_file' has no requires list"))
    cases.append(("tools is not a list of maps",
                  canonical(doc(["read_file"])),
                  "catalog tools are not a list of maps"))
    return [
        {"name": name, "hex": data.hex(), "sha256": hashlib.sha256(data).hexdigest(),
         "check": "catalog_decodes", "reason": reason}
        for name, data, reason in cases
    ]


CASES: list[tuple[str, list[str], bool, list[str]]] = [
    ("effective_scope only (no operations)", [], False, []),
    ("read", ["read"], False, []),
    ("read, write, commit", ["commit", "read", "write"], False, []),
    (
        "all operations and the delegation flag",
        ["commit", "read", "sub-token:issue", "write"],
        True,
        [],
    ),
    # The policy's [confirm] lists delete_file and commit (docs/policy.md):
    # those two input schemas gain the optional "confirm" boolean.
    (
        "read, write, commit; [confirm] tools = delete_file, commit",
        ["commit", "read", "write"],
        False,
        ["commit", "delete_file"],
    ),
]


def main() -> None:
    offers = []
    for name, ops, delegable, confirm in CASES:
        offer = offer_for(frozenset(ops), delegable, confirm=frozenset(confirm))
        case: dict[str, Any] = {"name": name, "operations": ops, "delegable": delegable}
        if confirm:  # absent from the cases without: they stay as they were
            case["confirm"] = confirm
        offers.append(
            case
            | {
                "tools": offer.names(),
                "catalog_hash": offer.catalog_hash,
                "size": len(offer.catalog_bytes),
                "hex": offer.catalog_bytes.hex(),
            }
        )
    doc = {
        "encoding": CATALOG_ENCODING,
        "note": "Offers of this catalog: the operations held, the tools offered, the exact "
        "chit-catalog/1 bytes (hex) and their SHA-256.",
        "offers": offers,
        "example": {
            "document": EXAMPLE,
            "hex": cbor.encode(EXAMPLE).hex(),
            "sha256": hashlib.sha256(cbor.encode(EXAMPLE)).hexdigest(),
        },
        "nested_example": {
            "document": NESTED_EXAMPLE,
            "hex": cbor2.dumps(NESTED_EXAMPLE, canonical=True).hex(),
            "sha256": hashlib.sha256(cbor2.dumps(NESTED_EXAMPLE, canonical=True)).hexdigest(),
        },
        "refused": _refused(),
    }
    Path(__file__).with_name("catalog_chit_catalog1.json").write_text(
        json.dumps(doc, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
