"""engine/auth/discharge.py against docs/approvals.md and tests/vectors/approval.json.

The vectors are made from the written format, not from the module
(tests/vectors/make_approval_vectors.py); here the module recomputes every one
of them, and every forged or replayed discharge is refused.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.auth import cbor, discharge
from engine.auth.discharge import DecisionBody, Discharge, DischargeError
from engine.errors import ProfileError

ROOT = Path(__file__).resolve().parents[3]
VECTORS: dict[str, Any] = json.loads(
    (ROOT / "tests" / "vectors" / "approval.json").read_text("utf-8")
)
DOC = (ROOT / "docs" / "approvals.md").read_text("utf-8")
ENGINE = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["engine"]["seed"]))
OPERATOR = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["operator"]["seed"]))
OPERATOR_PUBLIC = bytes.fromhex(VECTORS["operator"]["public"])
KID = VECTORS["engine"]["kid"]
ENGINE_KEYS = {KID: ENGINE.public_key()}


def _operator_key(name: str, key: str) -> bytes | None:
    if name == "alice" and key == VECTORS["operator"]["key_id"]:
        return OPERATOR_PUBLIC
    return None


@pytest.mark.parametrize("vector", VECTORS["requests"], ids=lambda v: v["name"])
def test_request_hash_recomputes_the_vectors(vector: dict[str, Any]) -> None:
    digest = discharge.request_hash(
        vector["tool"], vector["arguments"], session=vector["session"],
        token_id=vector["token"], repo=vector["repo"], change=vector.get("change"),
    )
    assert digest.hex() == vector["hash"]


def test_the_operator_key_id_is_the_vectors() -> None:
    assert discharge.key_id(OPERATOR_PUBLIC) == VECTORS["operator"]["key_id"]


@pytest.mark.parametrize("vector", VECTORS["decisions"], ids=lambda v: v["decision"])
def test_signing_recomputes_the_vectors(vector: dict[str, Any]) -> None:
    body = DecisionBody(
        "apr_" + "a" * 13 + "2" * 13, bytes.fromhex(vector["request"]), vector["decision"],
        "alice", VECTORS["operator"]["key_id"], vector["note"], 1_796_014_836, 1_796_018_400,
    )
    raw = discharge.encode_body(body)
    assert raw.hex() == vector["body"]
    op_sig = discharge.operator_sign(raw, OPERATOR)
    assert op_sig.hex() == vector["operator_sig"]
    engine_sig = discharge.countersign(raw, op_sig, ENGINE.sign)
    assert engine_sig.hex() == vector["engine_sig"]
    envelope = discharge.encode_discharge(Discharge(raw, op_sig, KID, engine_sig))
    assert envelope.hex() == vector["discharge"]
    decoded = discharge.decode_discharge(envelope)
    assert discharge.verify_discharge(decoded, _operator_key, ENGINE_KEYS) == body


def test_the_doc_quotes_the_vectors() -> None:
    """docs/approvals.md gives the seeds and the results a reimplementation must reach."""
    squashed = re.sub(r"\s+", "", DOC)
    assert VECTORS["engine"]["seed"] in DOC and VECTORS["operator"]["seed"] in DOC
    assert VECTORS["operator"]["key_id"] in DOC
    for vector in VECTORS["requests"]:
        assert vector["hash"] in DOC
    first = VECTORS["decisions"][0]
    for field in ("body", "operator_sig", "engine_sig"):
        assert first[field] in squashed


def _signed(**change: Any) -> tuple[DecisionBody, Discharge]:
    vector = VECTORS["decisions"][0]
    body = dataclasses.replace(
        discharge.decode_body(bytes.fromhex(vector["body"])), **change
    )
    raw = discharge.encode_body(body)
    op_sig = discharge.operator_sign(raw, OPERATOR)
    return body, Discharge(raw, op_sig, KID, discharge.countersign(raw, op_sig, ENGINE.sign))


def test_a_decision_signed_by_another_key_is_refused() -> None:
    """Threat: someone with a key of their own signs a decision in an operator's name."""
    _body, good = _signed()
    forged_sig = discharge.operator_sign(good.body, Ed25519PrivateKey.generate())
    forged = Discharge(
        good.body, forged_sig, KID, discharge.countersign(good.body, forged_sig, ENGINE.sign)
    )
    with pytest.raises(DischargeError, match="operator's signature"):
        discharge.verify_discharge(forged, _operator_key, ENGINE_KEYS)


def test_a_decision_the_engine_did_not_countersign_is_refused() -> None:
    """Threat: an operator's signed decision slipped into a record behind the engine's back."""
    _body, good = _signed()
    other = Ed25519PrivateKey.generate()
    bad = dataclasses.replace(
        good, engine_sig=discharge.countersign(good.body, good.operator_sig, other.sign)
    )
    with pytest.raises(DischargeError, match="countersignature"):
        discharge.verify_discharge(bad, _operator_key, ENGINE_KEYS)
    with pytest.raises(DischargeError, match="engine key"):
        discharge.verify_discharge(
            dataclasses.replace(good, engine_key="e-unknown"), _operator_key, ENGINE_KEYS
        )


