"""Format docs and their vectors stay in step: cbor-profile.md and catalog-encoding.md.

Every example a document quotes must be a vector the engine passes, and every
catalog the vectors call refused must be refused by the auditor's reader.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from engine.audit import verify as audit
from engine.auth import cbor
from engine.catalog.declarations import hash_catalog
from engine.errors import ProfileError

ROOT = Path(__file__).resolve().parent.parent.parent
CBOR = json.loads((ROOT / "tests" / "vectors" / "cbor_det1.json").read_text("utf-8"))
CATALOG = json.loads(
    (ROOT / "tests" / "vectors" / "catalog_chit_catalog1.json").read_text("utf-8")
)
CBOR_DOC = (ROOT / "docs" / "cbor-profile.md").read_text("utf-8")
CATALOG_DOC = (ROOT / "docs" / "catalog-encoding.md").read_text("utf-8")


def _squashed(text: str) -> str:
    return re.sub(r"\s+", "", text)


# ----------------------------------------------------------------- cbor-profile.md


def test_cbor_doc_examples_are_vectors() -> None:
    valid = {v["hex"]: v["sha256"] for v in CBOR["valid"]}
    rows = re.findall(r"^\| .* \| `([0-9a-f]+)` \| `([0-9a-f]{64})` \|$", CBOR_DOC, re.MULTILINE)
    assert len(rows) >= 8
    for hex_, sha in rows:
        assert valid.get(hex_) == sha, hex_


def test_cbor_doc_refusals_are_vectors() -> None:
    invalid = {v["hex"]: v["reason"] for v in CBOR["invalid"]}
    rows = re.findall(r"^\| `([0-9a-f]+)` \| .* \| `([^`]+)` \|$", CBOR_DOC, re.MULTILINE)
    assert len(rows) >= 12
    for hex_, reason in rows:
        assert invalid.get(hex_) == reason, hex_


def test_cbor_doc_quotes_the_nested_schema_vector() -> None:
    schema = next(v for v in CBOR["valid"] if "JSON Schema" in v["name"])
    assert schema["hex"] in _squashed(CBOR_DOC)
    assert schema["sha256"] in CBOR_DOC


def test_cbor_vectors_cover_the_required_ground() -> None:
    """Key order across lengths, NFC, nesting; floats, tags, duplicates, non-text keys."""
    names = " ".join(v["name"] for v in CBOR["valid"])
    for fragment in ("key order", "NFC", "nested", "Schema"):
        assert fragment in names, fragment
    reasons: dict[str, int] = {}
    for v in CBOR["invalid"]:
        reasons[v["reason"]] = reasons.get(v["reason"], 0) + 1
    for reason in ("float not allowed", "tag not allowed", "duplicate map key",
                   "map key is not a text string", "text is not NFC", "map keys out of order"):
        assert reasons.get(reason, 0) >= 2, reason


# ----------------------------------------------------------------- catalog-encoding.md


def test_catalog_nested_example() -> None:
    example = CATALOG["nested_example"]
    data = cbor.encode(example["document"])
    assert data.hex() == example["hex"]
    assert hashlib.sha256(data).hexdigest() == example["sha256"]
    assert cbor.decode(data) == example["document"]
    assert example["sha256"] in CATALOG_DOC


def test_catalog_doc_quotes_the_worked_example() -> None:
    example = CATALOG["example"]
    assert example["hex"] in _squashed(CATALOG_DOC)
    assert example["sha256"] in CATALOG_DOC


class _Store:
    """Just enough of a repository for the auditor's catalog reader."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get_blob_from_store(self, _ref: str, _name: str) -> bytes:
        return self.data


@pytest.mark.parametrize("case", CATALOG["refused"], ids=lambda c: c["name"])
def test_refused_catalog_is_refused_by_the_auditor(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["hex"])
    assert hashlib.sha256(data).hexdigest() == case["sha256"]
    reader = audit.Auditor(_Store(data), {})  # type: ignore[arg-type]
    found = reader._load_catalog(hash_catalog(data))
    assert isinstance(found, tuple), "the auditor accepted a refused catalog"
    check, reason = found
    assert check == case["check"] == "catalog_decodes"
    assert case["reason"] in reason
    assert case["reason"] in CATALOG_DOC


def test_refused_catalogs_cover_the_profile_and_the_document_rules() -> None:
    reasons = {c["reason"] for c in CATALOG["refused"]}
    assert {"float not allowed", "tag not allowed", "duplicate map key",
            "map key is not a text string", "text is not NFC"} <= reasons
    profile_refused = 0
    for case in CATALOG["refused"]:
        try:
            cbor.decode(bytes.fromhex(case["hex"]))
        except ProfileError as exc:
            assert exc.reason == case["reason"]
            profile_refused += 1
    assert 0 < profile_refused < len(CATALOG["refused"])
