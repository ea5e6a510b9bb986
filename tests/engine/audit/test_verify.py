"""Audit of signed provenance: real repositories, real keys, tampering done with pygit2.

Every tamper here is what someone with write access to the repository (but not
to the engine's home) can do with plain git: rewrite commits, blobs, trees and
refs. The forged-record cases (catalog scope, chain, lane) sign with the real
engine key, loaded from the home, to stand for a compromised or buggy engine:
they isolate the check that must catch what the signature cannot.

Each test asserts the exact set of findings per commit, so a tamper caught only
by some unrelated check (or by the wrong one) fails the test.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from engine.audit import intoto, provenance
from engine.audit.verify import verify_repository
from engine.auth import cbor, signkeys
from engine.catalog import declarations as catalog
from engine.service import Engine
from engine.tools import offer as offers
from tests.conftest import World
from tests.engine.engine_calls import call, land, ok

PROVENANCE_PREFIX = "refs/chit/provenance/"
CATALOGS = "refs/chit/catalogs"
ATTACKER = pygit2.Signature("mallory", "mallory@example.com", 1_800_000_000, 0)


# --- driving the engine as agents do --------------------------------------------


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def delegable(world: World) -> str:
    return world.mint(agent="lead", ops="read,write,commit,sub-token:issue", paths="src/**",
                      delegable=True)


def helper_token(engine: Engine, lead: str) -> str:
    """A sub-token for ``lead.helper`` issued through the engine (a real delegation)."""
    issued = ok(call(
        engine, lead, "issue_sub_token",
        {"agent": "lead.helper", "ops": ["read", "write", "commit"], "paths": ["src/api/**"],
         "ttl_seconds": 600},
        session="lead-delegates",
    ))
    return str(issued["token"])


def public_keys(world: World) -> dict[str, Any]:
    return signkeys.load_public_keys(signkeys.export_public_keys(world.home))


def audit(world: World, lanes: list[str] | None = None) -> dict[str, Any]:
    return verify_repository(world.repo, lanes, public_keys=public_keys(world))


def findings(report: dict[str, Any]) -> dict[str, set[str]]:
    """Commit id (or ``-``) to the set of failed check names."""
    out: dict[str, set[str]] = {}
    for f in report["findings"]:
        out.setdefault(f["commit"], set()).add(f["check"])
    return out


def assert_only(report: dict[str, Any], expected: dict[str, set[str]],
                untouched: list[str]) -> None:
    """Exactly ``expected`` failed; every untouched commit was checked and passed."""
    assert findings(report) == expected, report["findings"]
    assert not report["ok"]
    checked = {c["commit"]: c["ok"] for c in report["commits"]}
    for cid in untouched:
        assert checked.get(cid) is True, (cid, checked)


def cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def cli_findings(world: World, *lanes: str) -> dict[str, set[str]]:
    out = cli(world, "audit", "verify", "--repo", str(world.repo), *lanes, "--json")
    assert out.returncode == 1, (out.stdout, out.stderr)
    return findings(json.loads(out.stdout))


# --- the attacker: plain git object surgery ------------------------------------------


class Attacker:
    """Write access to the repository, none to the chit home."""

    def __init__(self, world: World) -> None:
        self.repo = pygit2.Repository(str(world.repo))

    def _write_ref(self, name: str, tree: pygit2.Oid, what: str) -> None:
        parent = self.repo.references[name].target
        self.repo.create_commit(name, ATTACKER, ATTACKER, what, tree, [parent])

    def envelope(self, agent: str, cid: str) -> bytes:
        tree = self.repo.references[PROVENANCE_PREFIX + agent].peel(pygit2.Commit).tree
        blob = tree[f"{cid[:2]}/{cid[2:]}"]
        return bytes(self.repo[blob.id].data)

    def put_envelope(self, agent: str, cid: str, data: bytes | None) -> None:
        """Store ``data`` as the record of ``cid`` (``None``: delete it)."""
        ref = PROVENANCE_PREFIX + agent
        root = self.repo.references[ref].peel(pygit2.Commit).tree
        fan = root[cid[:2]] if cid[:2] in root else None
        sub = self.repo.TreeBuilder(self.repo[fan.id]) if fan is not None else \
            self.repo.TreeBuilder()
        if data is None:
            sub.remove(cid[2:])
        else:
            sub.insert(cid[2:], self.repo.create_blob(data), pygit2.enums.FileMode.BLOB)
        top = self.repo.TreeBuilder(root)
        if len(sub):
            top.insert(cid[:2], sub.write(), pygit2.enums.FileMode.TREE)
        else:
            top.remove(cid[:2])
        self._write_ref(ref, top.write(), "notes\n")

    def put_note(self, cid: str, text: str | None) -> None:
        """Replace ``cid``'s note under refs/notes/chit with ``text`` (``None``: remove), by git."""
        args = (["add", "-f", "-m", text, cid] if text is not None
                else ["remove", "--ignore-missing", cid])
        subprocess.run(["git", "-C", self.repo.path, "-c", "user.name=mallory",
                        "-c", "user.email=m@example.invalid", "notes", "--ref=chit", *args],
                       check=True, capture_output=True)

    def note(self, cid: str) -> str | None:
        run = subprocess.run(["git", "-C", self.repo.path, "notes", "--ref=chit", "show", cid],
                             capture_output=True, text=True)
        return run.stdout if run.returncode == 0 else None

    def move_record(self, agent: str, old: str, new: str) -> None:
        """Carry the genuine record and attestation of ``old`` over to ``new``."""
        self.put_envelope(agent, new, self.envelope(agent, old))
        self.put_envelope(agent, old, None)
        self.put_note(new, self.note(old))
        self.put_note(old, None)

    def rewrite_head(
        self,
        agent: str,
        *,
        message: Callable[[str], str] = lambda m: m,
        tree: pygit2.Oid | None = None,
        author: pygit2.Signature | None = None,
    ) -> tuple[str, str]:
        """Replace the lane's head commit and move the lane; return (old id, new id)."""
        ref = self.repo.references[f"refs/heads/agent/{agent}"]
        old = self.repo[ref.target]
        new = self.repo.create_commit(
            None, author or old.author, old.committer, message(old.message),
            tree or old.tree_id, list(old.parent_ids),
        )
        ref.set_target(new)
        return str(old.id), str(new)

    def tree_with(self, cid: str, path: str, data: bytes) -> pygit2.Oid:
        """``cid``'s tree with one more top-level file."""
        builder = self.repo.TreeBuilder(self.repo[cid].peel(pygit2.Tree))
        builder.insert(path, self.repo.create_blob(data), pygit2.enums.FileMode.BLOB)
        return builder.write()

    def catalog(self, catalog_hash: str) -> bytes:
        tree = self.repo.references[CATALOGS].peel(pygit2.Commit).tree
        return bytes(self.repo[tree[catalog_hash.removeprefix("sha256:")].id].data)

    def put_catalog(self, catalog_hash: str, data: bytes | None) -> None:
        root = self.repo.references[CATALOGS].peel(pygit2.Commit).tree
        builder = self.repo.TreeBuilder(root)
        name = catalog_hash.removeprefix("sha256:")
        if data is None:
            builder.remove(name)
        else:
            builder.insert(name, self.repo.create_blob(data), pygit2.enums.FileMode.BLOB)
        self._write_ref(CATALOGS, builder.write(), "catalogs\n")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def decode(envelope: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(envelope map, record map), decoded without any check."""
    env = cbor.decode(envelope)
    return env, cbor.decode(env["record"])


def replace_trailer(message: str, name: str, value: str) -> str:
    lines = message.split("\n")
    hits = [i for i, line in enumerate(lines) if line.startswith(f"{name}: ")]
    assert len(hits) == 1, message
    lines[hits[0]] = f"{name}: {value}"
    return "\n".join(lines)


def fresh_key(kid: str) -> signkeys.SigningKey:
    """An Ed25519 key the engine never had (and never exported)."""
    private = Ed25519PrivateKey.generate()
    return signkeys.SigningKey(
        key_id=kid, created=0, status="active",
        public=private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw),
        seed=private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()),
    )


def forge_head(
    world: World,
    agent: str,
    edit: Callable[[dict[str, Any]], None],
    *,
    message: Callable[[str], str] = lambda m: m,
    key: signkeys.SigningKey | None = None,
) -> tuple[str, str]:
    """Re-make the lane head with an edited record, signed (by default with the real key).

    The record is made consistent with the new commit the way the engine would
    make it: same tree, parents, author and committer, the digest of the edited
    message, and a ``Chit-Provenance`` trailer naming the new envelope; the
    record is stored under the new commit id and the lane moved. Only what
    ``edit`` changes can fail.
    """
    attacker = Attacker(world)
    head = str(attacker.repo.references[f"refs/heads/agent/{agent}"].target)
    _env, record = decode(attacker.envelope(agent, head))
    signed_part, _ = provenance.split_message(attacker.repo[head].message)
    signed_part = message(signed_part)
    record = copy.deepcopy(record)
    edit(record)
    record["commit"]["message"] = sha256(signed_part.encode())
    signer = key or signkeys.active_signing_key(world.home)
    record["kid"] = signer.key_id
    envelope = provenance.seal(record, signer)
    old, new = attacker.rewrite_head(
        agent, message=lambda _m: f"{signed_part}Chit-Provenance: {sha256(envelope)}\n"
    )
    attacker.put_envelope(agent, new, envelope)
    attacker.put_envelope(agent, old, None)
    attacker.put_note(new, intoto.attest_commit(new, envelope, signer).decode())
    return old, new


@pytest.fixture
def three(world: World, engine: Engine) -> dict[str, Any]:
    """alice: three commits; bob: one commit. Everything verifies."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    ids = {
        "a1": land(engine, alice, "one\n"),
        "a2": land(engine, alice, "two\n", path="src/api/v1.py"),
        "a3": land(engine, alice, "three\n"),
        "b1": land(engine, bob, "bob\n", session="b"),
    }
    report = audit(world)
    assert report["ok"], report["findings"]
    return ids


