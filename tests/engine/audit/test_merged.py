"""Audit of merged work: a real lane merged onto the base by plain git, as a forge would.

The lane is made through the engine with real keys; every merge, squash and
rebase is the real ``git`` command in the repository's working tree; the
audit runs through ``chit audit verify --merged --json``. Each test asserts
how every lane commit is reported to have reached the base.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.audit import intoto
from engine.service import Engine
from tests.conftest import World
from tests.engine.audit.test_verify import Attacker
from tests.engine.engine_calls import land


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


@pytest.fixture
def lane(world: World, engine: Engine) -> dict[str, str]:
    """alice's lane: two chit commits on a base that has not moved."""
    alice = world.mint(agent="alice")
    return {
        "a1": land(engine, alice, "one\n", message="first"),
        "a2": land(engine, alice, "ROUTES = [1]\n", path="src/api/v1.py", message="second"),
    }


def git(world: World, *args: str) -> str:
    """The real git CLI in the repository's working tree (a person or a forge merging)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(world.home.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Maintainer", "GIT_AUTHOR_EMAIL": "maintainer@example.com",
        "GIT_COMMITTER_NAME": "Maintainer", "GIT_COMMITTER_EMAIL": "maintainer@example.com",
    }
    out = subprocess.run(["git", "-C", str(world.repo), *args], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out.stdout.strip()


def move_base(world: World) -> str:
    """A person's commit on the base, touching a file the lane did not."""
    (Path(world.repo) / "README.md").write_text("# fixture, moved\n")
    git(world, "commit", "-q", "-am", "Edit the readme")
    return git(world, "rev-parse", "HEAD")


