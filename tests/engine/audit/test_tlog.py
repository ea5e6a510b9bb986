"""The call log as a transparency log: its tree, checkpoints and proofs, checked independently.

Real SQLite store, real keys, the real CLI. The oracles are written here from the
specifications, not from engine/audit: RFC 6962's Merkle tree hash by its
recursive definition, and C2SP signed-note verification with hashlib and the
``cryptography`` library directly.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from engine import admin
from engine.audit import calllog, redact, tlog
from engine.auth import cbor, signkeys
from engine.state import open_store
from tests.conftest import World

# --- independent oracles -------------------------------------------------------------


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH, by its recursive definition, over entry bytes."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def open_note(text: str, name: str, public: bytes) -> list[str]:
    """C2SP signed-note: check the one signature by ``name``/``public``; the body's lines."""
    body, _, sigs = text.partition("\n\n")
    body += "\n"
    key_hash = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    for line in sigs.splitlines():
        dash, signer, blob = line.split(" ")
        raw = base64.b64decode(blob, validate=True)
        if dash == "\u2014" and signer == name and raw[:4] == key_hash:
            Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], body.encode())
            return body.splitlines()
    raise AssertionError("no signature by the key")


def verify_inclusion(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2, written out."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


# --- helpers ----------------------------------------------------------------------------


def _record(n: int, session: str = "s") -> calllog.CallRecord:
    return calllog.CallRecord(
        time=1_796_000_000 + n, agent="t", chain=("0" * 32,), session=session,
        tool="read_file", arguments=redact.redact_arguments({"path": f"src/{n}.py"}),
        decision="allowed", code=None, policy_hash="sha256:" + "1" * 64,
        catalog_hash="sha256:" + "2" * 64,
    )


def _public(home: Path) -> dict[str, Ed25519PublicKey]:
    return signkeys.load_public_keys(admin.export_public(home))


def _raw_public(home: Path) -> bytes:
    return signkeys.signing_keys(home)[0].public


def _entries(home: Path) -> list[bytes]:
    db = sqlite3.connect(home / "state.db")
    return [bytes(r[0]) for r in db.execute("SELECT entry FROM call_log ORDER BY seq")]


def _cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    admin.init_home(tmp_path / "home")
    return tmp_path / "home"


# --- the tree ------------------------------------------------------------------------


def test_the_tree_head_is_the_rfc6962_tree_of_the_entries(home: Path) -> None:
    store, signer = open_store(home), calllog.LogSigner(home)
    for batch in ([0], [1, 2], [3, 4, 5, 6], list(range(7, 20))):
        tree = tlog.append(store, [_record(n) for n in batch], signer, now=1)
        entries = _entries(home)
        assert tree.size == len(entries)
        assert tree.last == hashlib.sha256(entries[-1]).digest()
        assert tlog.merkle.frontier_root(
            tlog.merkle.decode_frontier(tree.frontier, tree.size), tree.size) == mth(entries)
    decoded = [cbor.decode(e) for e in _entries(home)]
    assert [d["seq"] for d in decoded] == list(range(1, 21))  # type: ignore[index]
    assert all(d["v"] == "chit-call-log/2" and "kid" not in d for d in decoded)  # type: ignore[operator,index]
    prevs = [d["prev"] for d in decoded]  # type: ignore[index]
    assert prevs[0] == bytes(32)
    assert prevs[1:] == [hashlib.sha256(e).digest() for e in _entries(home)[:-1]]


def test_a_checkpoint_is_signed_in_the_append_that_leaves_1000_unsigned(home: Path) -> None:
    store, signer = open_store(home), calllog.LogSigner(home)
    tree = tlog.append(store, [_record(n) for n in range(999)], signer, now=5)
    assert tree.signed == 0 and not list(store.log_checkpoints())
    tree = tlog.append(store, [_record(999), _record(1000)], signer, now=6)
    assert tree.signed == 1001 and tree.signed_at == 6
    (stored,) = store.log_checkpoints()
    lines = open_note(stored.note, tree.origin, _raw_public(home))
    assert lines == [tree.origin, "1001", base64.b64encode(mth(_entries(home))).decode()]
    assert stored.size == 1001 and stored.time == 6
    # Nothing new: no checkpoint; something new: one.
    assert tlog.checkpoint(store, signer, now=7) == store.log_tree()
    assert len(list(store.log_checkpoints())) == 1
    tlog.append(store, [_record(1001)], signer, now=8)
    tree = tlog.checkpoint(store, signer, now=9)
    assert tree is not None and tree.signed == 1002
    assert [c.size for c in store.log_checkpoints()] == [1001, 1002]


def test_the_origin_is_fixed_by_the_first_entry(home: Path) -> None:
    store, signer = open_store(home), calllog.LogSigner(home)
    first = tlog.append(store, [_record(0)], signer, now=1)
    assert first.origin.startswith("chit/call-log/") and len(first.origin) == 30
    later = tlog.append(store, [_record(1)], signer, now=2)
    assert later.origin == first.origin
    other = tmp_home = home.parent / "other"
    admin.init_home(tmp_home)
    assert tlog.append(open_store(other), [_record(0)], calllog.LogSigner(other),
                       now=1).origin != first.origin


# --- the CLI ---------------------------------------------------------------------------


def _logged_world(world: World, calls: int = 12) -> None:
    store, signer = open_store(world.home), calllog.LogSigner(world.home)
    tlog.append(store, [_record(n) for n in range(calls // 2)], signer, now=1)
    tlog.checkpoint(store, signer, now=2)
    tlog.append(store, [_record(n) for n in range(calls // 2, calls)], signer, now=3)
    tlog.checkpoint(store, signer, now=4)


def test_checkpoint_prints_the_newest_signed_note_and_the_verifier_key(world: World) -> None:
    _logged_world(world)
    out = _cli(world, "audit", "log", "checkpoint")
    assert out.returncode == 0, out.stderr
    tree = open_store(world.home).log_tree()
    assert tree is not None
    assert open_note(out.stdout, tree.origin, _raw_public(world.home)) == [
        tree.origin, "12", base64.b64encode(mth(_entries(world.home))).decode()]
    as_json = json.loads(_cli(world, "audit", "log", "checkpoint", "--json").stdout)
    assert as_json["size"] == 12 and as_json["note"] == out.stdout
    key = _cli(world, "audit", "log", "checkpoint", "--key").stdout.split()
    public = _raw_public(world.home)
    key_hash = hashlib.sha256(tree.origin.encode() + b"\n\x01" + public).digest()[:4]
    assert key[0] == f"{tree.origin}+{key_hash.hex()}+" + base64.b64encode(
        b"\x01" + public).decode()


def test_checkpoint_of_an_empty_log_says_there_is_none(world: World) -> None:
    open_store(world.home)
    out = _cli(world, "audit", "log", "checkpoint")
    assert out.returncode == 2 and "no signed checkpoint yet" in out.stderr
    out = _cli(world, "audit", "log", "checkpoint", "--key")
    assert out.returncode == 2 and "no entry yet" in out.stderr


def test_inclusion_proofs_check_against_the_checkpoint(world: World, tmp_path: Path) -> None:
    _logged_world(world)
    entries = _entries(world.home)
    for n in (1, 5, 6, 7, 12):
        out = _cli(world, "audit", "log", "prove", "--entry", str(n), "--json")
        assert out.returncode == 0, out.stderr
        proof = json.loads(out.stdout)
        leaf = hashlib.sha256(b"\x00" + entries[n - 1]).digest()
        assert base64.b64decode(proof["leaf_hash"]) == leaf and proof["tree_size"] == 12
        assert verify_inclusion(leaf, n - 1, 12, [base64.b64decode(h) for h in proof["proof"]],
                                mth(entries))
    # Against an older checkpoint kept in a file.
    old = tmp_path / "cp6.txt"
    old.write_text(open_store(world.home).log_checkpoints().__next__().note)
    proof = json.loads(_cli(world, "audit", "log", "prove", "--entry", "3", "--checkpoint",
                            str(old), "--json").stdout)
    assert proof["tree_size"] == 6
    assert verify_inclusion(hashlib.sha256(b"\x00" + entries[2]).digest(), 2, 6,
                            [base64.b64decode(h) for h in proof["proof"]], mth(entries[:6]))
    outside = _cli(world, "audit", "log", "prove", "--entry", "7", "--checkpoint", str(old))
    assert outside.returncode == 2 and "not in the checkpoint's tree of 6" in outside.stderr
    text = _cli(world, "audit", "log", "prove", "--entry", "1").stdout
    assert "entry 1 (leaf 0) in the tree of 12 entries" in text


def test_consistency_proof_between_two_checkpoints(world: World, tmp_path: Path) -> None:
    _logged_world(world)
    out = _cli(world, "audit", "log", "prove", "--consistency", "6", "12", "--json")
    assert out.returncode == 0, out.stderr
    proof = json.loads(out.stdout)
    entries = _entries(world.home)
    assert base64.b64decode(proof["old_root"]) == mth(entries[:6])
    assert base64.b64decode(proof["new_root"]) == mth(entries)
    assert proof["proof"]  # RFC 9162 §2.1.4: non-empty between distinct non-empty sizes
    missing = _cli(world, "audit", "log", "prove", "--consistency", "5", "12")
    assert missing.returncode == 2 and "no signed checkpoint of 5 entries" in missing.stderr


def test_a_forged_checkpoint_file_is_refused(world: World, tmp_path: Path) -> None:
    _logged_world(world)
    tree = open_store(world.home).log_tree()
    assert tree is not None
    body = f"{tree.origin}\n12\n{base64.b64encode(bytes(32)).decode()}\n"
    stranger = Ed25519PrivateKey.generate()
    public = stranger.public_key().public_bytes_raw()
    key_hash = hashlib.sha256(tree.origin.encode() + b"\n\x01" + public).digest()[:4]
    sig = base64.b64encode(key_hash + stranger.sign(body.encode())).decode()
    forged = tmp_path / "forged.txt"
    forged.write_text(f"{body}\n\u2014 {tree.origin} {sig}\n")
    out = _cli(world, "audit", "log", "prove", "--entry", "1", "--checkpoint", str(forged))
    assert out.returncode == 2 and "does not verify" in out.stderr
    out = _cli(world, "audit", "log", "verify", "--checkpoint", str(forged), "--json")
    report: dict[str, Any] = json.loads(out.stdout)
    assert out.returncode == 1
    assert [f["check"] for f in report["findings"]] == ["checkpoint"]


# --- docs/audit.md's vectors ------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
DOC_ORIGIN = "chit/call-log/0011223344556677"


def _doc_blocks() -> dict[str, str]:
    """The fenced blocks of docs/audit.md's *Test vectors*, by the line that introduces each."""
    doc = (ROOT / "docs" / "audit.md").read_text("utf-8")
    section = doc[doc.index("#### Test vectors\n"):doc.index("#### Test vector of a")]
    blocks, label = {}, ""
    parts = section.split("```\n")
    for i, part in enumerate(parts):
        if i % 2:
            blocks[label] = part
        else:
            label = part.strip().splitlines()[-1] if part.strip() else label
    return blocks


def _doc_records() -> list[calllog.CallRecord]:
    chain = ("00112233445566778899aabbccddeeff",)
    common = {"policy_hash": "sha256:" + "0" * 64}
    return [
        calllog.CallRecord(time=1796000000, agent="docs-bot", chain=chain, session="s1",
                           tool="read_file", arguments={"path": "src/app.py"},
                           decision="allowed", code=None, catalog_hash="sha256:" + "1" * 64,
                           **common),
        calllog.CallRecord(time=1796000001, agent="docs-bot", chain=chain, session="s1",
                           tool="write_file", arguments={"path": "secrets/key.pem"},
                           decision="refused", code="path_forbidden",
                           catalog_hash="sha256:" + "1" * 64, **common),
        calllog.CallRecord(time=1796000002, agent="-", chain=(), session="s2", tool="status",
                           arguments={}, decision="refused", code="token_malformed",
                           catalog_hash=None, **common),
    ]


def test_the_audit_doc_vectors_are_what_the_engine_makes_and_the_oracles_accept() -> None:
    blocks = _doc_blocks()
    entries = [bytes.fromhex("".join(blocks[f"Entry {n} bytes (`chit-det/1`):"].split()))
               for n in (1, 2, 3)]
    # The engine encodes the documented calls to exactly these bytes ...
    prev = bytes(32)
    for n, (record, data) in enumerate(zip(_doc_records(), entries, strict=True), 1):
        assert calllog.encode_entry(n, prev, record) == data
        decoded = cbor.decode(data)
        assert isinstance(decoded, dict) and decoded["prev"] == prev
        prev = hashlib.sha256(data).digest()
    # ... and every other value follows from them by the RFCs alone.
    leaves = [hashlib.sha256(b"\x00" + e).digest() for e in entries]
    assert blocks["Leaf hashes, `SHA-256(0x00 || entry bytes)`:"].split() == [
        x for n, leaf in enumerate(leaves, 1) for x in (str(n), leaf.hex())]
    roots = blocks["Tree roots at sizes 1, 2 and 3 (hex, then the standard base64 a "
                   "checkpoint carries):"].split()
    assert roots == [x for n in (1, 2, 3) for x in (
        str(n), mth(entries[:n]).hex(), base64.b64encode(mth(entries[:n])).decode())]
    frontier = [bytes.fromhex(h) for h in blocks[
        "The tree head row's frontier at size 3 (the roots of the subtrees of entries 1-2 "
        "and 3):"].split()]
    assert frontier == [mth(entries[:2]), mth(entries[2:])]
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    public = key.public_key().public_bytes_raw()
    for n in (2, 3):
        text = blocks[f"The checkpoint of size {n}:"]
        assert open_note(text, DOC_ORIGIN, public) == [
            DOC_ORIGIN, str(n), base64.b64encode(mth(entries[:n])).decode()]
        body = tlog.note.format_checkpoint(DOC_ORIGIN, n, mth(entries[:n]))
        assert tlog.note.sign_note(body, DOC_ORIGIN, key) == text
    key_hash = hashlib.sha256(DOC_ORIGIN.encode() + b"\n\x01" + public).digest()[:4]
    assert blocks["The verifier key (`chit audit log checkpoint --key`):"].strip() == (
        f"{DOC_ORIGIN}+{key_hash.hex()}+" + base64.b64encode(b"\x01" + public).decode())
    path = [bytes.fromhex(h) for h in blocks[
        "The inclusion proof of entry 1 (leaf 0) in the tree of size 3:"].split()]
    assert verify_inclusion(leaves[0], 0, 3, path, mth(entries))
    assert path == tlog.merkle.inclusion_proof(leaves, 0, 3)
    consistency = [bytes.fromhex(h) for h in blocks[
        "The consistency proof from size 2 to size 3:"].split()]
    # RFC 9162 §2.1.4: from a power-of-two size the proof is the rest of the tree.
    assert consistency == [mth(entries[2:])]
    assert tlog.merkle.verify_consistency(2, 3, mth(entries[:2]), mth(entries), consistency)


def test_only_authenticated_entries_skip_the_strict_decoder(home: Path) -> None:
    """An entry past the newest checkpoint is decoded strictly: a non-canonical one there
    (an integer in a longer form than needed) is a finding; the lax decoder, used only for
    entries a verified checkpoint covers, reads the same map."""
    store, signer = open_store(home), calllog.LogSigner(home)
    tlog.append(store, [_record(0)], signer, now=1)
    tlog.checkpoint(store, signer, now=2)
    tlog.append(store, [_record(1)], signer, now=3)
    data = _entries(home)[1]
    loose = data.replace(b"\x63seq\x02", b"\x63seq\x18\x02", 1)  # 2 as a two-byte integer
    assert loose != data
    assert calllog.decode_entry(loose, strict=False) == calllog.decode_entry(data)
    with pytest.raises(ValueError, match="not chit-det/1"):
        calllog.decode_entry(loose)
    db = sqlite3.connect(home / "state.db", isolation_level=None)
    db.execute("UPDATE call_log SET entry = ? WHERE seq = 2", (loose,))
    frontier = tlog.merkle.TreeBuilder()
    for entry in _entries(home):
        frontier.append(tlog.merkle.leaf_hash(entry))
    db.execute("UPDATE call_log_tree SET last = ?, frontier = ?",
               (hashlib.sha256(loose).digest(), tlog.merkle.encode_frontier(frontier.frontier)))
    report = admin.verify_call_log(home, _public(home))
    assert [(f["seq"], f["check"]) for f in report["findings"]] == [(2, "decodes")]
    assert report["unsigned"] == {"first": 2, "last": 2}


def test_the_audit_doc_vector_of_an_entry_naming_its_repository() -> None:
    """docs/audit.md: an entry with ``repo`` is the same map plus that field, and decodes."""
    doc = (ROOT / "docs" / "audit.md").read_text("utf-8")
    section = doc[doc.index("#### Test vector of an entry naming its repository"):
                  doc.index("#### Test vector of a `chit-call-log/1` entry")]
    data = bytes.fromhex("".join(section.split("```\n")[3].split()))
    record = replace(_doc_records()[0], repo="app")
    assert calllog.encode_entry(1, bytes(32), record) == data
    entry = calllog.decode_entry(data)
    assert entry["repo"] == "app"
    assert calllog.decode_entry(data, strict=False) == entry
    # Without a repository the entry is exactly the first vector's: old logs verify as before.
    assert calllog.encode_entry(1, bytes(32), _doc_records()[0]) != data


@pytest.mark.parametrize("repo", [1, None, b"app", ["app"]])
def test_an_entry_whose_repo_is_not_text_does_not_decode(repo: object) -> None:
    """Threat: a hand-made entry planted with a repository field of another type."""
    good = cbor.decode(calllog.encode_entry(1, bytes(32), replace(_doc_records()[0], repo="a")))
    assert isinstance(good, dict)
    forged = cbor.encode({**good, "repo": repo})
    with pytest.raises(ValueError):
        calllog.decode_entry(forged)
    with pytest.raises(ValueError):
        calllog.decode_entry(forged, strict=False)