# --- 1. a record edited --------------------------------------------------------------


def _flip_signature(envelope: bytes) -> bytes:
    env, _ = decode(envelope)
    at = envelope.index(env["sig"])
    return envelope[:at] + bytes([envelope[at] ^ 1]) + envelope[at + 1:]


def _edit_record_bytes(envelope: bytes) -> bytes:
    # Same length, still chit-det/1: a byte of the author's e-mail inside the record.
    assert envelope.count(b"alice@agents") >= 1
    return envelope.replace(b"alice@agents", b"alicf@agents", 1)


def _reencode_with_old_signature(envelope: bytes) -> bytes:
    env, record = decode(envelope)
    record["session"] = "someone-else"
    env["record"] = cbor.encode(record)
    return cbor.encode(env)


@pytest.mark.parametrize(
    "edit", [_flip_signature, _edit_record_bytes, _reencode_with_old_signature],
    ids=["signature-byte", "record-byte", "re-encoded-record"],
)
def test_edited_record_in_the_store(world: World, three: dict[str, Any],
                                    edit: Callable[[bytes], bytes]) -> None:
    """Threat: editing a stored record in place (a middle commit) to change what it says."""
    attacker = Attacker(world)
    attacker.put_envelope("alice", three["a2"], edit(attacker.envelope("alice", three["a2"])))
    assert_only(audit(world), {three["a2"]: {"record_hash", "signature"}},
                [three["a1"], three["a3"], three["b1"]])


