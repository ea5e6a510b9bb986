"""Regenerate tests/vectors/provenance.json (deterministic: fixed keys and records).

Run from the repository root:
``PYTHONPATH=. python tests/vectors/make_provenance_vectors.py``.

Envelopes are built here from the specification (docs/provenance-format.md) with
the ``chit-det/1`` encoder and a plain Ed25519 implementation, not with
``engine.audit.provenance.seal``, so the vectors check the engine against the written
format. Ed25519 (RFC 8032) is deterministic: a fixed seed and fixed bytes give a
fixed signature. The three seeds are the secret keys of RFC 8032 section 7.1,
TEST 1, 2 and 3: published test keys, never to be used for anything else.

Regenerate only with a deliberate format change (every byte changes with it).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from engine.auth import cbor

RECORD_VERSION = "chit-provenance/1"
SIGNATURE_CONTEXT = b"chit-provenance/1 signature\x00"
TRAILER = "Chit-Provenance"

# RFC 8032 section 7.1 secret keys (TEST 1, TEST 2, TEST 3).
ACTIVE_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RETIRED_SEED = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
UNKNOWN_SEED = bytes.fromhex("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
ACTIVE, RETIRED, UNKNOWN = "e20261130-00000002", "e20261101-00000001", "e20261130-0000dead"
CREATED = {ACTIVE: 1_796_000_000, RETIRED: 1_793_500_000, UNKNOWN: 1_796_000_000}
SEEDS = {ACTIVE: ACTIVE_SEED, RETIRED: RETIRED_SEED, UNKNOWN: UNKNOWN_SEED}

NOW = 1_796_014_836
# The hash of the one-tool example document of docs/catalog-encoding.md.
CATALOG = {
    "hash": "sha256:de6f87e2144ca5d44e097c12753e03af8293d6ae07e4a8bbe4c57f50231c4480",
    "encoding": "chit-catalog/1",
}

POLICY_TOML = """\
version = 1

[limits]
file_bytes = 1048576
staged_bytes = 8388608
staged_files = 256
token_lifetime_seconds = 604800
delegation_depth = 3

