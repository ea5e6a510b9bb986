"""Regenerate tests/vectors/attestation.json (deterministic: a fixed key and statements).

Run from the repository root:
``PYTHONPATH=. python tests/vectors/make_attestation_vectors.py``.

The envelopes are built here from the specifications (docs/attestations.md, the
in-toto Statement v1 and DSSE v1), with ``json``, ``base64`` and a plain
Ed25519 implementation, not with ``engine.audit.intoto``, so the vectors check
the engine against the written format. The key's seed is the bytes 0 to 31:
public test data, never a real key. Ed25519 is deterministic, so the same
statement always gives the same envelope.

Regenerate only with a deliberate format change.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

HERE = Path(__file__).resolve().parent
SEED = bytes(range(32))
KID = "e20261130-00000000"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
COMMIT = "5137c6a1e4e33bc5bd0d3d1c4b0b2c8e4f2c9d1a"
BASE = "2bec543f385368309409a5bac89c64194f8c4852"


def dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def envelope(statement: dict[str, Any]) -> bytes:
    body = dumps(statement)
    sig = Ed25519PrivateKey.from_private_bytes(SEED).sign(pae(PAYLOAD_TYPE, body))
    return dumps({
        "payload": base64.b64encode(body).decode("ascii"),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": KID, "sig": base64.b64encode(sig).decode("ascii")}],
    })


def main() -> None:
    provenance = json.loads((HERE / "provenance.json").read_text())["valid"][0]
    record = dict(provenance["record"])
    predicate = record | {"provenance": "sha256:" + provenance["envelope_sha256"]}
    commit_statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": record["lane"], "digest": {"gitCommit": COMMIT}}],
        "predicateType": "https://chit.invalid/attestation/provenance/v1",
        "predicate": predicate,
    }
    line = envelope(commit_statement)
    digest = "sha256:" + hashlib.sha256(line).hexdigest()
    lane_statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": record["lane"], "digest": {"gitCommit": COMMIT}}],
        "predicateType": "https://chit.invalid/attestation/lane/v1",
        "predicate": {
            "lane": record["lane"],
            "base": {"ref": "refs/heads/main", "commit": BASE},
            "head": COMMIT,
            "commits": [{"commit": COMMIT, "attestation": digest}],
            "verdict": {"ok": True, "checked": 1, "findings": []},
            "time": record["time"] + 60,
        },
    }
    public = Ed25519PrivateKey.from_private_bytes(SEED).public_key()
    doc = {
        "seed_hex": SEED.hex(),
        "kid": KID,
        "public_hex": public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex(),
        "public_pem": public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        .decode(),
        "valid": [
            {"name": "commit provenance", "statement": commit_statement,
             "envelope": line.decode(), "digest": digest},
            {"name": "lane summary", "statement": lane_statement,
             "envelope": envelope(lane_statement).decode(),
             "digest": "sha256:" + hashlib.sha256(envelope(lane_statement)).hexdigest()},
        ],
    }
    (HERE / "attestation.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