def test_edited_record_with_the_trailer_recomputed(world: World, three: dict[str, Any]) -> None:
    """Threat: an edited record re-encoded under its old signature, the commit's
    Chit-Provenance line rewritten to its new hash: only the signature can tell."""
    attacker = Attacker(world)
    forged = _reencode_with_old_signature(attacker.envelope("alice", three["a3"]))
    old, new = attacker.rewrite_head(
        "alice", message=lambda m: replace_trailer(m, "Chit-Provenance", sha256(forged)))
    attacker.put_envelope("alice", new, forged)
    attacker.put_envelope("alice", old, None)
    assert_only(audit(world), {new: {"signature"}}, [three["a1"], three["a2"], three["b1"]])
    assert cli_findings(world, "agent/alice") == {new: {"signature"}}


# --- 2. a trailer edited -------------------------------------------------------------


@pytest.mark.parametrize(
    ("trailer", "value", "expected"),
    [
        # The record's message digest covers every trailer above Chit-Provenance,
        # so a changed trailer is always record_commit too.
        ("Chit-Session", "another-session", {"record_commit", "record_trailers"}),
        ("Chit-Token-Id", "0" * 32, {"record_commit", "record_trailers"}),
        ("Chit-Catalog-Hash", "sha256:" + "ab" * 32, {"record_commit", "record_trailers"}),
        # ... and Assisted-by still names alice.
        ("Chit-Agent", "bob", {"lane", "record_commit", "record_trailers", "trailers"}),
    ],
)
def test_edited_trailer_with_the_record_moved(world: World, three: dict[str, Any], trailer: str,
                                              value: str, expected: set[str]) -> None:
    """Threat: rewriting who/which session a commit claims, carrying its genuine record along."""
    attacker = Attacker(world)
    old, new = attacker.rewrite_head("alice", message=lambda m: replace_trailer(m, trailer, value))
    attacker.move_record("alice", old, new)
    expected = expected | {"attestation"}  # the carried attestation names the old commit
    assert_only(audit(world), {new: expected}, [three["a1"], three["a2"], three["b1"]])
    if trailer == "Chit-Session":
        assert cli_findings(world) == {new: expected}