[paths]
forbidden = ["**/.env", "**/*.pem"]
protected = []
"""
# The same policy: other layout, comments, key order, defaults left out.
POLICY_TOML_REFORMATTED = """\
# same policy, written differently
[paths]
protected = [ ]
forbidden = [
  "**/.env",   # dotenv files
  "**/*.pem",
]
[limits]
delegation_depth = 3
file_bytes = 1_048_576
"""
POLICY_TOML_CHANGED = POLICY_TOML.replace("staged_files = 256", "staged_files = 257")


def public_of(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw
    )


def sign(seed: bytes, message: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).sign(message)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_id(label: str, n: int = 40) -> str:
    """A fixed hex id (git object ids are 40 hex, block and session ids 32)."""
    return hashlib.sha256(label.encode()).hexdigest()[:n]


def envelope(record_bytes: bytes, kid: str, *, seed: bytes | None = None,
             context: bytes = SIGNATURE_CONTEXT) -> bytes:
    sig = sign(SEEDS[kid] if seed is None else seed, context + record_bytes)
    return cbor.encode(
        {"v": RECORD_VERSION, "alg": "ed25519", "kid": kid, "record": record_bytes, "sig": sig}
    )


def who(name: str, time: int) -> dict[str, Any]:
    return {"name": name, "email": f"{name}@agents.chit.invalid", "time": time, "offset": 0}


def trailers_block(agent: str, session: str, token_id: str) -> str:
    return (
        f"Chit-Agent: {agent}\n"
        f"Chit-Session: {session}\n"
        f"Chit-Token-Id: {token_id}\n"
        f"Chit-Catalog-Hash: {CATALOG['hash']}\n"
        f"Chit-Catalog-Encoding: {CATALOG['encoding']}\n"
    )


def record_for(
    *, kid: str, agent: str, title: str, chain: list[dict[str, Any]],
    change: list[dict[str, Any]], label: str, time: int = NOW,
) -> tuple[dict[str, Any], str]:
    """A record and the commit message it hashes (without the provenance line)."""
    session = fake_id(label + " session", 32)
    token_id = chain[-1]["id"]
    signed_part = title + "\n\n" + trailers_block(agent, session, token_id)
    record = {
        "v": RECORD_VERSION,
        "kid": kid,
        "lane": f"agent/{agent}",
        "agent": agent,
        "session": session,
        "token_id": token_id,
        "time": time,
        "commit": {
            "tree": fake_id(label + " tree"),
            "parents": [fake_id(label + " parent")],
            "author": who(agent, time),
            "committer": who(agent, time),
            "message": "sha256:" + sha256(signed_part.encode("utf-8")),
        },
        "chain": chain,
        "catalog": dict(CATALOG),
        "policy": policy_hash_of(POLICY_TOML),
        "change": change,
    }
    return record, signed_part


def policy_model(toml_text: str) -> dict[str, Any]:
    """The policy as loaded (defaults filled in), as its JSON model dump."""
    import policy

    dumped: dict[str, Any] = policy.load(toml_text).model_dump(mode="json")
    return dumped


def policy_hash_of(toml_text: str) -> str:
    return "sha256:" + sha256(cbor.encode(policy_model(toml_text)))


ROOT = fake_id("docs-bot root block", 32)
HELPER = fake_id("docs-bot.gzip delegation block", 32)
LEAD = fake_id("lead root block", 32)
LEAD_HELPER = fake_id("lead.helper delegation block", 32)
LEAD_SUB = fake_id("lead.helper.sub delegation block", 32)


def valid_cases() -> list[tuple[str, dict[str, Any], str]]:
    one_hop = [
        {
            "id": ROOT, "agent": "docs-bot", "ops": ["commit", "read", "write"],
            "paths": [["docs/**", "src/api/**"]], "exp": NOW + 7200, "delegable": False,
        }
    ]
    v1, m1 = record_for(
        kid=ACTIVE, agent="docs-bot", title="Document the API", label="v1", chain=one_hop,
        change=[
            {
                "path": "docs/api.md",
                "old": fake_id("v1 old blob"), "old_mode": 0o100644,
                "new": fake_id("v1 new blob"), "new_mode": 0o100644,
            }
        ],
    )
    two_hops = [
        {
            "id": ROOT, "agent": "docs-bot",
            "ops": ["commit", "read", "sub-token:issue", "write"],
            "paths": [["src/starlette/middleware/**"]],
            "exp": NOW + 900, "nbf": NOW - 600, "delegable": True,
        },
        {
            "id": HELPER, "agent": "docs-bot.gzip", "ops": ["commit", "read", "write"],
            "paths": [["src/starlette/middleware/**"], ["src/starlette/middleware/gzip*"]],
            "exp": NOW + 600, "nbf": NOW - 600, "delegable": False, "iat": NOW - 1,
        },
    ]
    v2, m2 = record_for(
        kid=RETIRED, agent="docs-bot.gzip", title="GZip: add a helper script, drop the old one",
        label="v2", chain=two_hops, time=CREATED[ACTIVE] - 3600,
        change=[
            {"path": "src/starlette/middleware/gzip.py",
             "old": fake_id("v2 gzip old"), "old_mode": 0o100644,
             "new": fake_id("v2 gzip new"), "new_mode": 0o100644},
            {"path": "src/starlette/middleware/gzip_bench.sh",
             "new": fake_id("v2 bench"), "new_mode": 0o100755},
            {"path": "src/starlette/middleware/gzip_legacy.py",
             "old": fake_id("v2 legacy"), "old_mode": 0o100644},
            {"path": "src/starlette/middleware/gzip_tool",
             "old": fake_id("v2 tool"), "old_mode": 0o100644,
             "new": fake_id("v2 tool"), "new_mode": 0o100755},
        ],
    )
    three_hops = [
        {
            "id": LEAD, "agent": "lead", "ops": ["commit", "read", "sub-token:issue", "write"],
            "paths": [["**"]], "exp": NOW + 86400, "delegable": True,
        },
        {
            "id": LEAD_HELPER, "agent": "lead.helper",
            "ops": ["commit", "read", "sub-token:issue", "write"],
            "paths": [["**"], ["docs/**"]], "exp": NOW + 3600, "delegable": True,
            "iat": NOW - 120,
        },
        {
            "id": LEAD_SUB, "agent": "lead.helper.sub", "ops": ["commit", "read", "write"],
            "paths": [["**"], ["docs/**"], ["docs/caf\u00e9/**"], ["docs/caf\u00e9/*.md"]],
            "exp": NOW + 1800, "nbf": NOW - 60, "delegable": False, "iat": NOW - 60,
        },
    ]
    v3, m3 = record_for(
        kid=ACTIVE, agent="lead.helper.sub",
        title="R\u00e9sum\u00e9 du caf\u00e9: corrige l\u2019accent\n\nLe corps du message.",
        label="v3", chain=three_hops,
        change=[
            {"path": "docs/caf\u00e9/menu.md",
             "old": fake_id("v3 old"), "old_mode": 0o100644,
             "new": fake_id("v3 new"), "new_mode": 0o100644},
            {"path": "docs/caf\u00e9/\u00e9t\u00e9.md",
             "new": fake_id("v3 added"), "new_mode": 0o100644},
        ],
    )
    return [
        ("root token, one file modified", v1, m1),
        ("delegated helper: added, deleted, mode change; signed by a now retired key", v2, m2),
        ("three hops, the last attenuated; non-ASCII message, NFC paths", v3, m3),
    ]


def key_entry(kid: str, status: str) -> dict[str, Any]:
    return {
        "kid": kid,
        "alg": "ed25519",
        "created": CREATED[kid],
        "status": status,
        "seed_hex": SEEDS[kid].hex(),
        "public_hex": public_of(SEEDS[kid]).hex(),
        "public": b64(public_of(SEEDS[kid])),
    }


def invalid_cases(base: dict[str, Any], base_env: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, env: bytes, check: str, stage: str = "open_envelope") -> None:
        out.append({"name": name, "stage": stage, "check": check, "envelope_hex": env.hex()})

    def signed(record: dict[str, Any], kid: str = ACTIVE) -> bytes:
        return envelope(cbor.encode(record), kid)

    body = cbor.encode(base)
    # -- the envelope and its signature
    sig_at = base_env.index(sign(ACTIVE_SEED, SIGNATURE_CONTEXT + body))
    flipped = bytearray(base_env)
    flipped[sig_at] ^= 0x01
    add("signature with one flipped byte", bytes(flipped), "signature")
    tampered = bytearray(base_env)
    at = base_env.index(body) + len(body) - 3
    tampered[at] ^= 0x01  # a hex digit of token_id, the record's last field
    add("record byte changed after signing", bytes(tampered), "signature")
    unknown = dict(base, kid=UNKNOWN)
    add("signed by an unknown key id", envelope(cbor.encode(unknown), UNKNOWN), "signature")
    add("signed by an unknown key under a known key id",
        envelope(body, ACTIVE, seed=UNKNOWN_SEED), "signature")
    add("signature without the context prefix",
        envelope(body, ACTIVE, context=b""), "signature")
    other = dict(base, kid=RETIRED)
    add("envelope and record name different keys", envelope(cbor.encode(other), ACTIVE),
        "signature")
    raw_env = {"v": RECORD_VERSION, "kid": ACTIVE, "alg": "ed25519", "record": body,
               "sig": sign(ACTIVE_SEED, SIGNATURE_CONTEXT + body)}
    add("envelope not canonical: map keys out of order",
        cbor2.dumps(raw_env, canonical=False), "record_decodes")
    add("envelope with an extra key",
        cbor.encode(dict(raw_env, note="x")), "record_decodes")
    add("envelope naming an unknown version",
        cbor.encode(dict(raw_env, v="chit-provenance/9")), "record_decodes")
    add("envelope naming another algorithm",
        cbor.encode(dict(raw_env, alg="ed448")), "record_decodes")
    # -- the record (each one correctly signed, so only the record is at fault)
    add("record with an extra key", signed(dict(base, note="unsigned field")), "record_decodes")
    missing = dict(base)
    del missing["policy"]
    add("record missing a key (policy)", signed(missing), "record_decodes")
    reordered = dict(sorted(base.items(), key=lambda kv: kv[0], reverse=True))
    add("record not canonical: map keys out of order",
        envelope(cbor2.dumps(reordered, canonical=False), ACTIVE), "record_decodes")
    add("record not canonical: a float",
        envelope(cbor2.dumps(dict(base, time=float(NOW)), canonical=True), ACTIVE),
        "record_decodes")
    add("record field of the wrong type (time as text)",
        signed(dict(base, time=str(NOW))), "record_decodes")
    short_tree = copy.deepcopy(base)
    short_tree["commit"]["tree"] = base["commit"]["tree"][:39]
    add("record commit.tree not 40 hex", signed(short_tree), "record_decodes")
    no_chain = dict(base, chain=[])
    add("record with an empty chain", signed(no_chain), "record_decodes")
    # -- the delegation chain (decodes and verifies; check_chain refuses it)
    two = [
        {"id": ROOT, "agent": "docs-bot", "ops": ["commit", "read", "sub-token:issue", "write"],
         "paths": [["src/**"]], "exp": NOW + 900, "nbf": NOW - 600, "delegable": True},
        {"id": HELPER, "agent": "docs-bot.gzip", "ops": ["commit", "read", "write"],
         "paths": [["src/**"], ["src/gzip.py"]], "exp": NOW + 600, "nbf": NOW - 600,
         "delegable": False, "iat": NOW - 1},
    ]

    def chained(name: str, hop: dict[str, Any], check: str = "chain",
                root: dict[str, Any] | None = None, drop: str = "", **fields: Any) -> None:
        child = {k: v for k, v in dict(two[1], **hop).items() if k != drop}
        chain = [dict(two[0], **(root or {})), child]
        rec = dict(base, agent="docs-bot.gzip", lane="agent/docs-bot.gzip",
                   token_id=HELPER, chain=chain)
        rec.update(fields)
        add(name, signed(rec), check, "check_chain")

    chained("chain widens the operations", {}, root={"ops": ["commit", "read",
                                                             "sub-token:issue"]})
    chained("chain drops the parent's path scope", {"paths": [["src/gzip.py"]]})
    chained("chain replaces the parent's path scope", {"paths": [["**"], ["src/gzip.py"]]})
    chained("chain outlives its parent", {"exp": NOW + 901})
    chained("chain valid before its parent", {"nbf": NOW - 601})
    chained("chain drops the parent's not-before", {}, drop="nbf")
    chained("chain delegated by a non-delegable hop", {}, root={"delegable": False})
    chained("chain hop is not a sub-agent of its parent", {"agent": "docs-bot2"},
            agent="docs-bot2", lane="agent/docs-bot2")
    chained("chain hop names a sibling, not a child", {"agent": "docs-botx.gzip"},
            agent="docs-botx.gzip", lane="agent/docs-botx.gzip")
    chained("chain's last agent is not the record's agent", {}, check="lane",
            agent="docs-bot")
    chained("record lane is not the agent's lane", {}, check="lane",
            lane="agent/docs-bot")
    return out


def message_cases(signed_part: str, trailer_hash: str) -> list[dict[str, Any]]:
    line = f"{TRAILER}: {trailer_hash}\n"
    hex_ = trailer_hash.removeprefix("sha256:")
    bad = [
        ("no provenance trailer", signed_part),
        ("provenance trailer not the last line", signed_part + line + "Chit-Extra: x\n"),
        ("no newline after the trailer", signed_part + line[:-1]),
        ("text after the trailer's newline", signed_part + line + "\n"),
        ("uppercase hex", signed_part + line.replace(trailer_hash, "sha256:" + hex_.upper())),
        ("63 hex digits", signed_part + line.replace(trailer_hash, trailer_hash[:-1])),
        ("the trailer as the first line", line),
        ("another hash name", signed_part + line.replace("sha256:", "sha512:")),
        ("two spaces after the colon", signed_part + line.replace(": ", ":  ")),
    ]
    return [{"name": n, "message": m, "check": "trailers"} for n, m in bad]


def main() -> None:
    valid = []
    for name, record, signed_part in valid_cases():
        body = cbor.encode(record)
        env = envelope(body, record["kid"])
        digest = sha256(env)
        valid.append(
            {
                "name": name,
                "kid": record["kid"],
                "public_key": b64(public_of(SEEDS[record["kid"]])),
                "record": record,
                "record_hex": body.hex(),
                "record_sha256": sha256(body),
                "signature_hex": sign(SEEDS[record["kid"]], SIGNATURE_CONTEXT + body).hex(),
                "envelope_hex": env.hex(),
                "envelope_sha256": digest,
                "message": signed_part + f"{TRAILER}: sha256:{digest}\n",
                "signed_part": signed_part,
            }
        )
    first = valid[0]
    base = first["record"]
    policies = []
    for name, text in (
        ("a policy", POLICY_TOML),
        ("the same policy, formatted differently (hashes alike)", POLICY_TOML_REFORMATTED),
        ("one limit changed (hashes differently)", POLICY_TOML_CHANGED),
    ):
        model = policy_model(text)
        policies.append(
            {
                "name": name,
                "toml": text,
                "model": model,
                "hex": cbor.encode(model).hex(),
                "policy_hash": policy_hash_of(text),
            }
        )
    doc = {
        "format": RECORD_VERSION,
        "note": "Signed chit-provenance/1 records (docs/provenance-format.md). The seeds are "
        "RFC 8032 section 7.1 test keys (TEST 1, 2, 3): public test data, never a real key. "
        "An implementation passes if it encodes every valid record to record_hex, signs it to "
        "envelope_hex, accepts every valid envelope with public_keys and refuses every invalid "
        "one with the given check (stage open_envelope: decoding and signature; stage "
        "check_chain: the delegation chain of a record that verified).",
        "signature_context_hex": SIGNATURE_CONTEXT.hex(),
        "keys": [key_entry(ACTIVE, "active"), key_entry(RETIRED, "retired")],
        "unknown_key": key_entry(UNKNOWN, "active"),
        "public_keys": {
            "format": "chit-engine-keys/1",
            "keys": [
                {"kid": k, "alg": "ed25519", "created": CREATED[k], "status": s,
                 "public": b64(public_of(SEEDS[k]))}
                for k, s in ((ACTIVE, "active"), (RETIRED, "retired"))
            ],
        },
        "valid": valid,
        "invalid": invalid_cases(base, bytes.fromhex(first["envelope_hex"])),
        "invalid_messages": message_cases(first["signed_part"],
                                          "sha256:" + first["envelope_sha256"]),
        "policies": policies,
    }
    Path(__file__).with_name("provenance.json").write_text(
        json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
