"""``chit-provenance/2``: a commit's record naming the approval it was made under.

The vectors (tests/vectors/provenance_approved.json) are built from the written
formats by tests/vectors/make_approved_vectors.py with a generic CBOR encoder;
the engine must rebuild the valid record byte for byte, open and check it, and
refuse every forged, replayed, denied or expired approval with the documented
check (threat: a commit claiming a person's approval it never had).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.audit import provenance
from engine.audit.approval import ApprovalProblem, approval_entry, check_approval
from engine.audit.recordshape import shape_problem
from engine.auth import cbor, sealing, signkeys

ROOT = Path(__file__).resolve().parents[3]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "provenance_approved.json").read_text("utf-8"))
DOC = (ROOT / "docs" / "provenance-format.md").read_text("utf-8")


def _unhex(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"hex"}:
            return bytes.fromhex(value["hex"])
        return {k: _unhex(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unhex(v) for v in value]
    return value


def _engine_keys() -> dict[str, Ed25519PublicKey]:
    engine = VECTORS["engine"]
    return {engine["kid"]: Ed25519PublicKey.from_public_bytes(bytes.fromhex(engine["public"]))}


def _signing_key() -> signkeys.SigningKey:
    engine = VECTORS["engine"]
    return signkeys.SigningKey(key_id=engine["kid"], created=0, status="active",
                               public=bytes.fromhex(engine["public"]),
                               seed=bytes.fromhex(engine["seed"]))


def _no_file(_path: str) -> tuple[int, str] | None:
    return None


def _blobs(blob_id: str) -> bytes | None:
    """The repository's blobs as the vector gives them."""
    data = VECTORS["valid"]["blobs"].get(blob_id)
    return None if data is None else bytes.fromhex(data)


def test_a_sealed_blob_stands_for_its_approved_plaintext() -> None:
    """A protected file is sealed afresh at commit: its landed blob is ciphertext, checked for
    path and mode only; any other blob must hash to the approved content (threat: content
    swapped after the approval)."""
    valid = VECTORS["valid"]
    record = _unhex(valid["record"])
    other = "f" * 40
    record["change"][0]["new"] = other
    stored: dict[str, bytes] = {other: b"ssh-ed25519 AAAA attacker@example\n"}
    with pytest.raises(ApprovalProblem, match=r"deploy/key\.pub"):
        check_approval(record, valid["signed_part"], _engine_keys(), stored.get, _no_file)
    stored[other] = sealing.MAGIC + b"\x01" + b"\x00" * 40
    assert sealing.is_sealed(stored[other])
    facts = check_approval(record, valid["signed_part"], _engine_keys(), stored.get, _no_file)
    assert facts.operator == "alice"
    record["change"][0]["new_mode"] = 0o100755
    with pytest.raises(ApprovalProblem, match=r"deploy/key\.pub"):
        check_approval(record, valid["signed_part"], _engine_keys(), stored.get, _no_file)
    record["change"][0]["new_mode"] = 0o100644
    del stored[other]  # a blob the repository does not hold
    with pytest.raises(ApprovalProblem, match=r"deploy/key\.pub"):
        check_approval(record, valid["signed_part"], _engine_keys(), stored.get, _no_file)


def test_valid_vector_rebuilds_byte_for_byte_and_checks() -> None:
    valid = VECTORS["valid"]
    record = _unhex(valid["record"])
    assert cbor.encode(record).hex() == valid["record_hex"]
    entry = approval_entry(record["approval"]["discharge"],
                           bytes.fromhex(record["approval"]["operator_public_key"]),
                           record["approval"]["request"], record["approval"]["change"])
    assert entry == record["approval"]
    assert provenance.seal(record, _signing_key()).hex() == valid["envelope_hex"]
    opened = provenance.open_envelope(bytes.fromhex(valid["envelope_hex"]), _engine_keys())
    assert opened == record
    signed_part, digest = provenance.split_message(valid["message"])
    assert signed_part == valid["signed_part"]
    assert digest == "sha256:" + valid["envelope_sha256"]
    facts = check_approval(opened, signed_part, _engine_keys(), _blobs, _no_file)
    expected = valid["approval"]
    assert (facts.approval_id, facts.operator, facts.operator_key, facts.decided_at,
            facts.expires_at, facts.note) == (
        expected["id"], expected["operator"], expected["operator_key"],
        expected["decided_at"], expected["expires_at"], expected["note"])


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vector_is_refused_with_its_check(vector: dict[str, Any]) -> None:
    envelope = bytes.fromhex(vector["envelope_hex"])
    if vector["stage"] == "open_envelope":
        with pytest.raises(provenance.ProvenanceError) as caught:
            provenance.open_envelope(envelope, _engine_keys())
        assert caught.value.check == vector["check"]
        return
    assert vector == {**vector, "stage": "check_approval", "check": "approval"}
    record = provenance.open_envelope(envelope, _engine_keys())
    with pytest.raises(ApprovalProblem):
        check_approval(record, VECTORS["valid"]["signed_part"], _engine_keys(), _blobs, _no_file)


def test_the_commit_message_must_be_the_approved_one() -> None:
    """A commit whose message differs from the approved one fails, though the rest matches."""
    valid = VECTORS["valid"]
    record = provenance.open_envelope(bytes.fromhex(valid["envelope_hex"]), _engine_keys())
    other = valid["signed_part"].replace("Rotate the deploy key", "Rotate the deploy keys")
    with pytest.raises(ApprovalProblem, match="message"):
        check_approval(record, other, _engine_keys(), _blobs, _no_file)


@pytest.mark.parametrize(
    "change",
    [
        {"discharge": "not bytes"},
        {"operator_public_key": "AB" * 32},
        {"request": "text"},
        {"change": "text"},
        {"extra": 1},
    ],
)
def test_malformed_approval_maps_fail_the_shape(change: dict[str, Any]) -> None:
    record = _unhex(VECTORS["valid"]["record"])
    record["approval"].update(change)
    assert shape_problem(record) is not None


def test_v1_records_may_not_carry_an_approval() -> None:
    record = _unhex(VECTORS["valid"]["record"])
    record["v"] = provenance.RECORD_VERSION
    assert shape_problem(record) is not None
    del record["approval"]
    assert shape_problem(record) is None


def test_format_doc_names_the_version_and_quotes_the_vector() -> None:
    assert provenance.RECORD_VERSION_APPROVED in DOC
    assert VECTORS["valid"]["envelope_sha256"] in DOC
    assert bytes.fromhex(VECTORS["signature_context_hex"]).rstrip(b"\0").decode() in DOC