# --- 3. catalog bytes swapped --------------------------------------------------------


def test_catalog_bytes_swapped_for_another_real_catalog(world: World, engine: Engine) -> None:
    """Threat: replacing the stored catalog with a narrower genuine one to hide which tools
    (issue_sub_token) the agent was shown. Another lane with its own catalog stays ok."""
    lead = delegable(world)
    alice = world.mint(agent="alice")
    l1 = land(engine, lead, "lead\n", session="l")
    a1 = land(engine, alice, "alice\n")
    lead_catalog = engine.offer(lead)["catalog_hash"]
    alice_catalog = engine.offer(alice)["catalog_hash"]
    assert lead_catalog != alice_catalog
    attacker = Attacker(world)
    attacker.put_catalog(lead_catalog, attacker.catalog(alice_catalog))
    assert_only(audit(world), {l1: {"catalog_hash"}}, [a1])
    assert cli_findings(world) == {l1: {"catalog_hash"}}


def test_catalog_bytes_removed(world: World, three: dict[str, Any], engine: Engine) -> None:
    """Threat: deleting the catalog so nobody can see what the agent was offered."""
    alice_catalog = engine.offer(world.mint(agent="alice"))["catalog_hash"]
    bob_catalog = engine.offer(world.mint(agent="bob"))["catalog_hash"]
    assert alice_catalog == bob_catalog  # same operations, same catalog
    Attacker(world).put_catalog(alice_catalog, None)
    expected = {three[k]: {"catalog_stored"} for k in ("a1", "a2", "a3", "b1")}
    assert findings(audit(world)) == expected


# --- 4. a record moved onto another commit -------------------------------------------


def test_record_of_one_commit_stored_under_another(world: World, three: dict[str, Any]) -> None:
    """Threat: covering an unrecorded or altered commit with a neighbour's genuine record."""
    attacker = Attacker(world)
    attacker.put_envelope("alice", three["a2"], attacker.envelope("alice", three["a1"]))
    # a1's record describes another tree, parent and message, and another change;
    # a2's own attestation attests another record.
    expected = {three["a2"]: {"record_hash", "record_commit", "change", "attestation"}}
    assert_only(audit(world), expected, [three["a1"], three["a3"], three["b1"]])
    assert cli_findings(world, "agent/alice") == expected


def test_record_of_another_agent_stored_under_a_commit(world: World,
                                                       three: dict[str, Any]) -> None:
    """Threat: borrowing another agent's genuine record (signed, but for bob's lane)."""
    attacker = Attacker(world)
    bob_env = attacker.envelope("bob", three["b1"])
    old, new = attacker.rewrite_head(
        "alice", message=lambda m: replace_trailer(m, "Chit-Provenance", sha256(bob_env)))
    attacker.put_envelope("alice", new, bob_env)
    attacker.put_envelope("alice", old, None)
    assert_only(
        audit(world),
        {new: {"record_commit", "record_trailers", "lane", "change", "attestation"}},
        [three["a1"], three["a2"], three["b1"]],
    )


# --- 5. a record deleted -------------------------------------------------------------


def test_record_deleted(world: World, three: dict[str, Any]) -> None:
    """Threat: removing the record of a commit so its authority cannot be checked."""
    Attacker(world).put_envelope("alice", three["a2"], None)
    expected = {three["a2"]: {"record_missing"}}
    assert_only(audit(world), expected, [three["a1"], three["a3"], three["b1"]])
    assert cli_findings(world) == expected


