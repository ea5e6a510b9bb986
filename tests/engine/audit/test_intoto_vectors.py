"""tests/vectors/attestation.json: chit's statements and envelopes against the written format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope
from securesystemslib.signer import Key

from engine.audit import intoto
from engine.audit.laneattest import lane_statement
from engine.auth.signkeys import SigningKey

ROOT = Path(__file__).resolve().parents[3]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "attestation.json").read_text())
DOC = (ROOT / "docs" / "attestations.md").read_text()


def _key() -> SigningKey:
    seed = bytes.fromhex(VECTORS["seed_hex"])
    return SigningKey(key_id=VECTORS["kid"], created=0, status="active",
                      public=bytes.fromhex(VECTORS["public_hex"]), seed=seed)


def test_the_key_is_the_seed_zero_to_31() -> None:
    assert bytes.fromhex(VECTORS["seed_hex"]) == bytes(range(32))
    public = Ed25519PrivateKey.from_private_bytes(bytes(range(32))).public_key()
    entry = intoto.public_key_entry(VECTORS["kid"], public)
    assert entry["keyval"] == {"public": VECTORS["public_hex"]}
    assert entry["pem"] == VECTORS["public_pem"]
    assert VECTORS["public_hex"] in DOC and VECTORS["public_pem"].strip() in DOC


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_engine_signs_and_verifies_the_vector(vector: dict[str, Any]) -> None:
    line = intoto.dumps(intoto.sign_statement(vector["statement"], _key()))
    assert line.decode() == vector["envelope"]
    assert intoto.envelope_digest(line) == vector["digest"]
    public = Ed25519PrivateKey.from_private_bytes(bytes(range(32))).public_key()
    assert intoto.verify_envelope(line, {VECTORS["kid"]: public}) == (
        VECTORS["kid"], vector["statement"])


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_securesystemslib_verifies_the_vector(vector: dict[str, Any]) -> None:
    key = Key.from_dict(VECTORS["kid"], {"keytype": "ed25519", "scheme": "ed25519",
                                         "keyval": {"public": VECTORS["public_hex"]}})
    envelope = Envelope.from_dict(json.loads(vector["envelope"]))
    assert set(envelope.verify([key], 1)) == {VECTORS["kid"]}
    assert json.loads(envelope.payload) == vector["statement"]


def test_the_commit_vector_is_the_provenance_vectors_record() -> None:
    provenance = json.loads((ROOT / "tests" / "vectors" / "provenance.json").read_text())
    first = provenance["valid"][0]
    statement = VECTORS["valid"][0]["statement"]
    commit = statement["subject"][0]["digest"]["gitCommit"]
    assert statement == intoto.commit_statement(commit, first["record"],
                                                "sha256:" + first["envelope_sha256"])


def test_the_lane_vector_has_the_lane_statement_shape() -> None:
    statement = VECTORS["valid"][1]["statement"]
    p = statement["predicate"]
    report = {"ok": p["verdict"]["ok"], "findings": p["verdict"]["findings"],
              "commits": [{"commit": c["commit"], "attestation": c["attestation"]}
                          for c in reversed(p["commits"])]}
    assert lane_statement(p["lane"], p["head"], p["base"], report, p["time"]) == statement
    assert p["commits"][0]["attestation"] == VECTORS["valid"][0]["digest"]


def test_the_document_quotes_the_lane_vector() -> None:
    quoted = DOC.split("<!-- vector-envelope:begin -->\n```\n", 1)[1].split("\n```", 1)[0]
    assert quoted == VECTORS["valid"][1]["envelope"]
