"""Each commit's in-toto attestation: written, readable by git, checked by the audit.

Commits are made through the engine with real keys; the notes are read and
forged with the git command, as a person with write access to the repository
would. The statement's independent verification (securesystemslib alone) is in
tests/gateway/test_cli_attestations.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from typing import Any

import pygit2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.audit import intoto, provenance
from engine.auth import signkeys
from engine.auth.sealing import NO_SEALING
from engine.git.handle import Handle
from engine.git.names import NOTES_REF
from engine.git.notes import note_commit
from engine.service import Engine
from tests.conftest import World
from tests.engine.audit.test_verify import (
    Attacker,
    assert_only,
    audit,
    findings,
    forge_head,
    public_keys,
)
from tests.engine.engine_calls import call, land


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def git(world: World, *args: str) -> str:
    return subprocess.run(["git", "-C", str(world.repo), *args], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def statement_of(line: str) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(line)["payload"]))


def record_of(world: World, agent: str, commit: str) -> tuple[bytes, dict[str, Any]]:
    envelope = Attacker(world).envelope(agent, commit)
    return envelope, provenance.open_envelope(envelope, public_keys(world))


def test_every_commit_gets_a_note_git_reads(world: World, engine: Engine) -> None:
    alice = world.mint(agent="alice")
    first = land(engine, alice, "one\n")
    second = land(engine, alice, "two\n", path="src/b.py")
    for commit in (first, second):
        note = git(world, "notes", "--ref=chit", "show", commit)
        [line] = note.splitlines()
        statement = statement_of(line)
        envelope, record = record_of(world, "alice", commit)
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["subject"] == [{"name": "agent/alice",
                                         "digest": {"gitCommit": commit}}]
        assert statement["predicateType"] == intoto.PREDICATE_TYPE
        predicate = statement["predicate"]
        assert predicate["provenance"] == provenance.envelope_hash(envelope)
        assert {k: v for k, v in predicate.items() if k != "provenance"} == json.loads(
            json.dumps(record))
        assert json.loads(line)["payloadType"] == "application/vnd.in-toto+json"
        assert json.loads(line)["signatures"][0]["keyid"] == record["kid"]
    # git log shows the notes and the attribution trailer tools count.
    shown = git(world, "log", "--notes=chit", "--format=%H%n%(trailers:key=Assisted-by)%n%N",
                "agent/alice", "-2")
    assert shown.count("Assisted-by: chit agent alice") == 2
    assert shown.count(intoto.PREDICATE_TYPE) == 0  # the payload is base64: only keyids show
    assert shown.count('"payloadType":"application/vnd.in-toto+json"') == 2
    report = audit(world)
    assert report["ok"], report["findings"]
    digests = {c["commit"]: c["attestation"] for c in report["commits"]}
    for commit in (first, second):
        line = git(world, "notes", "--ref=chit", "show", commit).strip().encode()
        assert digests[commit] == intoto.envelope_digest(line)


def test_an_attestation_of_an_approved_commit_carries_the_approval(world: World) -> None:
    record = {"v": "chit-provenance/2", "lane": "agent/a",
              "approval": {"discharge": b"\x00\xff", "operator_public_key": "ab" * 32,
                           "request": b"r", "change": b""}}
    predicate = intoto.record_predicate(record, "sha256:" + "0" * 64)
    assert predicate["approval"] == {"discharge": "AP8=", "operator_public_key": "ab" * 32,
                                     "request": "cg==", "change": ""}
    assert predicate["provenance"] == "sha256:" + "0" * 64


def test_another_tools_line_in_a_note_is_kept(world: World, engine: Engine) -> None:
    """Another tool's line beside chit's survives chit's later notes; the audit finds chit's."""
    alice = world.mint(agent="alice")
    first = land(engine, alice, "one\n")
    # Another writer appends to the note with git; chit's next commit rewrites the notes tree.
    git(world, "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "notes",
        "--ref=chit", "append", "-m", '{"other":"tool"}', first)
    land(engine, alice, "two\n")
    lines = git(world, "notes", "--ref=chit", "show", first).splitlines()
    assert len(lines) == 3 and lines[-1] == '{"other":"tool"}' and lines[1] == ""
    report = audit(world)
    assert report["ok"], report["findings"]  # the one line that verifies is found


def test_concurrent_lanes_each_keep_their_note(world: World, engine: Engine) -> None:
    """The notes ref is every lane's: commits racing on eight lanes lose no note."""
    tokens = {f"agent{n}": world.mint(agent=f"agent{n}") for n in range(8)}
    made: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def work(agent: str) -> None:
        try:
            made[agent] = [land(engine, tokens[agent], f"{agent} {i}\n", session=agent,
                                path=f"src/{agent}_{i}.py") for i in range(3)]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(a,)) for a in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for commits in made.values():
        for commit in commits:
            assert git(world, "notes", "--ref=chit", "show", commit).count("\n") == 1
    report = audit(world)
    assert report["ok"] and len(report["commits"]) == 24, report["findings"]