def test_provenance_ref_deleted(world: World, three: dict[str, Any]) -> None:
    """Threat: deleting a whole agent's provenance ref."""
    Attacker(world).repo.references.delete(PROVENANCE_PREFIX + "alice")
    report = audit(world)
    expected = {three[k]: {"record_missing"} for k in ("a1", "a2", "a3")}
    assert findings(report) == expected | {"-": {"refs"}}
    [said] = [f["reason"] for f in report["findings"] if f["check"] == "refs"]
    assert said.startswith(PROVENANCE_PREFIX + "alice is missing") and "git fetch" in said
    assert [c["ok"] for c in report["commits"] if c["commit"] == three["b1"]] == [True]


# --- 6. a commit rewritten with the same message ------------------------------------


@pytest.mark.parametrize("what", ["author-time", "tree"])
def test_commit_rewritten_with_the_same_message(world: World, three: dict[str, Any],
                                                what: str) -> None:
    """Threat: swapping a commit's content (or dates) under its genuine message and record."""
    attacker = Attacker(world)
    if what == "tree":
        tree = attacker.tree_with(three["a3"], "backdoor.py", b"import os\n")
        old, new = attacker.rewrite_head("alice", tree=tree)
        expected = {"record_commit", "change"}  # the new file is also no recorded change
    else:
        a = attacker.repo[three["a3"]].author
        old, new = attacker.rewrite_head(
            "alice", author=pygit2.Signature(a.name, a.email, a.time - 3600, a.offset))
        expected = {"record_commit"}
    attacker.move_record("alice", old, new)
    assert old != new
    expected.add("attestation")  # the carried attestation names the old commit
    assert_only(audit(world), {new: expected}, [three["a1"], three["a2"], three["b1"]])


# --- 7. a signature from an unknown key ----------------------------------------------


@pytest.mark.parametrize("kid", ["unknown", "real"])
def test_record_signed_by_a_key_the_auditor_does_not_trust(world: World, three: dict[str, Any],
                                                           kid: str) -> None:
    """Threat: an attacker re-signing an edited record with a key of their own (under a
    new key id, or claiming the engine's key id)."""
    real = signkeys.active_signing_key(world.home)
    own = fresh_key("e20990101-deadbeef" if kid == "unknown" else real.key_id)
    _old, new = forge_head(world, "alice", lambda r: None, key=own)
    assert_only(audit(world), {new: {"signature"}}, [three["a1"], three["a2"], three["b1"]])
    assert cli_findings(world, "agent/alice") == {new: {"signature"}}


# --- 8. a catalog wider than the recorded operations ---------------------------------


def test_catalog_wider_than_the_recorded_operations(world: World, engine: Engine) -> None:
    """Threat: a compromised engine records a non-delegable, read-write token as having been
    shown a catalog with issue_sub_token (or a read-only hop shown write tools)."""
    alice = world.mint(agent="alice")
    a1 = land(engine, alice, "one\n")
    land(engine, alice, "two\n")
    wide = engine.offer(delegable(world))["catalog_hash"]
    land(engine, delegable(world), "lead\n", session="l")  # stores the wide catalog

    def widen(record: dict[str, Any]) -> None:
        record["catalog"]["hash"] = wide

    _old, new = forge_head(world, "alice", widen,
                           message=lambda m: replace_trailer(m, "Chit-Catalog-Hash", wide))
    report = audit(world)
    assert_only(report, {new: {"catalog_scope"}}, [a1])
    reason = next(f["reason"] for f in report["findings"] if f["commit"] == new)
    assert "issue_sub_token" in reason and "write_file" not in reason


def test_catalog_offered_write_tools_to_a_read_only_hop(world: World,
                                                        three: dict[str, Any]) -> None:
    """Threat: a record claiming a read-only hop while the catalog it names offered writes."""

    def no_write(record: dict[str, Any]) -> None:
        record["chain"][-1]["ops"] = ["commit", "read"]

    _old, new = forge_head(world, "alice", no_write)
    report = audit(world)
    assert_only(report, {new: {"catalog_scope"}}, [three["a1"], three["a2"], three["b1"]])
    reason = next(f["reason"] for f in report["findings"] if f["commit"] == new)
    assert "write_file" in reason and "read_file" not in reason
    assert cli_findings(world) == {new: {"catalog_scope"}}


