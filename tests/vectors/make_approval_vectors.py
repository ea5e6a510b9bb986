"""Regenerate tests/vectors/approval.json (deterministic: fixed keys, requests, decisions).

Run from the repository root:
``PYTHONPATH=. python tests/vectors/make_approval_vectors.py``.

Everything is built here from the specification (docs/approvals.md) with
``cbor2`` in canonical mode and ``cryptography``'s Ed25519, not with
``engine.auth.discharge``, so the vectors check the engine against the written
format. Ed25519 (RFC 8032) is deterministic: a fixed seed and fixed bytes give
a fixed signature. The seeds are the secret keys of RFC 8032 section 7.1,
TEST 1 (the engine) and TEST 3 (the operator): published test keys, never to
be used for anything else.

Regenerate only with a deliberate format change (every byte changes with it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ENGINE_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
OPERATOR_SEED = bytes.fromhex("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
ENGINE_KID = "e20261130-00000002"
OPERATOR_CONTEXT = b"chit-approval/1\x00"
ENGINE_CONTEXT = b"chit-approval/1 engine\x00"

# The staged change of the commit: a write, a deletion, an executable file.
CHANGE = [
    ("deploy/prod.toml", 0o100644, b"replicas = 3\n"),
    ("deploy/old.toml", None, None),
    ("bin/deploy.sh", 0o100755, b"#!/bin/sh\nexec deploy\n"),
]

REQUESTS: list[dict[str, Any]] = [
    {
        "name": "commit, bound to the staged change's tree",
        "tool": "commit",
        "arguments": {"message": "Rotate the deploy key"},
        "session": "s-7f3a9c",
        "token": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "repo": "app",
        "change": "",  # filled in from CHANGE below
    },
    {
        "name": "issue_sub_token, no change",
        "tool": "issue_sub_token",
        "arguments": {"agent": "helper", "ops": ["read", "write"], "paths": ["deploy/**"],
                      "ttl_seconds": 3600, "delegable": False, "repos": None},
        "session": "s-7f3a9c",
        "token": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "repo": "app",
    },
    {
        "name": "text that is not NFC is hashed as its UTF-8 bytes",
        "tool": "write_file",
        "arguments": {"path": "notes/cafe.txt", "content": "cafe\u0301", "encoding": "utf-8"},
        "session": "s-7f3a9c",
        "token": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "repo": "app",
    },
]


def _public(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw
    )


def _lower(value: Any) -> Any:
    import unicodedata

    if isinstance(value, str):
        return value if unicodedata.is_normalized("NFC", value) else value.encode("utf-8")
    if isinstance(value, list):
        return [_lower(v) for v in value]
    if isinstance(value, dict):
        return {k: _lower(v) for k, v in value.items()}
    return value


def _request(spec: dict[str, Any]) -> dict[str, Any]:
    request = {k: spec[k] for k in ("tool", "session", "token", "repo")}
    request["v"] = 1
    request["arguments"] = _lower(spec["arguments"])
    if "change" in spec:
        request["change"] = spec["change"]
    encoded = cbor2.dumps(request, canonical=True)
    return {**spec, "cbor": encoded.hex(), "hash": hashlib.sha256(encoded).hexdigest()}


def _change() -> str:
    rows = sorted((p, m, None if d is None else hashlib.sha256(d).digest()) for p, m, d in CHANGE)
    return hashlib.sha256(cbor2.dumps([list(r) for r in rows], canonical=True)).hexdigest()


def main() -> None:
    REQUESTS[0]["change"] = _change()
    operator_public = _public(OPERATOR_SEED)
    operator_kid = hashlib.sha256(operator_public).digest()[:16].hex()
    requests = [_request(r) for r in REQUESTS]
    decisions = []
    for decision, note, request in (
        ("approved", "deploy window 14:00", requests[0]),
        ("denied", "not during the freeze", requests[1]),
    ):
        body = cbor2.dumps(
            {
                "v": 1,
                "id": "apr_" + ("a" * 13) + ("2" * 13),
                "request": bytes.fromhex(request["hash"]),
                "decision": decision,
                "operator": "alice",
                "operator_key": operator_kid,
                "note": note,
                "decided_at": 1_796_014_836,
                "expires_at": 1_796_018_400,
            },
            canonical=True,
        )
        op_sig = Ed25519PrivateKey.from_private_bytes(OPERATOR_SEED).sign(OPERATOR_CONTEXT + body)
        engine_sig = Ed25519PrivateKey.from_private_bytes(ENGINE_SEED).sign(
            ENGINE_CONTEXT + body + op_sig
        )
        envelope = cbor2.dumps(
            {"v": "chit-approval/1", "body": body, "operator_sig": op_sig,
             "engine_key": ENGINE_KID, "engine_sig": engine_sig},
            canonical=True,
        )
        decisions.append({
            "decision": decision, "note": note, "request": request["hash"],
            "body": body.hex(), "operator_sig": op_sig.hex(), "engine_sig": engine_sig.hex(),
            "discharge": envelope.hex(),
        })
    entry = {
        "v": "chit-call-log/2", "seq": 7, "prev": bytes(range(32)), "time": 1_796_014_836,
        "agent": "(operator)", "chain": [], "session": "s-7f3a9c", "tool": "chit approve",
        "arguments": {
            "approval": "apr_" + ("a" * 13) + ("2" * 13), "request": requests[0]["hash"],
            "tool": "commit", "agent": "docs-bot", "operator": "alice",
            "operator_key": operator_kid, "note": "deploy window 14:00",
        },
        "decision": "allowed", "code": None, "policy_hash": "sha256:" + "ab" * 32,
        "catalog_hash": None, "repo": "app",
    }
    entry_bytes = cbor2.dumps(entry, canonical=True)
    out = {
        "format": "chit-approval/1",
        "engine": {"seed": ENGINE_SEED.hex(), "public": _public(ENGINE_SEED).hex(),
                   "kid": ENGINE_KID},
        "operator": {"name": "alice", "seed": OPERATOR_SEED.hex(),
                     "public": operator_public.hex(), "key_id": operator_kid},
        "change": {"entries": [[p, m, None if d is None else d.decode()] for p, m, d in CHANGE],
                   "digest": _change()},
        "requests": requests,
        "decisions": decisions,
        "calllog_entry": {"seq": 7, "prev": bytes(range(32)).hex(), "time": 1_796_014_836,
                          "session": "s-7f3a9c", "policy_hash": "sha256:" + "ab" * 32,
                          "hex": entry_bytes.hex(),
                          "sha256": hashlib.sha256(entry_bytes).hexdigest()},
    }
    path = Path(__file__).resolve().parent / "approval.json"
    path.write_text(json.dumps(out, indent=2, ensure_ascii=True) + "\n", "utf-8")


if __name__ == "__main__":
    main()