# --- the audit's attestation check: threats ---------------------------------------------


@pytest.fixture
def two(world: World, engine: Engine) -> tuple[str, str]:
    alice = world.mint(agent="alice")
    return land(engine, alice, "one\n"), land(engine, alice, "two\n")


def test_a_removed_note_fails(world: World, two: tuple[str, str]) -> None:
    """Threat: hiding the attestation an organisation's tools rely on (or never pushing it)."""
    first, second = two
    Attacker(world).put_note(second, None)
    assert_only(audit(world), {second: {"attestation"}}, [first])


def test_a_removed_notes_ref_fails_and_says_so(world: World, two: tuple[str, str]) -> None:
    pygit2.Repository(str(world.repo)).references.delete(NOTES_REF)
    report = audit(world)
    assert findings(report) == {two[0]: {"attestation"}, two[1]: {"attestation"},
                                "-": {"refs"}}
    [said] = [f["reason"] for f in report["findings"] if f["check"] == "refs"]
    assert "refs/notes/chit is missing" in said and "refs/notes/chit:refs/notes/chit" in said


def test_a_tampered_statement_fails(world: World, two: tuple[str, str]) -> None:
    """Threat: widening what the statement says (another scope) under the engine's signature."""
    first, second = two
    doc = json.loads(git(world, "notes", "--ref=chit", "show", second))
    statement = json.loads(base64.b64decode(doc["payload"]))
    statement["predicate"]["chain"][-1]["paths"] = [["**"]]
    doc["payload"] = base64.b64encode(intoto.dumps(statement)).decode()
    Attacker(world).put_note(second, json.dumps(doc))
    report = audit(world)
    assert_only(report, {second: {"attestation"}}, [first])
    assert "does not verify" in report["findings"][0]["reason"]


def test_a_statement_signed_by_an_untrusted_key_fails(world: World, two: tuple[str, str]) -> None:
    """Threat: an attestation anyone with push access could make, with their own key."""
    first, second = two
    _envelope, record = record_of(world, "alice", second)
    mallory = signkeys.SigningKey(key_id=record["kid"], created=0, status="active",
                                  public=b"", seed=Ed25519PrivateKey.generate().private_bytes_raw())
    # A line with the engine's key id but another key's signature, and one under its own id.
    forged = intoto.sign_statement(
        intoto.commit_statement(second, record, "sha256:" + "0" * 64), mallory)
    Attacker(world).put_note(second, json.dumps(forged))
    assert_only(audit(world), {second: {"attestation"}}, [first])
    own = signkeys.SigningKey(key_id="mallory", created=0, status="active", public=b"",
                              seed=mallory.seed)
    Attacker(world).put_note(second, json.dumps(intoto.sign_statement(
        intoto.commit_statement(second, record, "sha256:" + "0" * 64), own)))
    report = audit(world)
    assert_only(report, {second: {"attestation"}}, [first])
    assert "no known key" in report["findings"][0]["reason"]


def test_an_attestation_of_another_commit_fails(world: World, two: tuple[str, str]) -> None:
    """Threat: a genuine attestation copied onto another commit's note."""
    first, second = two
    attacker = Attacker(world)
    attacker.put_note(second, attacker.note(first))
    report = audit(world)
    assert_only(report, {second: {"attestation"}}, [first])
    assert "another commit" in report["findings"][0]["reason"]


def test_a_genuine_attestation_that_is_not_the_record_fails(world: World,
                                                            two: tuple[str, str]) -> None:
    """Threat: an engine key holder's statement that says more than the stored record."""
    first, second = two
    envelope, record = record_of(world, "alice", second)
    record = dict(record)
    record["policy"] = "sha256:" + "1" * 64
    key = signkeys.active_signing_key(world.home)
    line = intoto.dumps(intoto.sign_statement(
        intoto.commit_statement(second, record, provenance.envelope_hash(envelope)), key))
    Attacker(world).put_note(second, line.decode())
    report = audit(world)
    assert_only(report, {second: {"attestation"}}, [first])
    assert "not the commit's record" in report["findings"][0]["reason"]