def test_catalog_that_lowers_its_tools_requirements(world: World, engine: Engine) -> None:
    """Threat: a stored catalog that declares write_file and commit as needing only read,
    so a record claiming a narrower hop looks consistent with it (regression: the audit
    trusted each catalog entry's own ``requires``)."""
    alice = world.mint(agent="alice")
    a1 = land(engine, alice, "one\n")
    land(engine, alice, "two\n")
    attacker = Attacker(world)
    doc = cbor.decode(attacker.catalog(engine.offer(alice)["catalog_hash"]))
    for tool in doc["tools"]:
        tool["requires"] = ["read"] if tool["requires"] else []
    lowered = cbor.encode(doc)
    attacker.put_catalog(sha256(lowered), lowered)

    def narrow(record: dict[str, Any]) -> None:
        record["catalog"]["hash"] = sha256(lowered)
        record["chain"][-1]["ops"] = ["commit", "read"]

    _old, new = forge_head(
        world, "alice", narrow,
        message=lambda m: replace_trailer(m, "Chit-Catalog-Hash", sha256(lowered)))
    report = audit(world)
    assert_only(report, {new: {"catalog_scope"}}, [a1])
    reason = next(f["reason"] for f in report["findings"] if f["commit"] == new)
    assert "write_file" in reason and "commit" not in reason.split(": ", 1)[1].split(", ")


# --- the recorded authority must cover the commit -----------------------------------


def _read_only_authority(record: dict[str, Any]) -> None:
    record["chain"][-1]["ops"] = ["read"]
    record["catalog"]["hash"] = offers.offer_for(frozenset({"read"}), False).catalog_hash


def test_commit_recorded_under_authority_without_commit(world: World,
                                                        three: dict[str, Any]) -> None:
    """Threat: a record claiming a read-only token (shown a read-only catalog, so nothing
    looks wider) made a commit (regression: nothing required ``commit`` of the last hop)."""
    read_only = offers.offer_for(frozenset({"read"}), False)
    Attacker(world).put_catalog(read_only.catalog_hash, read_only.catalog_bytes)
    _old, new = forge_head(
        world, "alice", _read_only_authority,
        message=lambda m: replace_trailer(m, "Chit-Catalog-Hash", read_only.catalog_hash))
    report = audit(world)
    assert_only(report, {new: {"chain"}}, [three["a1"], three["a2"], three["b1"]])
    assert "does not hold commit" in report["findings"][0]["reason"]


def test_change_outside_the_recorded_path_scope(world: World, three: dict[str, Any]) -> None:
    """Threat: a record whose token scope does not cover the paths the commit changed
    (regression: the change was compared with the record, never with the scope)."""

    def docs_only(record: dict[str, Any]) -> None:
        record["chain"][-1]["paths"] = [["docs/**"]]

    _old, new = forge_head(world, "alice", docs_only)
    report = audit(world)
    assert_only(report, {new: {"change"}}, [three["a1"], three["a2"], three["b1"]])
    assert "src/app.py" in report["findings"][0]["reason"]


def test_record_naming_a_token_other_than_its_chain(world: World, three: dict[str, Any]) -> None:
    """Threat: a record whose token id (and trailer) is not the token its chain describes
    (regression: token id and chain were never tied)."""
    other = "f" * 32

    def retoken(record: dict[str, Any]) -> None:
        record["token_id"] = other

    _old, new = forge_head(world, "alice", retoken,
                           message=lambda m: replace_trailer(m, "Chit-Token-Id", other))
    assert_only(audit(world), {new: {"chain"}}, [three["a1"], three["a2"], three["b1"]])


# --- 9. a chain that widens ----------------------------------------------------------


def _ops(record: dict[str, Any]) -> None:
    record["chain"][0]["ops"] = ["commit", "read", "sub-token:issue"]  # the child holds write


def _paths(record: dict[str, Any]) -> None:
    record["chain"][1]["paths"] = [["**"]]


def _expiry(record: dict[str, Any]) -> None:
    record["chain"][1]["exp"] = record["chain"][0]["exp"] + 1


def _not_delegable(record: dict[str, Any]) -> None:
    record["chain"][0]["delegable"] = False


def _not_before(record: dict[str, Any]) -> None:
    record["chain"][0]["nbf"] = record["time"]
    record["chain"][1]["nbf"] = record["time"] - 60


def _not_a_sub_agent(record: dict[str, Any]) -> None:
    record["chain"][0]["agent"] = "other"


def _cannot_issue(record: dict[str, Any]) -> None:
    record["chain"][0]["ops"] = ["commit", "read", "write"]  # no sub-token:issue


