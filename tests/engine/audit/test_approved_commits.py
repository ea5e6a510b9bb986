"""Commits made under an approval, end to end: landed, audited, graphed, forged.

A real engine, store, repository and keys: an ``[[approval]]`` table holds a
commit, an operator approves it through engine.admin (what ``chit approve``
runs), the retry lands a ``chit-provenance/2`` record, and ``chit audit verify``
names the approver. Records forged with the engine's own signing key (the
strongest attacker short of the operator's key) fail the ``approval`` check:
an approval moved from another commit, claimed by a commit that had none, or
countersigned by a key nobody trusts.
"""

from __future__ import annotations

import copy
import time
from contextlib import closing
from typing import Any

import pygit2
import pytest

from engine import admin, git
from engine.audit import provenance
from engine.audit.graph import build_graph, collect
from engine.auth import discharge, sealing, signkeys
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.audit.test_verify import audit, decode, findings, forge_head, fresh_key
from tests.engine.engine_calls import call, ok, refusal

POLICY = """
version = 1

[paths]
protected = ["secrets/**"]

[[approval]]
tools = ["commit"]
paths = ["deploy/**", "secrets/**"]
approvers = ["alice"]
ttl = 600
"""


class Clock:
    def __init__(self) -> None:
        self.now = int(time.time())

    def __call__(self) -> float:
        return float(self.now)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(world: World, clock: Clock) -> Any:
    admin.add_operator(world.home, "alice")
    (world.home / "policy.toml").write_text(POLICY)
    with Engine(world.home, world.repo, clock=clock) as running:
        yield running


def _approved_commit(world: World, engine: Engine, clock: Clock, token: str,
                     files: dict[str, str], *, session: str, message: str) -> str:
    for path, content in files.items():
        ok(call(engine, token, "write_file", {"path": path, "content": content}, session))
    listed = engine.offer(token).get("catalog_hash")
    asked = refusal(engine.invoke(token, "commit", {"message": message}, session=session,
                                  offered_catalog_hash=listed))
    assert asked["error"] == "approval_required"
    clock.now += 5
    admin.decide_approval(world.home, asked["approval"]["id"], operator="alice", approve=True,
                          now=clock.now, note="ok")
    clock.now += 5
    landed = ok(engine.invoke(token, "commit", {"message": message}, session=session,
                              offered_catalog_hash=listed))
    return str(landed["commit"])


def test_an_approved_commit_audits_with_its_approver(
    world: World, engine: Engine, clock: Clock
) -> None:
    token = world.mint(agent="alice", paths="**")
    commit = _approved_commit(world, engine, clock, token, {"deploy/prod.toml": "n = 3\n"},
                              session="s1", message="Scale up")
    report = audit(world)
    assert report["ok"], report["findings"]
    [item] = report["commits"]
    assert item["commit"] == commit
    assert item["approval"]["operator"] == "alice"
    assert item["approval"]["decided_at"] < item["approval"]["expires_at"]
    env, record = decode(_envelope(world, commit))
    assert env["v"] == record["v"] == provenance.RECORD_VERSION_APPROVED
    entries, unverified, _ = collect(git.Repository(world.repo), _keys(world))
    graph = build_graph(entries, commit)
    approval = [n for n in graph["nodes"] if n["kind"] == "approval"]
    assert len(approval) == 1 and " by alice at " in approval[0]["label"]
    assert {"source": approval[0]["id"], "target": f"commit:{commit}", "kind": "approved"} in (
        graph["edges"])
    assert unverified == 0


def test_an_approved_commit_refuses_to_merge_onto_a_lane_that_changed_its_path(
    world: World, engine: Engine, clock: Clock
) -> None:
    """Threat: a merge landing content nobody approved (the lane changed the approved path)."""
    token = world.mint(agent="alice", paths="**")
    path, message = "deploy/prod.toml", {"message": "Scale up"}
    lines = [f"key{i} = {i}\n" for i in range(12)]
    _approved_commit(world, engine, clock, token, {path: "".join(lines)}, session="s0",
                     message="Add the deploy settings")
    mine = [*lines[:-1], "key11 = 99\n"]  # the last line: a clean merge with the first
    ok(call(engine, token, "write_file", {"path": path, "content": "".join(mine)}, "s1"))
    listed = engine.offer(token).get("catalog_hash")
    asked = refusal(engine.invoke(token, "commit", message, session="s1",
                                  offered_catalog_hash=listed))
    approval_id = asked["approval"]["id"]
    admin.decide_approval(world.home, approval_id, operator="alice", approve=True,
                          now=clock.now)
    # Another session of the same agent lands a change to the path's first line first.
    theirs = ["key0 = 42\n", *lines[1:]]
    other = _approved_commit(world, engine, clock, token, {path: "".join(theirs)},
                             session="s2", message="Scale further")
    refused = refusal(engine.invoke(token, "commit", message, session="s1",
                                    offered_catalog_hash=listed))
    assert refused["error"] == "conflict"
    assert world.refs()["refs/heads/agent/alice"] == other  # nothing landed
    with closing(open_store(world.home, None)) as store:
        kept = store.approval(approval_id)
        assert kept is not None and kept.state == "approved"  # put back, not spent
    assert audit(world)["ok"]