def test_garbage_notes_fail_without_harm(world: World, two: tuple[str, str]) -> None:
    """Threat: notes crafted to crash or exhaust the auditor (deep JSON, duplicate keys)."""
    first, second = two
    attacker = Attacker(world)
    for text in ("[" * 100_000, '{"payload":"","payload":"","payloadType":"x","signatures":[]}',
                 "not json", '{"payload":"e30=","payloadType":"application/vnd.in-toto+json",'
                 '"signatures":[{"keyid":"k","sig":"AA=="}]}'):
        attacker.put_note(second, text)
        assert_only(audit(world), {second: {"attestation"}}, [first])


def test_an_older_commit_without_assisted_by_needs_no_note(world: World,
                                                           two: tuple[str, str]) -> None:
    """Commits made before attestations began have neither the trailer nor a note."""
    _old, new = forge_head(world, "alice", lambda _r: None, message=lambda m: m.replace(
        "Assisted-by: chit agent alice\n", ""))
    Attacker(world).put_note(new, None)
    report = audit(world)
    assert report["ok"], report["findings"]
    assert {c["commit"]: c["attestation"] for c in report["commits"]}[new] is None


def test_assisted_by_naming_another_agent_fails(world: World, two: tuple[str, str]) -> None:
    """Threat: attribution edited to credit another agent (re-signed by a key holder)."""
    first, _second = two
    _old, new = forge_head(world, "alice", lambda _r: None, message=lambda m: m.replace(
        "Assisted-by: chit agent alice", "Assisted-by: chit agent bob"))
    assert_only(audit(world), {new: {"trailers"}}, [first])


def test_the_engine_writes_no_note_for_a_refused_commit(world: World, engine: Engine) -> None:
    alice = world.mint(agent="alice")
    land(engine, alice, "one\n")
    before = git(world, "rev-parse", NOTES_REF)
    readonly = world.mint(agent="alice", ops="read")
    out = call(engine, readonly, "commit", {"message": "x"}, session="r")
    assert out["ok"] is False
    assert git(world, "rev-parse", NOTES_REF) == before


def test_note_line_must_be_one_line() -> None:
    with pytest.raises(ValueError):
        note_commit(None, None, b"a\nb", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        note_commit(None, None, b"", 0)  # type: ignore[arg-type]


def test_a_note_chit_adds_to_keeps_the_lines_it_had(world: World, two: tuple[str, str]) -> None:
    """A commit made again (the same id after a remote refused the push) keeps every line."""
    _first, second = two
    git(world, "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "notes",
        "--ref=chit", "append", "-m", '{"other":"tool"}', second)
    repo = pygit2.Repository(str(world.repo))
    handle = Handle(str(world.repo), NO_SEALING)
    mine = git(world, "notes", "--ref=chit", "show", second).splitlines()[0].encode()
    for line in (mine, b'{"third":1}'):
        _current, new = note_commit(handle, pygit2.Oid(hex=second), line, 1_800_000_000)
        repo.references.create(NOTES_REF, new, force=True)
    assert git(world, "notes", "--ref=chit", "show", second).splitlines() == [
        mine.decode(), '{"other":"tool"}', '{"third":1}']
    assert git(world, "fsck", "--no-progress", "--no-dangling") == ""


def test_a_notes_ref_at_a_blob_stops_no_commit(world: World, engine: Engine) -> None:
    """Threat: someone with push access points refs/notes/chit at a blob to stop every lane."""
    alice = world.mint(agent="alice")
    land(engine, alice, "one\n")
    blob = subprocess.run(["git", "-C", str(world.repo), "hash-object", "-w", "--stdin"],
                          input="junk\n", capture_output=True, text=True, check=True).stdout
    git(world, "update-ref", NOTES_REF, blob.strip())
    second = land(engine, alice, "two\n")  # lands, and is attested
    assert git(world, "notes", "--ref=chit", "show", second).count("\n") == 1
    report = audit(world, ["agent/alice"])
    assert findings(report) == {report["commits"][-1]["commit"]: {"attestation"}}