@pytest.mark.parametrize(
    "widen",
    [_ops, _paths, _expiry, _not_delegable, _not_before, _not_a_sub_agent, _cannot_issue],
    ids=["ops", "paths", "expiry", "non-delegable-parent", "not-before", "not-a-sub-agent",
         "parent-without-sub-token-issue"],
)
def test_chain_that_widens(world: World, engine: Engine,
                           widen: Callable[[dict[str, Any]], None]) -> None:
    """Threat: a record whose delegation chain grants the helper more than its parent held."""
    lead = delegable(world)
    l1 = land(engine, lead, "lead\n", session="l")
    helper = helper_token(engine, lead)
    h1 = land(engine, helper, "ROUTES = [1]\n", path="src/api/v1.py", session="h")
    land(engine, helper, "ROUTES = [2]\n", path="src/api/v1.py", session="h")
    _env, genuine = decode(Attacker(world).envelope("lead.helper", h1))
    assert [h["agent"] for h in genuine["chain"]] == ["lead", "lead.helper"]
    _old, new = forge_head(world, "lead.helper", widen)
    report = audit(world)
    assert_only(report, {new: {"chain"}}, [l1, h1])


# --- 10. a lane that is not the last agent's ----------------------------------------


def _last_agent(record: dict[str, Any]) -> None:
    record["chain"][-1]["agent"] = "bob"


def _record_lane(record: dict[str, Any]) -> None:
    record["lane"] = "agent/bob"


@pytest.mark.parametrize("edit", [_last_agent, _record_lane], ids=["last-hop", "record-lane"])
def test_record_lane_not_the_last_agents(world: World, three: dict[str, Any],
                                         edit: Callable[[dict[str, Any]], None]) -> None:
    """Threat: a record placing the work of one agent's authority on another agent's lane."""
    _old, new = forge_head(world, "alice", edit)
    assert_only(audit(world), {new: {"lane"}}, [three["a1"], three["a2"], three["b1"]])


# --- keys, ranges, a clean repository, a changed catalog -----------------------------


def test_signing_key_rotation_keeps_old_records_verifying(world: World, engine: Engine,
                                                          tmp_path: Path) -> None:
    """Threat: a key rotation that orphans old records, or an export that trusts too much."""
    alice = world.mint(agent="alice")
    before = land(engine, alice, "one\n")
    rotated = cli(world, "keys", "rotate", "--signing", "--json")
    assert rotated.returncode == 0, rotated.stderr
    new_kid = json.loads(rotated.stdout)["kid"]
    after = land(engine, alice, "two\n")
    attacker = Attacker(world)
    kids = [decode(attacker.envelope("alice", c))[1]["kid"] for c in (before, after)]
    assert kids[1] == new_kid and kids[0] != new_kid

    exported = tmp_path / "engine-keys.json"
    out = cli(world, "keys", "export-public", "--out", str(exported))
    assert out.returncode == 0, out.stderr
    doc = json.loads(exported.read_text())
    assert {k["kid"]: k["status"] for k in doc["keys"]} == {new_kid: "active",
                                                          kids[0]: "retired"}
    ok = cli(world, "audit", "verify", "--repo", str(world.repo), "--keys", str(exported),
             "--json")
    assert ok.returncode == 0, ok.stdout
    assert {c["commit"] for c in json.loads(ok.stdout)["commits"]} == {before, after}

    # An export missing the retired key: old records no longer verify, new ones do.
    partial = tmp_path / "new-only.json"
    partial.write_text(json.dumps({**doc, "keys": [k for k in doc["keys"]
                                                   if k["kid"] == new_kid]}))
    bad = cli(world, "audit", "verify", "--repo", str(world.repo), "--keys", str(partial),
              "--json")
    assert bad.returncode == 1
    assert findings(json.loads(bad.stdout)) == {before: {"signature"}}
    trusted = signkeys.load_public_keys(json.loads(partial.read_text()))
    assert findings(verify_repository(world.repo, None, public_keys=trusted)) == {
        before: {"signature"}}


