"""Regenerate tests/vectors/provenance_approved.json: ``chit-provenance/2`` records.

Run from the repository root:
``PYTHONPATH=. python tests/vectors/make_approved_vectors.py``.

A ``chit-provenance/2`` record is a ``chit-provenance/1`` record plus the
``approval`` its commit was made under (docs/provenance-format.md §10). Built
here from the written formats (docs/provenance-format.md, docs/approvals.md)
with a generic CBOR encoder (cbor2, canonical) and Ed25519 (cryptography), not
with chit's encoders, so the vectors check the engine against the text. The
seeds are RFC 8032 section 7.1 test keys: the engine's is TEST 1, the
operator's TEST 3 (as in approval.json), an engine key nobody trusts TEST 2.

Regenerate only with a deliberate format change.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

VERSION = "chit-provenance/2"
CONTEXT = b"chit-provenance/2 signature\x00"
OPERATOR_CONTEXT = b"chit-approval/1\x00"
ENGINE_CONTEXT = b"chit-approval/1 engine\x00"

ENGINE_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
STRANGER_SEED = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
OPERATOR_SEED = bytes.fromhex("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
ENGINE_KID = "e20261130-00000002"

NOW = 1_796_014_836
SESSION = "5d1c7b0e9a8f4e3d2c1b0a9f8e7d6c5b"
TOKEN = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
TREE = "6a09e667bb67ae853c6ef372a54ff53a510e527f"
PARENT = "bb67ae8584caa73b3c6ef372fe94f82ba54ff53a"
CONTENT = b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPZ deploy@example\n"


def git_blob_id(data: bytes) -> str:
    """A git blob's id: SHA-1 over ``blob <size>\\0`` and the content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


BLOB = git_blob_id(CONTENT)
MESSAGE = "Rotate the deploy key"
CATALOG = {
    "hash": "sha256:de6f87e2144ca5d44e097c12753e03af8293d6ae07e4a8bbe4c57f50231c4480",
    "encoding": "chit-catalog/1",
}
POLICY = "sha256:" + "7" * 64
APPROVAL_ID = "apr_aaaaaaaaaaaaa2222222222222"


def det(value: Any) -> bytes:
    """``chit-det/1``: canonical CBOR (RFC 8949 §4.2.1 length-first key order)."""
    return cbor2.dumps(value, canonical=True)


def public_of(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw
    )


def sign(seed: bytes, message: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).sign(message)


def key_id(public: bytes) -> str:
    return hashlib.sha256(public).digest()[:16].hex()


def change_bytes(*, content: bytes = CONTENT, mode: int = 33188) -> bytes:
    """docs/approvals.md: the array, sorted by path, of [path, mode, SHA-256 of content]."""
    return det([["deploy/key.pub", mode, hashlib.sha256(content).digest()]])


def request_bytes(*, change: bytes | None = None, message: str = MESSAGE,
                  session: str = SESSION) -> bytes:
    digest = hashlib.sha256(change_bytes() if change is None else change).hexdigest()
    return det({"v": 1, "tool": "commit", "arguments": {"message": message},
                "session": session, "token": TOKEN, "repo": "app", "change": digest})


def discharge(request: bytes, *, decision: str = "approved", decided_at: int = NOW - 600,
              expires_at: int = NOW + 3000, engine_seed: bytes = ENGINE_SEED) -> bytes:
    operator = public_of(OPERATOR_SEED)
    body = det({
        "v": 1, "id": APPROVAL_ID, "request": hashlib.sha256(request).digest(),
        "decision": decision, "operator": "alice", "operator_key": key_id(operator),
        "note": "deploy window 14:00", "decided_at": decided_at, "expires_at": expires_at,
    })
    operator_sig = sign(OPERATOR_SEED, OPERATOR_CONTEXT + body)
    return det({"v": "chit-approval/1", "body": body, "operator_sig": operator_sig,
                "engine_key": ENGINE_KID,
                "engine_sig": sign(engine_seed, ENGINE_CONTEXT + body + operator_sig)})


def signed_part(message: str = MESSAGE) -> str:
    return (
        message + "\n\n"
        "Chit-Agent: deploy-bot\n"
        f"Chit-Session: {SESSION}\n"
        f"Chit-Token-Id: {TOKEN}\n"
        f"Chit-Catalog-Hash: {CATALOG['hash']}\n"
        f"Chit-Catalog-Encoding: {CATALOG['encoding']}\n"
    )


def record(approval: dict[str, Any]) -> dict[str, Any]:
    who = {"name": "deploy-bot", "email": "deploy-bot@agents.chit.invalid", "time": NOW,
           "offset": 0}
    return {
        "v": VERSION,
        "kid": ENGINE_KID,
        "lane": "agent/deploy-bot",
        "agent": "deploy-bot",
        "session": SESSION,
        "token_id": TOKEN,
        "time": NOW,
        "commit": {
            "tree": TREE,
            "parents": [PARENT],
            "author": who,
            "committer": who,
            "message": "sha256:" + hashlib.sha256(signed_part().encode()).hexdigest(),
        },
        "chain": [{"id": TOKEN, "agent": "deploy-bot", "ops": ["commit", "read", "write"],
                   "paths": [["deploy/**"]], "exp": NOW + 86_400, "delegable": False}],
        "catalog": dict(CATALOG),
        "policy": POLICY,
        "change": [{"path": "deploy/key.pub", "old": PARENT, "new": BLOB,
                    "old_mode": 33188, "new_mode": 33188}],
        "approval": approval,
    }