def verify(world: World, *args: str, status: int = 0) -> dict[str, Any]:
    out = subprocess.run(
        [*world.cli(), "audit", "verify", "--repo", str(world.repo), "--merged", *args, "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == status, (out.stdout, out.stderr)
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def text(world: World, *args: str) -> str:
    out = subprocess.run(
        [*world.cli(), "audit", "verify", "--repo", str(world.repo), "--merged", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )
    return out.stdout


def via(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Commit id to its entry, for the verified commits."""
    return {c["commit"]: c for c in report["commits"]}


def checks(report: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in report["findings"]:
        out.setdefault(f["commit"], set()).add(f["check"])
    return out


def test_merge_commit_keeps_per_commit_provenance(world: World, lane: dict[str, str]) -> None:
    git(world, "merge", "-q", "--no-ff", "agent/alice", "-m", "Merge agent/alice")
    merge = git(world, "rev-parse", "HEAD")
    report = verify(world)
    assert report["ok"], report["findings"]
    seen = via(report)
    assert set(seen) == {lane["a1"], lane["a2"]}
    for cid in (lane["a1"], lane["a2"]):
        assert seen[cid]["ok"] and seen[cid]["via"] == "merge"
        assert seen[cid]["merge"] == merge and seen[cid]["lane"] == "agent/alice"
    assert report["base"]["merges"] == [{"commit": merge,
                                         "commits": [lane["a2"], lane["a1"]]}]
    assert report["base"]["not_chit"] == [world.main_id]
    assert report["base"]["squashes"] == [] and report["base"]["rebased"] == []
    assert f"via merge {merge[:12]}" in text(world)


def test_fast_forward_keeps_per_commit_provenance(world: World, lane: dict[str, str]) -> None:
    git(world, "merge", "-q", "--ff-only", "agent/alice")
    report = verify(world)
    assert report["ok"], report["findings"]
    assert {c: e["via"] for c, e in via(report).items()} == {
        lane["a1"]: "fast-forward", lane["a2"]: "fast-forward"}
    assert report["base"]["merges"] == []
    # A range leaves out what came before it: only a2 since a1.
    only = verify(world, "--since", lane["a1"])
    assert [c["commit"] for c in only["commits"]] == [lane["a2"]]
    assert "via fast-forward" in text(world)


def test_lane_commits_are_still_audited_as_a_lane_until_merged(
    world: World, lane: dict[str, str]
) -> None:
    # Nothing of chit's on the base yet: nothing verified is never reported as verified.
    report = verify(world, status=1)
    assert checks(report) == {"-": {"range"}}
    both = verify(world, "agent/alice")
    assert both["ok"] and {c["via"] for c in both["commits"]} == {"lane"}


def test_squash_with_the_lane_heads_tree(world: World, lane: dict[str, str]) -> None:
    git(world, "merge", "-q", "--squash", "agent/alice")
    git(world, "commit", "-q", "-m", "Squashed work of the lane")
    squash = git(world, "rev-parse", "HEAD")
    report = verify(world)
    assert report["ok"], report["findings"]
    assert report["base"]["squashes"] == [{
        "commit": squash, "lane": "agent/alice", "up_to": lane["a2"], "matched": "tree",
        "content": "same tree", "differs": [], "verified": "commits"}]
    seen = via(report)
    assert set(seen) == {lane["a1"], lane["a2"]}
    assert all(e["via"] == "squash" and e["squash"] == squash and e["ok"]
               for e in seen.values())
    assert f"squash {squash[:12]} of agent/alice up to {lane['a2'][:12]}" in text(world)


def test_squash_after_the_lane_is_deleted_verifies_the_records(
    world: World, lane: dict[str, str]
) -> None:
    """The forge deleted the lane and its commits are gone: the records still verify."""
    git(world, "merge", "-q", "--squash", "agent/alice")
    git(world, "commit", "-q", "-m", "Squashed work of the lane")
    squash = git(world, "rev-parse", "HEAD")
    git(world, "branch", "-q", "-D", "agent/alice")
    git(world, "reflog", "expire", "--expire=now", "--all")
    git(world, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "-C", str(world.repo), "cat-file", "-e", lane["a2"]],
                          capture_output=True, check=False).returncode != 0
    report = verify(world)
    assert report["ok"], report["findings"]
    assert report["base"]["squashes"][0]["verified"] == "records"
    seen = via(report)
    assert set(seen) == {lane["a1"], lane["a2"]}
    assert all(e["record_only"] and e["squash"] == squash and e["ok"] for e in seen.values())
    # The lane's attestations outlive its commits: each note still attests its record.
    for commit in (lane["a1"], lane["a2"]):
        line = git(world, "notes", "--ref=chit", "show", commit).strip().encode()
        assert seen[commit]["attestation"] == intoto.envelope_digest(line)
    forged = git(world, "notes", "--ref=chit", "show", lane["a1"]).replace('"sig":"', '"sig":"A')
    subprocess.run(["git", "-C", str(world.repo), "-c", "user.name=m", "-c",
                    "user.email=m@example.invalid", "notes", "--ref=chit", "add", "-f", "-m",
                    forged, lane["a2"]], check=True, capture_output=True)
    report = verify(world, status=1)
    assert {(f["commit"], f["check"]) for f in report["findings"]} == {
        (lane["a2"], "attestation")}


def test_squash_named_by_trailer_on_a_moved_base(world: World, lane: dict[str, str]) -> None:
    move_base(world)
    git(world, "merge", "-q", "--squash", "agent/alice")
    git(world, "commit", "-q", "-m", "Alice's work\n\nChit-Lane: agent/alice")
    squash = git(world, "rev-parse", "HEAD")
    report = verify(world)
    assert report["ok"], report["findings"]
    [entry] = report["base"]["squashes"]
    assert entry == {"commit": squash, "lane": "agent/alice", "up_to": lane["a2"],
                     "matched": "trailer", "content": "same change", "differs": [],
                     "verified": "commits"}
    assert {e["via"] for e in via(report).values()} == {"squash"}
    assert set(via(report)) == {lane["a1"], lane["a2"]}


def test_squash_whose_content_differs_says_where(world: World, lane: dict[str, str]) -> None:
    """Threat: a commit that names a lane by trailer (text anyone can write) passing as that
    lane's work on the base while it brings something else: reported where, and a finding."""
    move_base(world)
    git(world, "merge", "-q", "--squash", "agent/alice")
    (Path(world.repo) / "docs" / "guide.md").write_text("# guide, edited at merge\n")
    git(world, "commit", "-q", "-am", "Alice's work\n\nAssisted-by: chit agent alice")
    squash = git(world, "rev-parse", "HEAD")
    report = verify(world, status=1)
    assert {(f["commit"], f["check"]) for f in report["findings"]} == {(squash, "squash")}
    [entry] = report["base"]["squashes"]
    assert (entry["commit"], entry["matched"], entry["content"], entry["differs"]) == (
        squash, "trailer", "differs", ["docs/guide.md"])
    assert "content differs: docs/guide.md" in text(world)


@pytest.mark.parametrize("moved", [True, False], ids=["moved-base", "same-base"])
def test_rebase_loses_per_commit_provenance(
    world: World, lane: dict[str, str], moved: bool
) -> None:
    """Rebase-and-merge: new ids; on an unmoved base the copies even keep the lane's trees."""
    if moved:
        move_base(world)
    git(world, "checkout", "-q", "-b", "rebased", "agent/alice")
    git(world, "rebase", "-q", "--force-rebase", "main")
    git(world, "checkout", "-q", "main")
    git(world, "merge", "-q", "--ff-only", "rebased")
    copies = git(world, "rev-list", "--reverse", "-n", "2", "main").split()
    report = verify(world)
    assert report["ok"], report["findings"]
    rebased = {r["original"]: r for r in report["base"]["rebased"]}
    assert set(rebased) == {lane["a1"], lane["a2"]}
    assert {r["commit"] for r in rebased.values()} == set(copies)
    assert all(r["change"] == "same" and r["lane"] == "agent/alice" for r in rebased.values())
    seen = via(report)
    assert set(seen) == {lane["a1"], lane["a2"]}
    assert all(e["via"] == "rebase" and e["copy"] in copies and e["ok"] for e in seen.values())
    assert "per-commit provenance lost" in text(world)


def test_merged_commit_with_an_altered_record_fails_on_the_base(
    world: World, lane: dict[str, str]
) -> None:
    """Threat: once a lane is merged, its records are edited to rewrite what the agent did."""
    git(world, "merge", "-q", "--no-ff", "agent/alice", "-m", "Merge agent/alice")
    attacker = Attacker(world)
    envelope = attacker.envelope("alice", lane["a2"])
    attacker.put_envelope("alice", lane["a2"],
                          envelope.replace(b"alice@agents", b"alicf@agents", 1))
    report = verify(world, status=1)
    assert checks(report) == {lane["a2"]: {"record_hash", "signature"}}
    assert via(report)[lane["a1"]]["ok"]


def test_base_commit_claiming_chit_provenance_without_a_record_fails(
    world: World, lane: dict[str, str]
) -> None:
    """Threat: a person's commit on the base dressed in chit's trailers to borrow its provenance."""
    (Path(world.repo) / "src" / "app.py").write_text("evil = True\n")
    git(world, "commit", "-q", "-am",
        "Looks like chit's\n\nChit-Agent: alice\nChit-Session: s1\nChit-Token-Id: " + "0" * 32
        + "\nChit-Catalog-Hash: sha256:" + "ab" * 32 + "\nChit-Catalog-Encoding: chit-catalog/1"
        + "\nChit-Provenance: sha256:" + "cd" * 32)
    forged = git(world, "rev-parse", "HEAD")
    report = verify(world, status=1)
    assert checks(report) == {forged: {"record_missing"}}


def test_squash_naming_a_lane_without_records_fails(world: World, lane: dict[str, str]) -> None:
    """Threat: a squash names a lane whose provenance this clone does not hold (or never was)."""
    (Path(world.repo) / "src" / "app.py").write_text("other = 1\n")
    git(world, "commit", "-q", "-am", "Work\n\nChit-Lane: agent/nobody")
    squash = git(world, "rev-parse", "HEAD")
    report = verify(world, status=1)
    assert checks(report) == {squash: {"squash"}}


def test_since_needs_merged(world: World, lane: dict[str, str]) -> None:
    out = subprocess.run([*world.cli(), "audit", "verify", "--repo", str(world.repo), "--since",
                          "main"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "--since needs --merged" in out.stderr + out.stdout


def test_forge_squash_message_with_the_lane_commits_messages(
    world: World, lane: dict[str, str]
) -> None:
    """A forge's default squash message lists each commit's message, trailers and all."""
    move_base(world)
    git(world, "merge", "-q", "--squash", "agent/alice")
    listed = "\n\n".join("* " + git(world, "log", "-1", "--format=%B", lane[k])
                         for k in ("a1", "a2"))
    git(world, "commit", "-q", "-m", f"Alice's lane (#1)\n\n{listed}")
    squash = git(world, "rev-parse", "HEAD")
    report = verify(world)
    assert report["ok"], report["findings"]
    [entry] = report["base"]["squashes"]
    assert (entry["commit"], entry["up_to"], entry["matched"], entry["content"]) == (
        squash, lane["a2"], "trailer", "same change")
    assert report["base"]["rebased"] == []
    assert set(via(report)) == {lane["a1"], lane["a2"]}


def test_hostile_agent_name_in_a_forged_trailer_is_not_echoed(
    world: World, lane: dict[str, str]
) -> None:
    """Threat: a commit on the base whose Chit-Agent carries terminal control sequences."""
    (Path(world.repo) / "src" / "app.py").write_text("evil = True\n")
    git(world, "commit", "-q", "-am",
        "Forged\n\nChit-Agent: \x1b[2Jalice\nChit-Provenance: sha256:" + "cd" * 32)
    forged = git(world, "rev-parse", "HEAD")
    report = verify(world, status=1)
    assert checks(report) == {forged: {"trailers"}}
    assert via(report)[forged]["lane"] == "agent/-"
    assert "\x1b" not in text(world)


def test_named_squash_of_a_deleted_lane_on_a_moved_base(
    world: World, lane: dict[str, str]
) -> None:
    """Only the records are left and the tree differs: verified from records, content unknown."""
    move_base(world)
    git(world, "merge", "-q", "--squash", "agent/alice")
    git(world, "commit", "-q", "-m", "Alice's work\n\nChit-Lane: agent/alice")
    squash = git(world, "rev-parse", "HEAD")
    git(world, "branch", "-q", "-D", "agent/alice")
    git(world, "reflog", "expire", "--expire=now", "--all")
    git(world, "gc", "-q", "--prune=now")
    report = verify(world)
    assert report["ok"], report["findings"]
    [entry] = report["base"]["squashes"]
    assert (entry["commit"], entry["up_to"], entry["content"], entry["verified"]) == (
        squash, lane["a2"], "unknown", "records")
    assert {c: e.get("record_only") for c, e in via(report).items()} == {
        lane["a1"]: True, lane["a2"]: True}