def test_range_verifies_only_the_commits_after_rev(world: World, three: dict[str, Any]) -> None:
    """Threat: an auditor checking only new work must not be misled about what was checked."""
    Attacker(world).put_envelope("alice", three["a1"], None)  # before the range
    spec = f"{three['a1']}..agent/alice"
    report = audit(world, [spec])
    assert report["ok"], report["findings"]
    assert [c["commit"] for c in report["commits"]] == [three["a3"], three["a2"]]
    out = cli(world, "audit", "verify", "--repo", str(world.repo), spec, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ok"]
    # The whole lane still shows the earlier tamper.
    assert findings(audit(world, ["agent/alice"])) == {three["a1"]: {"record_missing"}}
    nowhere = audit(world, ["0" * 40 + "..agent/alice"])
    assert not nowhere["ok"] and findings(nowhere) == {"-": {"lane"}}


def test_untouched_repository_with_a_delegated_helper_verifies(world: World,
                                                               engine: Engine) -> None:
    """Threat: false alarms on genuine work, which would train auditors to ignore findings."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob", paths="docs/**")
    lead = delegable(world)
    land(engine, alice, "one\n")
    land(engine, bob, "# b\n", path="docs/guide.md", session="b")
    land(engine, lead, "lead\n", session="l")
    helper = helper_token(engine, lead)
    h1 = land(engine, helper, "ROUTES = [1]\n", path="src/api/v1.py", session="h")
    land(engine, alice, "two\n", path="src/new.py")
    report = audit(world)
    assert report["ok"], report["findings"]
    assert sorted(report["lanes"]) == ["agent/alice", "agent/bob", "agent/lead",
                                       "agent/lead.helper"]
    assert len(report["commits"]) == 5 and all(c["ok"] for c in report["commits"])
    _env, record = decode(Attacker(world).envelope("lead.helper", h1))
    chain = record["chain"]
    assert [h["agent"] for h in chain] == ["lead", "lead.helper"]
    assert chain[1]["ops"] == ["commit", "read", "write"] and chain[0]["delegable"]
    assert chain[1]["paths"] == [["src/**"], ["src/api/**"]]
    out = cli(world, "audit", "verify", "--repo", str(world.repo), "--json")
    assert out.returncode == 0, out.stdout


@pytest.fixture
def changed_catalog(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """Change the commit tool's definition, as a new engine version would."""

    def change() -> None:
        tools = tuple(
            dataclasses.replace(t, description=t.description + " (v2)") if t.name == "commit"
            else t for t in catalog.TOOLS
        )
        monkeypatch.setattr(catalog, "TOOLS", tools)
        monkeypatch.setattr(catalog, "_BY_NAME", {t.name: t for t in tools})
        offers.offer_for.cache_clear()
        catalog.offer_of.cache_clear()

    yield change
    monkeypatch.undo()
    offers.offer_for.cache_clear()
    catalog.offer_of.cache_clear()


def test_catalog_change_between_listing_and_commit_lands_nothing(
    world: World, engine: Engine, changed_catalog: Callable[[], None]
) -> None:
    """Threat: a commit recorded under a catalog the agent was never shown.

    (tests/engine/service/test_interface.py::test_catalog_changed_blocks_writes_not_reads covers a
    stale hash presented by the edge; here the definitions themselves change.)
    """
    alice = world.mint(agent="alice")
    first = land(engine, alice, "one\n")
    listed = engine.offer(alice)["catalog_hash"]
    assert engine.invoke(alice, "write_file", {"path": "src/app.py", "content": "two\n"},
                         session="s1", offered_catalog_hash=listed)["ok"]
    refs_before = world.refs()
    changed_catalog()
    now = engine.offer(alice)["catalog_hash"]
    assert now != listed
    refused = engine.invoke(alice, "commit", {"message": "m"}, session="s1",
                            offered_catalog_hash=listed)
    assert not refused["ok"] and refused["error"]["error"] == "catalog_changed"
    assert refused["error"]["catalog_hash"] == now
    # Nothing landed: lane, provenance and catalog store are as they were.
    assert world.refs() == refs_before
    assert [c["commit"] for c in audit(world)["commits"]] == [first]
    # Listed again, the agent commits; the record names the catalog it was shown.
    done = engine.invoke(alice, "commit", {"message": "m"}, session="s1",
                         offered_catalog_hash=now)
    assert done["ok"], done
    _env, record = decode(Attacker(world).envelope("alice", done["result"]["commit"]))
    assert record["catalog"]["hash"] == now
    report = audit(world)
    assert report["ok"], report["findings"]
    assert [c["catalog_hash"] for c in report["commits"]] == [now, listed]
