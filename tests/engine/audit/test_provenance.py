"""Provenance records (docs/provenance-format.md): vectors, pure helpers, docs in step.

The vectors (tests/vectors/provenance.json) are built from the written format by
tests/vectors/make_provenance_vectors.py, not by engine.audit.provenance; here the
engine must reproduce them byte for byte and refuse every negative one with the
documented check.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pygit2
import pytest

import policy
from engine.audit import provenance
from engine.audit import verify as audit
from engine.audit.provenance import ProvenanceError
from engine.auth import cbor, signkeys
from tests.conftest import World

ROOT = Path(__file__).resolve().parents[3]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "provenance.json").read_text("utf-8"))
DOC = (ROOT / "docs" / "provenance-format.md").read_text("utf-8")
AUDIT_DOC = (ROOT / "docs" / "audit.md").read_text("utf-8")


def _signing_key(kid: str) -> signkeys.SigningKey:
    entry = next(k for k in VECTORS["keys"] + [VECTORS["unknown_key"]] if k["kid"] == kid)
    return signkeys.SigningKey(
        key_id=entry["kid"],
        created=entry["created"],
        status="active",
        public=bytes.fromhex(entry["public_hex"]),
        seed=bytes.fromhex(entry["seed_hex"]),
    )


def _trusted() -> dict[str, Any]:
    return signkeys.load_public_keys(VECTORS["public_keys"])


# ----------------------------------------------------------------- the vectors


def test_vector_file_covers_the_required_ground() -> None:
    assert VECTORS["format"] == provenance.RECORD_VERSION == "chit-provenance/1"
    assert bytes.fromhex(VECTORS["signature_context_hex"]) == provenance.SIGNATURE_CONTEXT
    assert len(VECTORS["valid"]) >= 3
    names = [v["name"] for v in VECTORS["valid"] + VECTORS["invalid"]]
    assert len(names) == len(set(names))
    checks = {v["check"] for v in VECTORS["invalid"]}
    assert checks == {"signature", "record_decodes", "chain", "lane"}
    wanted = ("flipped byte", "unknown key id", "extra key", "not canonical", "widens")
    for fragment in wanted:
        assert any(fragment in v["name"] for v in VECTORS["invalid"]), fragment


def test_vector_keys_are_the_rfc_8032_test_keys() -> None:
    """Anyone can check their Ed25519 against RFC 8032 section 7.1 first."""
    rfc = {
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60":
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb":
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7":
            "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
    }
    for entry in VECTORS["keys"] + [VECTORS["unknown_key"]]:
        assert rfc[entry["seed_hex"]] == entry["public_hex"]
        raw = base64.urlsafe_b64decode(entry["public"] + "=" * (-len(entry["public"]) % 4))
        assert raw.hex() == entry["public_hex"]


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vector_rebuilds_byte_for_byte(vector: dict[str, Any]) -> None:
    record = vector["record"]
    key = _signing_key(vector["kid"])
    body = cbor.encode(record)
    assert body.hex() == vector["record_hex"]
    assert hashlib.sha256(body).hexdigest() == vector["record_sha256"]
    assert key.sign(provenance.SIGNATURE_CONTEXT + body).hex() == vector["signature_hex"]
    envelope = provenance.seal(record, key)
    assert envelope.hex() == vector["envelope_hex"]
    assert hashlib.sha256(envelope).hexdigest() == vector["envelope_sha256"]
    assert provenance.envelope_hash(envelope) == "sha256:" + vector["envelope_sha256"]
    # The envelope carries the record's bytes verbatim, and the signature.
    env = cbor.decode(envelope)
    assert list(env) == ["v", "alg", "kid", "sig", "record"]
    assert env["record"] == body and env["sig"].hex() == vector["signature_hex"]
    # Opened with the exported public keys (a retired key still verifies).
    assert provenance.open_envelope(envelope, _trusted()) == record
    assert key.public == base64.urlsafe_b64decode(vector["public_key"] + "=")
    provenance.check_chain(record)


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vector_message_binds_record_and_commit(vector: dict[str, Any]) -> None:
    signed_part, named = provenance.split_message(vector["message"])
    assert signed_part == vector["signed_part"]
    assert named == "sha256:" + vector["envelope_sha256"]
    assert provenance.message_digest(signed_part) == vector["record"]["commit"]["message"]
    assert vector["message"] == signed_part + f"Chit-Provenance: {named}\n"


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vector_is_refused_with_its_check(vector: dict[str, Any]) -> None:
    envelope = bytes.fromhex(vector["envelope_hex"])
    if vector["stage"] == "open_envelope":
        with pytest.raises(ProvenanceError) as info:
            provenance.open_envelope(envelope, _trusted())
    else:
        assert vector["stage"] == "check_chain"
        record = provenance.open_envelope(envelope, _trusted())
        with pytest.raises(ProvenanceError) as info:
            provenance.check_chain(record)
    assert info.value.check == vector["check"], info.value.reason


@pytest.mark.parametrize("vector", VECTORS["invalid_messages"], ids=lambda v: v["name"])
def test_invalid_message_is_refused(vector: dict[str, Any]) -> None:
    with pytest.raises(ProvenanceError) as info:
        provenance.split_message(vector["message"])
    assert info.value.check == vector["check"] == "trailers"


def test_unknown_key_vector_verifies_once_the_key_is_trusted() -> None:
    """The unknown-kid vector fails for the key, not for its bytes."""
    case = next(v for v in VECTORS["invalid"] if v["name"] == "signed by an unknown key id")
    unknown = VECTORS["unknown_key"]
    doc = copy.deepcopy(VECTORS["public_keys"])
    doc["keys"].append({k: unknown[k] for k in ("kid", "alg", "created", "status", "public")})
    record = provenance.open_envelope(bytes.fromhex(case["envelope_hex"]),
                                      signkeys.load_public_keys(doc))
    assert record["kid"] == unknown["kid"]


def test_key_files_and_export_match_the_documented_formats(tmp_path: Path) -> None:
    """<home>/keys/signing/<kid>.json as keys/README.md describes it, exported as documented."""
    folder = tmp_path / "keys" / "signing"
    folder.mkdir(parents=True, mode=0o700)
    for entry in VECTORS["keys"]:
        path = folder / f"{entry['kid']}.json"
        seed = bytes.fromhex(entry["seed_hex"])
        doc = {
            "kid": entry["kid"],
            "alg": "ed25519",
            "created": entry["created"],
            "status": entry["status"],
            "public": entry["public"],
            "seed": base64.urlsafe_b64encode(seed).rstrip(b"=").decode(),
        }
        path.write_text(json.dumps(doc))
        os.chmod(path, 0o600)
    assert signkeys.export_public_keys(tmp_path) == VECTORS["public_keys"]
    active = signkeys.active_signing_key(tmp_path)
    assert active.key_id == VECTORS["keys"][0]["kid"]
    assert active.seed.hex() == VECTORS["keys"][0]["seed_hex"]
    first = VECTORS["valid"][0]
    assert provenance.seal(first["record"], active).hex() == first["envelope_hex"]


# ----------------------------------------------------------------- split_message / digest


def test_split_message_returns_everything_before_the_provenance_line() -> None:
    hex_ = "ab" * 32
    message = f"title\n\nbody\n\nChit-Agent: a\nChit-Provenance: sha256:{hex_}\n"
    assert provenance.split_message(message) == (
        "title\n\nbody\n\nChit-Agent: a\n",
        f"sha256:{hex_}",
    )
    # Only the last line counts; an earlier provenance-looking line is plain text.
    twice = f"t\n\nChit-Provenance: sha256:{'cd' * 32}\nChit-Provenance: sha256:{hex_}\n"
    assert provenance.split_message(twice) == (
        f"t\n\nChit-Provenance: sha256:{'cd' * 32}\n",
        f"sha256:{hex_}",
    )


@pytest.mark.parametrize(
    "message",
    [
        "",
        "title\n",
        "title\n\nChit-Provenance: sha256:" + "ab" * 32,
        "title\n\nChit-Provenance: sha256:" + "ab" * 32 + "\r\n",
        "title\n\nchit-provenance: sha256:" + "ab" * 32 + "\n",
        "title\n\nChit-Provenance: sha256:" + "AB" * 32 + "\n",
        "title\n\nChit-Provenance: " + "ab" * 32 + "\n",
        "Chit-Provenance: sha256:" + "ab" * 32 + "\n",
    ],
)
def test_split_message_refuses_anything_else(message: str) -> None:
    with pytest.raises(ProvenanceError) as info:
        provenance.split_message(message)
    assert info.value.check == "trailers"


def test_message_digest_is_sha256_of_the_utf8_bytes() -> None:
    text = "R\u00e9sum\u00e9\n\nChit-Agent: a\n"
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert provenance.message_digest(text) == f"sha256:{expected}"
    assert provenance.message_digest("") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    # No normalisation: a different spelling is a different message.
    assert provenance.message_digest("e\u0301") != provenance.message_digest("\u00e9")


# ----------------------------------------------------------------- check_chain


def _chain_record(*hops: dict[str, Any]) -> dict[str, Any]:
    agent = hops[-1]["agent"]
    return {"agent": agent, "lane": f"agent/{agent}", "chain": list(hops)}


ROOT_HOP = {
    "id": "0" * 32, "agent": "lead", "ops": ["commit", "read", "sub-token:issue", "write"],
    "paths": [["src/**"]], "exp": 2000, "nbf": 100, "delegable": True,
}
CHILD_HOP = {
    "id": "1" * 32, "agent": "lead.helper", "ops": ["read", "write"],
    "paths": [["src/**"], ["src/a/**"]], "exp": 1500, "nbf": 100, "delegable": False,
    "iat": 900,
}


def test_check_chain_accepts_a_single_hop_and_a_narrowing_chain() -> None:
    provenance.check_chain(_chain_record(ROOT_HOP))
    provenance.check_chain(_chain_record(ROOT_HOP, CHILD_HOP))
    # Equal scope is narrowing too (nothing wider), as is a later not-before.
    same = dict(CHILD_HOP, ops=ROOT_HOP["ops"], paths=ROOT_HOP["paths"], exp=2000,
                nbf=150, delegable=True)
    provenance.check_chain(_chain_record(ROOT_HOP, same))
    grandchild = dict(CHILD_HOP, agent="lead.helper.sub", id="2" * 32, nbf=150)
    provenance.check_chain(_chain_record(ROOT_HOP, same, grandchild))
    # A parent without a not-before leaves the child free to have none.
    provenance.check_chain(_chain_record(
        {k: v for k, v in ROOT_HOP.items() if k != "nbf"},
        {k: v for k, v in CHILD_HOP.items() if k != "nbf"},
    ))


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"ops": ["commit", "read", "sub-token:issue", "write", "admin"]}, "chain"),
        ({"paths": [["src/a/**"]]}, "chain"),
        ({"paths": [["**"], ["src/a/**"]]}, "chain"),
        ({"paths": []}, "chain"),
        ({"exp": 2001}, "chain"),
        ({"nbf": 99}, "chain"),
        ({"agent": "leader"}, "chain"),
        ({"agent": "other.helper"}, "chain"),
        ({"agent": "lead"}, "chain"),
    ],
)
def test_check_chain_refuses_a_widening_hop(change: dict[str, Any], check: str) -> None:
    with pytest.raises(ProvenanceError) as info:
        provenance.check_chain(_chain_record(ROOT_HOP, dict(CHILD_HOP, **change)))
    assert info.value.check == check


def test_check_chain_refuses_an_operation_the_parent_lacked() -> None:
    parent = dict(ROOT_HOP, ops=["read", "sub-token:issue"])
    with pytest.raises(ProvenanceError) as info:
        provenance.check_chain(_chain_record(parent, CHILD_HOP))  # adds write
    assert info.value.check == "chain"


def test_check_chain_refuses_delegation_by_a_non_delegable_hop_and_a_dropped_nbf() -> None:
    for parent, child in (
        (dict(ROOT_HOP, delegable=False), CHILD_HOP),
        (ROOT_HOP, {k: v for k, v in CHILD_HOP.items() if k != "nbf"}),
    ):
        with pytest.raises(ProvenanceError) as info:
            provenance.check_chain(_chain_record(parent, child))
        assert info.value.check == "chain"


def test_check_chain_ties_the_last_hop_to_the_lane() -> None:
    record = _chain_record(ROOT_HOP, CHILD_HOP)
    for wrong in ({"agent": "lead"}, {"lane": "agent/lead"}, {"lane": "lead.helper"}):
        with pytest.raises(ProvenanceError) as info:
            provenance.check_chain(dict(record, **wrong))
        assert info.value.check == "lane"


# ----------------------------------------------------------------- policy_hash


@pytest.mark.parametrize("vector", VECTORS["policies"], ids=lambda v: v["name"])
def test_policy_vector(vector: dict[str, Any]) -> None:
    loaded = policy.load(vector["toml"])
    assert loaded.model_dump(mode="json") == vector["model"]
    assert cbor.encode(vector["model"]).hex() == vector["hex"]
    digest = hashlib.sha256(bytes.fromhex(vector["hex"])).hexdigest()
    assert provenance.policy_hash(loaded) == vector["policy_hash"] == f"sha256:{digest}"


def test_policy_hash_ignores_formatting_and_sees_every_value() -> None:
    hashes = [v["policy_hash"] for v in VECTORS["policies"]]
    assert hashes[0] == hashes[1] != hashes[2]
    default = provenance.policy_hash(policy.load(policy.DEFAULT_POLICY_TOML))
    # The defaults written out or left out: the same policy, the same hash.
    empty = provenance.policy_hash(policy.load(""))
    assert provenance.policy_hash(policy.load("version = 1\n# nothing else\n")) == empty
    spelled = "[limits]\ndelegation_depth = 3\n[paths]\nforbidden = []\nprotected = []\n"
    assert provenance.policy_hash(policy.load(spelled)) == empty
    assert empty != default  # the shipped file forbids a few globs the model does not
    changed = policy.DEFAULT_POLICY_TOML.replace("delegation_depth = 3", "delegation_depth = 2")
    assert provenance.policy_hash(policy.load(changed)) != default
    # The order of globs is part of the policy as written, so part of the hash.
    one = policy.load('[paths]\nforbidden = ["a/**", "b/**"]\n')
    two = policy.load('[paths]\nforbidden = ["b/**", "a/**"]\n')
    assert provenance.policy_hash(one) != provenance.policy_hash(two)


# ----------------------------------------------------------------- the real engine


def test_engine_record_is_stored_where_the_docs_say(world: World) -> None:
    """A commit made by the engine: git-notes layout, trailer, record and commit agree."""
    from engine.service import Engine
    from tests.engine.engine_calls import land

    engine = Engine(world.home, world.repo)
    token = world.mint()
    cid = land(engine, token, "y\n")
    repo = pygit2.Repository(str(world.repo))
    # `git cat-file blob refs/chit/provenance/alice:<aa>/<38 hex>`
    blob = repo.revparse_single(f"refs/chit/provenance/alice:{cid[:2]}/{cid[2:]}")
    envelope = bytes(blob.peel(pygit2.Blob).data)
    tree = repo.revparse_single("refs/chit/provenance/alice").peel(pygit2.Tree)
    assert [e.name for e in tree] == [cid[:2]]
    assert [(e.name, e.filemode) for e in tree[cid[:2]].peel(pygit2.Tree)] == [
        (cid[2:], pygit2.enums.FileMode.BLOB)
    ]
    commit = repo[cid]
    signed_part, named = provenance.split_message(commit.message)
    assert named == provenance.envelope_hash(envelope)
    record = provenance.open_envelope(envelope, signkeys.load_public_keys(
        signkeys.export_public_keys(world.home)))
    assert record["commit"] == {
        "tree": str(commit.tree_id),
        "parents": [str(p) for p in commit.parent_ids],
        "author": {"name": "alice", "email": "alice@agents.chit.invalid",
                   "time": commit.author.time, "offset": 0},
        "committer": {"name": "alice", "email": "alice@agents.chit.invalid",
                      "time": commit.committer.time, "offset": 0},
        "message": provenance.message_digest(signed_part),
    }
    assert record["token_id"] == record["chain"][-1]["id"]
    assert record["policy"] == provenance.policy_hash(
        policy.load((world.home / "policy.toml").read_text()))
    assert [e["path"] for e in record["change"]] == ["src/app.py"]
    assert audit.verify_repository(world.repo, public_keys=signkeys.load_public_keys(
        signkeys.export_public_keys(world.home)))["ok"]


# ----------------------------------------------------------------- docs in step


def _squashed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_format_doc_quotes_the_first_vector() -> None:
    first = VECTORS["valid"][0]
    squashed = _squashed(DOC)
    assert first["envelope_hex"] in squashed
    assert first["record_hex"] in squashed
    assert first["signature_hex"] in squashed
    assert first["envelope_sha256"] in squashed
    assert first["public_key"] in DOC
    assert VECTORS["signature_context_hex"] in squashed


def test_format_doc_names_every_record_field_and_the_constants() -> None:
    for name in ("v", "kid", "lane", "agent", "session", "token_id", "time", "commit",
                 "chain", "catalog", "policy", "change", "tree", "parents", "author",
                 "committer", "message", "old_mode", "new_mode", "delegable", "nbf", "iat"):
        assert f"`{name}`" in DOC, name
    for constant in (provenance.RECORD_VERSION, provenance.PROVENANCE_TRAILER,
                     signkeys.PUBLIC_KEYS_FORMAT, "refs/chit/provenance/"):
        assert constant in DOC


def _audit_check_names() -> set[str]:
    doc = audit.__doc__ or ""
    lines = re.findall(r"^- ((?:``[a-z_]+``(?:, )?)+):", doc, flags=re.MULTILINE)
    return {name for line in lines for name in re.findall(r"``([a-z_]+)``", line)}


def test_audit_doc_tables_exactly_the_checks_the_auditor_runs() -> None:
    names = _audit_check_names()
    assert len(names) >= 15
    # Sections 1-7 are the provenance audit; section 8 is the call log's own checks.
    provenance_part = AUDIT_DOC.split("\n## 8. The call log", 1)[0]
    table = set(re.findall(r"^\| `([a-z_]+)` \|", provenance_part, flags=re.MULTILINE))
    assert table == names
    source = (ROOT / "engine" / "audit" / "verify.py").read_text("utf-8")
    used = set(re.findall(r'(?:fail|Finding)\([^"\n]*"([a-z_]+)"', source))
    used |= set(re.findall(r'return \("([a-z_]+)",', source))
    used |= set(re.findall(r'ProvenanceError\(\s*"([a-z_]+)"',
                           (ROOT / "engine" / "audit" / "provenance.py").read_text("utf-8")))
    assert used <= names, used - names