def approval(request: bytes, dis: bytes, change: bytes | None = None) -> dict[str, Any]:
    return {"discharge": dis, "operator_public_key": public_of(OPERATOR_SEED).hex(),
            "request": request, "change": change_bytes() if change is None else change}


def envelope(rec: dict[str, Any], *, version: str = VERSION, context: bytes = CONTEXT) -> bytes:
    body = det(rec)
    return det({"v": version, "alg": "ed25519", "kid": ENGINE_KID, "record": body,
                "sig": sign(ENGINE_SEED, context + body)})


def hexed(value: Any) -> Any:
    """JSON has no byte strings: bytes become ``{"hex": ...}``."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: hexed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hexed(v) for v in value]
    return value


def main() -> None:
    good_request = request_bytes()
    good = record(approval(good_request, discharge(good_request)))
    good_env = envelope(good)
    invalid: list[tuple[str, str, str, bytes]] = []

    def add(name: str, stage: str, check: str, rec: dict[str, Any], **kw: Any) -> None:
        invalid.append((name, stage, check, envelope(rec, **kw)))

    other_blob = change_bytes(content=b"ssh-ed25519 AAAA attacker@example\n")
    other_content = request_bytes(change=other_blob)
    add("approved other content for the path", "check_approval", "approval",
        record(approval(other_content, discharge(other_content), other_blob)))
    other_mode = change_bytes(mode=33261)
    in_other_mode = request_bytes(change=other_mode)
    add("approved the path in another mode", "check_approval", "approval",
        record(approval(in_other_mode, discharge(in_other_mode), other_mode)))
    add("recorded change swapped for another", "check_approval", "approval",
        record(approval(good_request, discharge(good_request), other_blob)))
    other_message = request_bytes(message="Rotate every key")
    add("approved another message", "check_approval", "approval",
        record(approval(other_message, discharge(other_message))))
    other_session = request_bytes(session="0" * 32)
    add("approved in another session", "check_approval", "approval",
        record(approval(other_session, discharge(other_session))))
    add("request bytes swapped after the decision", "check_approval", "approval",
        record(approval(other_content, discharge(good_request))))
    add("denied, not approved", "check_approval", "approval",
        record(approval(good_request, discharge(good_request, decision="denied"))))
    add("expired before the commit", "check_approval", "approval",
        record(approval(good_request, discharge(good_request, expires_at=NOW))))
    add("decided after the commit", "check_approval", "approval",
        record(approval(good_request, discharge(good_request, decided_at=NOW + 1))))
    add("countersigned by an engine key nobody trusts", "check_approval", "approval",
        record(approval(good_request, discharge(good_request, engine_seed=STRANGER_SEED))))
    wrong_key = approval(good_request, discharge(good_request))
    wrong_key["operator_public_key"] = public_of(STRANGER_SEED).hex()
    add("another operator key than the one that signed", "check_approval", "approval",
        record(wrong_key))
    no_approval = copy.deepcopy(good)
    del no_approval["approval"]
    add("a /2 record without approval", "open_envelope", "record_decodes", no_approval)
    add("signed under the /1 context", "open_envelope", "signature", good,
        context=b"chit-provenance/1 signature\x00")
    add("a /2 record in a /1 envelope", "open_envelope", "record_decodes", good,
        version="chit-provenance/1", context=b"chit-provenance/1 signature\x00")

    digest = hashlib.sha256(good_env).hexdigest()
    doc = {
        "format": VERSION,
        "note": "chit-provenance/2 records: a commit made under an approval "
        "(docs/provenance-format.md section 10, docs/approvals.md). Byte strings are "
        "written {\"hex\": ...}. Seeds: RFC 8032 section 7.1 TEST 1 (engine), TEST 3 "
        "(operator alice), TEST 2 (an engine key nobody trusts): public test data. An "
        "implementation passes if it encodes the valid record to record_hex, opens "
        "envelope_hex with the engine key, checks its approval (facts as given), and "
        "refuses every invalid envelope with its check at its stage.",
        "signature_context_hex": CONTEXT.hex(),
        "engine": {"kid": ENGINE_KID, "seed": ENGINE_SEED.hex(),
                   "public": public_of(ENGINE_SEED).hex()},
        "operator": {"name": "alice", "seed": OPERATOR_SEED.hex(),
                     "public": public_of(OPERATOR_SEED).hex(),
                     "key_id": key_id(public_of(OPERATOR_SEED))},
        "valid": {
            "record": hexed(good),
            "record_hex": det(good).hex(),
            "envelope_hex": good_env.hex(),
            "envelope_sha256": digest,
            "signed_part": signed_part(),
            "message": signed_part() + f"Chit-Provenance: sha256:{digest}\n",
            "blobs": {BLOB: CONTENT.hex()},
            "approval": {"id": APPROVAL_ID, "operator": "alice",
                         "operator_key": key_id(public_of(OPERATOR_SEED)),
                         "decided_at": NOW - 600, "expires_at": NOW + 3000,
                         "note": "deploy window 14:00"},
        },
        "invalid": [{"name": n, "stage": s, "check": c, "envelope_hex": e.hex()}
                    for n, s, c, e in invalid],
    }
    Path(__file__).with_name("provenance_approved.json").write_text(
        json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