def test_an_edited_decision_no_longer_verifies() -> None:
    """Threat: a denial turned into an approval, or an expiry pushed back, after signing."""
    _body, good = _signed()
    edited = discharge.encode_body(
        dataclasses.replace(discharge.decode_body(good.body), expires_at=2**40)
    )
    with pytest.raises(DischargeError, match="operator's signature"):
        discharge.verify_discharge(
            dataclasses.replace(good, body=edited), _operator_key, ENGINE_KEYS
        )


def test_an_unknown_operator_key_is_refused() -> None:
    """Threat: a decision naming a key the operator never registered."""
    _body, good = _signed(operator="mallory")
    with pytest.raises(DischargeError, match="not known"):
        discharge.verify_discharge(good, _operator_key, ENGINE_KEYS)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xa0",
        cbor.encode({"v": "chit-approval/1"}),
        cbor.encode({"v": "chit-approval/2", "body": b"", "operator_sig": bytes(64),
                     "engine_key": "e", "engine_sig": bytes(64)}),
        cbor.encode({"v": "chit-approval/1", "body": b"", "operator_sig": bytes(63),
                     "engine_key": "e", "engine_sig": bytes(64)}),
        bytes(5000),
    ],
)
def test_malformed_discharges_are_refused(data: bytes) -> None:
    with pytest.raises(DischargeError):
        discharge.decode_discharge(data)


def test_a_malformed_body_is_refused() -> None:
    vector = VECTORS["decisions"][0]
    body = cbor.decode(bytes.fromhex(vector["body"]))
    assert isinstance(body, dict)
    for change in ({"decision": "maybe"}, {"request": b"x"}, {"v": 2}, {"extra": 1},
                   {"decided_at": -1}, {"operator_key": "ABC"}, {"id": "apr_x"}):
        with pytest.raises(DischargeError):
            discharge.decode_body(cbor.encode({**body, **change}))


def test_the_request_hash_binds_every_field() -> None:
    """Threat: an approval replayed for other arguments, another session, token or repository."""
    base = {"tool": "commit", "arguments": {"message": "m"}, "session": "s1",
            "token_id": "0" * 32, "repo": "app", "change": "a" * 40}
    first = discharge.request_hash(**base)  # type: ignore[arg-type]
    for key, value in (("tool", "write_file"), ("arguments", {"message": "n"}),
                       ("session", "s2"), ("token_id", "1" * 32), ("repo", "web"),
                       ("change", "b" * 40), ("change", None)):
        assert discharge.request_hash(**{**base, key: value}) != first, key  # type: ignore[arg-type]


def test_the_request_hash_refuses_floats() -> None:
    with pytest.raises(ProfileError):
        discharge.request_hash("t", {"x": 1.5}, session="s", token_id="0" * 32, repo="r")


def test_lone_surrogates_hash_as_bytes() -> None:
    digest = discharge.request_hash(
        "write_file", {"content": "\ud800"}, session="s", token_id="0" * 32, repo="r"
    )
    assert len(digest) == 32


def test_approval_ids_are_128_random_bits_in_base32() -> None:
    ids = {discharge.new_approval_id() for _ in range(64)}
    assert len(ids) == 64
    assert all(discharge.APPROVAL_ID.fullmatch(i) for i in ids)


def test_the_change_digest_recomputes_the_vector() -> None:
    vector = VECTORS["change"]
    entries = [(p, m, None if d is None else d.encode()) for p, m, d in vector["entries"]]
    assert discharge.change_digest(entries) == vector["digest"]
    assert discharge.change_digest(reversed(entries)) == vector["digest"]  # order-free
    assert vector["digest"] in DOC
    changed = [(p, m, b"other" if d else d) for p, m, d in entries]
    assert discharge.change_digest(changed) != vector["digest"]


def test_a_decision_call_log_entry_recomputes_the_vector() -> None:
    """docs/audit.md §8: an operator's decision is a call-log entry of this exact shape."""
    from engine.admin.approvals import decision_arguments
    from engine.audit import calllog, redact
    from engine.state.approvals import Approval

    vector = VECTORS["calllog_entry"]
    approval = Approval(
        "apr_" + "a" * 13 + "2" * 13, VECTORS["requests"][0]["hash"], "commit", "docs-bot",
        "0" * 32, vector["session"], "app", {}, ("alice",), "", "approval[0]",
        0, 1_796_018_400,
    )
    record = calllog.CallRecord(
        time=vector["time"], agent=calllog.OPERATOR, chain=(), session=vector["session"],
        tool="chit approve",
        arguments=redact.redact_arguments(decision_arguments(
            approval, "alice", VECTORS["operator"]["key_id"], "deploy window 14:00")),
        decision="allowed", code=None, policy_hash=vector["policy_hash"], catalog_hash=None,
        repo="app",
    )
    encoded = calllog.encode_entry(vector["seq"], bytes.fromhex(vector["prev"]), record)
    assert encoded.hex() == vector["hex"]
    assert vector["sha256"] in (ROOT / "docs" / "audit.md").read_text("utf-8")
    assert calllog.decode_entry(encoded)["agent"] == "(operator)"