def test_an_approved_commit_lands_when_the_lane_already_holds_a_staged_file_as_staged(
    world: World, engine: Engine, clock: Clock
) -> None:
    """The lane moved under a staged path, to the very content staged: the merge lands
    exactly what was approved, so the commit must land (not loop on conflict)."""
    token = world.mint(agent="alice", paths="**")
    message = {"message": "Both"}
    ok(call(engine, token, "write_file", {"path": "deploy/dup.toml", "content": "d = 1\n"}, "s4"))
    ok(call(engine, token, "write_file", {"path": "deploy/mine.toml", "content": "m\n"}, "s4"))
    listed = engine.offer(token).get("catalog_hash")
    asked = refusal(engine.invoke(token, "commit", message, session="s4",
                                  offered_catalog_hash=listed))
    admin.decide_approval(world.home, asked["approval"]["id"], operator="alice", approve=True,
                          now=clock.now)
    _approved_commit(world, engine, clock, token, {"deploy/dup.toml": "d = 1\n"},
                     session="s1", message="Dup first")
    landed = ok(engine.invoke(token, "commit", message, session="s4",
                              offered_catalog_hash=listed))
    assert world.refs()["refs/heads/agent/alice"] == landed["commit"]
    report = audit(world)
    assert report["ok"], report["findings"]


def test_a_commit_without_an_approval_stays_chit_provenance_1(
    world: World, engine: Engine
) -> None:
    token = world.mint(agent="alice", paths="**")
    ok(call(engine, token, "write_file", {"path": "src/a.py", "content": "a = 1\n"}, "s1"))
    listed = engine.offer(token).get("catalog_hash")
    commit = ok(engine.invoke(token, "commit", {"message": "Plain"}, session="s1",
                              offered_catalog_hash=listed))["commit"]
    env, record = decode(_envelope(world, commit))
    assert env["v"] == record["v"] == provenance.RECORD_VERSION and "approval" not in record
    assert "approval" not in audit(world)["commits"][0]


def test_a_protected_file_landed_sealed_still_matches_its_approval(
    world: World, engine: Engine, clock: Clock
) -> None:
    """The approval names the plaintext; the landed blob is ciphertext (docs/sealing.md)."""
    token = world.mint(agent="alice", paths="**")
    commit = _approved_commit(world, engine, clock, token, {"secrets/db.txt": "hunter2\n"},
                              session="s1", message="Rotate the password")
    _env, record = decode(_envelope(world, commit))
    [change] = record["change"]
    blob = pygit2.Repository(str(world.repo))[change["new"]]
    assert isinstance(blob, pygit2.Blob) and sealing.is_sealed(blob.data)
    report = audit(world)
    assert report["ok"], report["findings"]


def test_an_approval_moved_from_another_commit_fails_the_audit(
    world: World, engine: Engine, clock: Clock
) -> None:
    """Threat: reuse a genuine approval (another session, change, message) for a commit."""
    token = world.mint(agent="alice", paths="**")
    first = _approved_commit(world, engine, clock, token, {"deploy/a.toml": "a\n"},
                             session="s1", message="First")
    _approved_commit(world, engine, clock, token, {"deploy/b.toml": "b\n"},
                     session="s2", message="Second")
    _env, donor = decode(_envelope(world, first))

    def borrow(record: dict[str, Any]) -> None:
        record["approval"] = copy.deepcopy(donor["approval"])

    _old, new = forge_head(world, "alice", borrow)
    assert findings(audit(world)) == {new: {"approval"}}


def test_an_approval_claimed_by_a_commit_that_had_none_fails_the_audit(
    world: World, engine: Engine, clock: Clock
) -> None:
    """Threat: a record signed with the engine key claiming a person's approval."""
    token = world.mint(agent="alice", paths="**")
    donor_commit = _approved_commit(world, engine, clock, token, {"deploy/a.toml": "a\n"},
                                    session="s1", message="Approved")
    _env, donor = decode(_envelope(world, donor_commit))
    ok(call(engine, token, "write_file", {"path": "src/x.py", "content": "x\n"}, "s3"))
    listed = engine.offer(token).get("catalog_hash")
    ok(engine.invoke(token, "commit", {"message": "Approved"}, session="s3",
                     offered_catalog_hash=listed))

    def claim(record: dict[str, Any]) -> None:
        record["v"] = provenance.RECORD_VERSION_APPROVED
        record["approval"] = copy.deepcopy(donor["approval"])

    _old, new = forge_head(world, "alice", claim)
    assert findings(audit(world)) == {new: {"approval"}}


def test_an_approval_countersigned_by_an_unknown_key_fails_the_audit(
    world: World, engine: Engine, clock: Clock
) -> None:
    """Threat: an approval that never existed, minted by someone without the engine key."""
    token = world.mint(agent="alice", paths="**")
    _approved_commit(world, engine, clock, token, {"deploy/a.toml": "a\n"},
                     session="s1", message="Approved")
    stranger = fresh_key("e20990101-0000beef")

    def recountersign(record: dict[str, Any]) -> None:
        dis = discharge.decode_discharge(record["approval"]["discharge"])
        sig = discharge.countersign(dis.body, dis.operator_sig, stranger.sign)
        record["approval"]["discharge"] = discharge.encode_discharge(
            discharge.Discharge(dis.body, dis.operator_sig, stranger.key_id, sig))

    _old, new = forge_head(world, "alice", recountersign)
    assert findings(audit(world)) == {new: {"approval"}}


def _envelope(world: World, commit: str) -> bytes:
    envelope = git.Repository(world.repo).provenance_record("alice", commit)
    assert envelope is not None
    return envelope


def _keys(world: World) -> Any:
    return signkeys.load_public_keys(signkeys.export_public_keys(world.home))
