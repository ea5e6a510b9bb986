"""Regenerate tests/vectors/catalog_chit_catalog1.json from the declared catalog.

Run from the repository root: ``python tests/vectors/make_catalog_vectors.py``.
Regenerate only with a deliberate catalog change (every hash changes with it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from engine import cbor
from engine.catalog import CATALOG_ENCODING, offer_for

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

CASES = [
    ("effective_scope only (no operations)", [], False),
    ("read", ["read"], False),
    ("read, write, commit", ["commit", "read", "write"], False),
    (
        "all operations and the delegation flag",
        ["commit", "read", "sub-token:issue", "write"],
        True,
    ),
]


def main() -> None:
    offers = []
    for name, ops, delegable in CASES:
        offer = offer_for(frozenset(ops), delegable)
        offers.append(
            {
                "name": name,
                "operations": ops,
                "delegable": delegable,
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
    }
    Path(__file__).with_name("catalog_chit_catalog1.json").write_text(
        json.dumps(doc, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
