"""``chit audit export`` and ``chit audit attest-lane``: real commits, checked without chit.

Commits are made through the engine as agents make them; the exported
attestations are then verified in a subprocess that imports securesystemslib,
json, base64 and hashlib only (tests/gateway/independent_attestation_check.py),
as a supply-chain tool would, and that fails if any chit module was loaded.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine import admin
from engine.audit import export, intoto
from engine.auth import signkeys
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import land

CHECKER = Path(__file__).with_name("independent_attestation_check.py")
PROVENANCE = intoto.PREDICATE_TYPE
LANE = intoto.LANE_PREDICATE_TYPE


def cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def git(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(world.repo), "-c", "user.name=mallory",
                           "-c", "user.email=m@example.invalid", *args],
                          capture_output=True, text=True, check=False)


def note(world: World, cid: str) -> str:
    out = git(world, "notes", "--ref=chit", "show", cid)
    assert out.returncode == 0, out.stderr
    return out.stdout


def trailer(world: World, cid: str, name: str) -> str:
    message = pygit2.Repository(str(world.repo))[cid].message
    (value,) = [line.split(": ", 1)[1] for line in message.splitlines()
                if line.startswith(f"{name}: ")]
    return value


def independent(keys: Path, lines: Path, expected: list[dict[str, Any]],
                tmp: Path) -> dict[str, Any]:
    """Run the securesystemslib-only checker in a fresh interpreter; its report."""
    want = tmp / "expected.json"
    want.write_text(json.dumps(expected))
    run = subprocess.run([sys.executable, "-I", str(CHECKER), str(keys), str(lines), str(want)],
                         capture_output=True, text=True, timeout=60, check=False, cwd=tmp)
    assert run.stderr == "", run.stderr
    report: dict[str, Any] = json.loads(run.stdout)
    assert report["chit_modules"] == []
    assert run.returncode == (0 if report["ok"] else 1)
    return report


def expected_commit(world: World, cid: str) -> dict[str, Any]:
    return {
        "commit": cid,
        "predicateType": PROVENANCE,
        "predicate": {
            "lane": f"agent/{trailer(world, cid, 'Chit-Agent')}",
            "agent": trailer(world, cid, "Chit-Agent"),
            "session": trailer(world, cid, "Chit-Session"),
            "token_id": trailer(world, cid, "Chit-Token-Id"),
            "catalog": {"hash": trailer(world, cid, "Chit-Catalog-Hash"),
                        "encoding": trailer(world, cid, "Chit-Catalog-Encoding")},
            "provenance": trailer(world, cid, "Chit-Provenance"),
        },
        "digest": "sha256:" + hashlib.sha256(note(world, cid).strip().encode()).hexdigest(),
    }


@pytest.fixture
def lanes(world: World) -> dict[str, str]:
    """alice: three commits; bob: one. Every commit attested by the engine."""
    engine = Engine(world.home, world.repo)
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    return {
        "a1": land(engine, alice, "one\n"),
        "a2": land(engine, alice, "two\n", path="src/api/v1.py"),
        "a3": land(engine, alice, "three\n"),
        "b1": land(engine, bob, "bob\n", session="b"),
    }


def export_cli(world: World, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(world, "audit", "export", "--repo", str(world.repo), "--out", str(out), *args)


# --- export, verified without chit ---------------------------------------------------


def test_export_verifies_with_securesystemslib_alone(world: World, lanes: dict[str, str],
                                                      tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    run = export_cli(world, out, "agent/alice")
    assert run.returncode == 0, run.stderr
    (kid,) = signkeys.load_public_keys(admin.export_public(world.home))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [export.INTOTO_FILE, export.KEYS_FILE, f"{kid}.pem"])
    commits = [lanes["a1"], lanes["a2"], lanes["a3"]]
    lines = (out / export.INTOTO_FILE).read_text().splitlines()
    assert lines == [note(world, c).strip() for c in commits]  # exactly the notes' lines
    keys = json.loads((out / export.KEYS_FILE).read_text())["keys"]
    assert [k["keyid"] for k in keys] == [kid]
    assert (out / f"{kid}.pem").read_text() == keys[0]["pem"]
    report = independent(out / export.KEYS_FILE, out / export.INTOTO_FILE,
                         [expected_commit(world, c) for c in commits], tmp_path)
    assert report["ok"], report


def _tamper_payload(line: str) -> str:
    doc = json.loads(line)
    statement = json.loads(base64.b64decode(doc["payload"]))
    statement["predicate"]["agent"] = "mallory"
    doc["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(doc)


def test_tampered_statement_wrong_key_and_other_commit_fail_independently(
    world: World, lanes: dict[str, str], tmp_path: Path
) -> None:
    """Threats: a statement edited after signing; attestations checked against a key that
    did not sign them; a genuine attestation of one commit presented for another."""
    out = tmp_path / "bundle"
    assert export_cli(world, out, "agent/alice").returncode == 0
    commits = [lanes["a1"], lanes["a2"], lanes["a3"]]
    expected = [expected_commit(world, c) for c in commits]
    lines = (out / export.INTOTO_FILE).read_text().splitlines()
    keys = out / export.KEYS_FILE
    # 1. the payload edited and re-encoded (signature kept)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join([lines[0], _tamper_payload(lines[1]), lines[2]]) + "\n")
    for e in expected:
        e.pop("digest")
    report = independent(keys, tampered, expected, tmp_path)
    assert [r["ok"] for r in report["results"]] == [True, False, True]
    assert report["results"][1]["reason"].startswith("signature")
    # 2. the same key id, another key
    other = json.loads(keys.read_text())
    entry = other["keys"][0]
    wrong = intoto.public_key_entry(entry["keyid"], Ed25519PrivateKey.generate().public_key())
    wrong_keys = tmp_path / "wrong-keys.json"
    wrong_keys.write_text(json.dumps({"keys": [wrong]}))
    report = independent(wrong_keys, out / export.INTOTO_FILE, expected, tmp_path)
    assert [r["ok"] for r in report["results"]] == [False, False, False]
    assert all(r["reason"].startswith("signature") for r in report["results"])
    # 3. a commit's genuine attestation checked as another commit's
    swapped = [expected[1], expected[0], expected[2]]
    report = independent(keys, out / export.INTOTO_FILE, swapped, tmp_path)
    assert [r["reason"] for r in report["results"]] == [
        "subject is another commit", "subject is another commit", None]
    # the genuine bundle still passes
    assert independent(keys, out / export.INTOTO_FILE, expected, tmp_path)["ok"]


def test_json_format_shape(world: World, lanes: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    run = export_cli(world, out, "agent/bob", "--format", "json", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] is True and report["unattested"] == []
    assert report["format"] == "json"
    (line,) = (out / export.JSON_FILE).read_text().splitlines()
    item = json.loads(line)
    assert set(item) == {"commit", "lane", "attestation", "statement", "digest"}
    assert item["commit"] == lanes["b1"] and item["lane"] == "agent/bob"
    stored = note(world, lanes["b1"]).strip()
    assert item["attestation"] == json.loads(stored)
    assert item["digest"] == "sha256:" + hashlib.sha256(stored.encode()).hexdigest()
    assert item["statement"] == json.loads(base64.b64decode(item["attestation"]["payload"]))
    assert item["statement"]["subject"] == [
        {"name": "agent/bob", "digest": {"gitCommit": lanes["b1"]}}]
    assert report["exported"] == [{"commit": lanes["b1"], "lane": "agent/bob",
                                   "digest": item["digest"], "kid": item["attestation"]
                                   ["signatures"][0]["keyid"]}]
    assert not (out / export.INTOTO_FILE).exists()


def test_a_range_of_two_revisions_exports_the_commits_with_notes(
    world: World, lanes: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "bundle"
    run = export_cli(world, out, f"{lanes['a1']}..{lanes['a3']}", "--json")
    assert run.returncode == 0, run.stderr
    assert [e["commit"] for e in json.loads(run.stdout)["exported"]] == [lanes["a2"], lanes["a3"]]
    # main..agent/alice is the lane's range; a human commit in a plain range is not chit's
    out2 = tmp_path / "bundle2"
    run = export_cli(world, out2, f"{world.main_id}..{lanes['a1']}", "--json")
    assert run.returncode == 0, run.stderr
    assert [e["commit"] for e in json.loads(run.stdout)["exported"]] == [lanes["a1"]]


# --- export refuses what does not verify ---------------------------------------------


def test_export_reports_commits_without_a_verifying_attestation(
    world: World, lanes: dict[str, str], tmp_path: Path
) -> None:
    """Threats: an attested commit whose note was removed (so an export would silently
    shrink); a note replaced by another commit's attestation, or by one signed with a key
    the auditor does not trust."""
    a1, a2, a3 = lanes["a1"], lanes["a2"], lanes["a3"]
    assert git(world, "notes", "--ref=chit", "remove", a2).returncode == 0
    assert git(world, "notes", "--ref=chit", "add", "-f", "-m", note(world, a1),
               a3).returncode == 0
    out = tmp_path / "bundle"
    run = export_cli(world, out, "agent/alice", "--json")
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] is False
    assert [e["commit"] for e in report["exported"]] == [a1]
    reasons = {u["commit"]: u["reason"] for u in report["unattested"]}
    assert set(reasons) == {a2, a3}
    assert "no attestation" in reasons[a2]
    assert "another commit" in reasons[a3]
    assert (out / export.INTOTO_FILE).read_text().splitlines() == [note(world, a1).strip()]
    # without --json: one line per unattested commit on stderr, exit 1
    run = export_cli(world, tmp_path / "b2", "agent/alice")
    assert run.returncode == 1
    assert f"unattested {a2[:12]} agent/alice: no attestation" in run.stderr
    assert "FAILED: 2 commit(s)" in run.stderr
    # an attestation signed by a key not trusted
    stranger = signkeys.SigningKey(key_id="e20990101-deadbeef", created=0, status="active",
                                   public=b"", seed=bytes(range(32)))
    stamped = intoto.commit_statement(a2, {"lane": "agent/alice"}, "sha256:" + "0" * 64)
    line = intoto.dumps(intoto.sign_statement(stamped, stranger)).decode()
    assert git(world, "notes", "--ref=chit", "add", "-f", "-m", line, a2).returncode == 0
    run = export_cli(world, tmp_path / "b3", "agent/alice", "--json")
    reasons = {u["commit"]: u["reason"] for u in json.loads(run.stdout)["unattested"]}
    assert reasons[a2] == "signed by no known key"


def test_export_with_trusted_keys_file(world: World, lanes: dict[str, str],
                                       tmp_path: Path) -> None:
    """Threat: an auditor trusting other keys than the engine's gets nothing exported."""
    private = Ed25519PrivateKey.generate()
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    doc = {"format": "chit-engine-keys/1", "keys": [{
        "kid": "e20990101-00000001", "alg": "ed25519", "created": 0, "status": "active",
        "public": base64.urlsafe_b64encode(raw).decode().rstrip("=")}]}
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(doc))
    run = export_cli(world, tmp_path / "bundle", "agent/bob", "--keys", str(keys), "--json")
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["exported"] == []
    assert [u["reason"] for u in report["unattested"]] == ["signed by no known key"]
    assert json.loads((tmp_path / "bundle" / export.KEYS_FILE).read_text()) == {"keys": []}
    # the engine's own export verifies under its exported keys
    own = tmp_path / "engine-keys.json"
    own.write_text(json.dumps(admin.export_public(world.home)))
    run = export_cli(world, tmp_path / "b2", "agent/bob", "--keys", str(own))
    assert run.returncode == 0, run.stderr


def test_export_is_bounded(world: World, lanes: dict[str, str], tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Threat: a range of unbounded length or attestations read into memory at once."""
    keys = signkeys.load_public_keys(admin.export_public(world.home))
    monkeypatch.setattr(export, "LIMITS", dataclasses.replace(export.LIMITS, export_commits=2))
    with pytest.raises(ValueError, match="more than 2 commits"):
        admin.export_attestations(world.repo, "agent/alice", public_keys=keys, form="in-toto",
                                  out=tmp_path / "x")
    with pytest.raises(ValueError, match="more than 2 commits"):
        admin.export_attestations(world.repo, f"{world.main_id}..{lanes['a3']}",
                                  public_keys=keys, form="in-toto", out=tmp_path / "x")
    monkeypatch.setattr(export, "LIMITS", dataclasses.replace(export.LIMITS, export_bytes=100))
    with pytest.raises(ValueError, match="exceed 100 bytes"):
        admin.export_attestations(world.repo, "agent/bob", public_keys=keys, form="in-toto",
                                  out=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # nothing written


# --- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["agent/alice"], "--out"),
    (["a...b", "--out", "OUT"], "symmetric difference"),
    (["main..", "--out", "OUT"], "is not REV..LANE or REV..REV"),
    (["agent/../x", "--out", "OUT"], "revision must be a branch name"),
    (["agent/Bad Name", "--out", "OUT"], "is not a lane"),
    (["agent/alice", "--out", "OUT", "--format", "xml"], "invalid choice"),
    (["main..no-such-branch", "--out", "OUT"], None),
])
def test_bad_export_arguments(world: World, lanes: dict[str, str], tmp_path: Path,
                              args: list[str], message: str | None) -> None:
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    run = cli(world, "audit", "export", "--repo", str(world.repo), *args)
    if message is None:  # a revision that names nothing: not found
        assert run.returncode == 4, run.stderr
        assert "not_found" in run.stderr
    else:
        assert run.returncode == 2, run.stderr
        assert message in run.stderr
        assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_export_refuses_an_earlier_export_unless_forced(world: World, lanes: dict[str, str],
                                                        tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert export_cli(world, out, "agent/alice").returncode == 0
    before = (out / export.INTOTO_FILE).read_bytes()
    run = export_cli(world, out, "agent/bob")
    assert run.returncode == 2
    assert "holds an export already" in run.stderr and "--force" in run.stderr
    assert (out / export.INTOTO_FILE).read_bytes() == before
    run = export_cli(world, out, "agent/bob", "--force", "--format", "json")
    assert run.returncode == 0, run.stderr
    assert not (out / export.INTOTO_FILE).exists()  # one bundle per folder
    assert len((out / export.JSON_FILE).read_text().splitlines()) == 1
    run = cli(world, "audit", "export", "agent/alice", "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and "--repo is required" in run.stderr  # no engine.toml


def test_repo_by_name_of_engine_toml(world: World, lanes: dict[str, str],
                                     tmp_path: Path) -> None:
    (world.home / "engine.toml").write_text(f'[[repo]]\nname = "app"\npath = "{world.repo}"\n')
    for repo in (["--repo", "app"], []):  # by name, or the home's only repository
        out = tmp_path / f"bundle{len(repo)}"
        run = cli(world, "audit", "export", *repo, "agent/bob", "--out", str(out), "--json")
        assert run.returncode == 0, run.stderr
        assert len(json.loads(run.stdout)["exported"]) == 1
    run = cli(world, "audit", "export", "--repo", "nope", "agent/bob", "--out",
              str(tmp_path / "o"))
    assert run.returncode == 2 and "no [[repo]]" in run.stderr


# --- attest-lane ---------------------------------------------------------------------


def _home_keys(world: World, tmp: Path) -> Path:
    path = tmp / "home-keys.json"
    keys = signkeys.load_public_keys(admin.export_public(world.home))
    path.write_text(json.dumps({"keys": [intoto.public_key_entry(k, v)
                                         for k, v in keys.items()]}))
    return path


def test_attest_lane_of_a_good_lane(world: World, lanes: dict[str, str],
                                    tmp_path: Path) -> None:
    run = cli(world, "audit", "attest-lane", "agent/alice", "--repo", str(world.repo))
    assert run.returncode == 0, run.stderr
    assert "attested agent/alice" in run.stderr and ": ok, 3 commits" in run.stderr
    line = run.stdout
    assert line.endswith("\n") and line.count("\n") == 1
    (tmp_path / "lane.jsonl").write_text(line)
    commits = [lanes["a1"], lanes["a2"], lanes["a3"]]
    digests = ["sha256:" + hashlib.sha256(note(world, c).strip().encode()).hexdigest()
               for c in commits]
    expected = [{
        "commit": lanes["a3"], "predicateType": LANE,
        "predicate": {
            "lane": "agent/alice", "head": lanes["a3"],
            "base": {"ref": "refs/heads/main", "commit": world.main_id},
            "commits": [{"commit": c, "attestation": d}
                        for c, d in zip(commits, digests, strict=True)],
            "verdict": {"ok": True, "checked": 3, "findings": []},
        },
    }]
    report = independent(_home_keys(world, tmp_path), tmp_path / "lane.jsonl", expected,
                         tmp_path)
    assert report["ok"], report
    # --out writes the same kind of line to a new file, and never over one
    out = tmp_path / "lane.intoto.json"
    run = cli(world, "audit", "attest-lane", "agent/alice", "--repo", str(world.repo),
              "--out", str(out))
    assert run.returncode == 0 and run.stdout == ""
    assert json.loads(out.read_text())["payloadType"] == intoto.PAYLOAD_TYPE
    run = cli(world, "audit", "attest-lane", "agent/alice", "--repo", str(world.repo),
              "--out", str(out))
    assert run.returncode == 2 and "exists already" in run.stderr


def test_attest_lane_of_a_tampered_lane_attests_the_failure(
    world: World, lanes: dict[str, str], tmp_path: Path
) -> None:
    """Threat: a lane whose audit fails summarised as if it passed, or not at all (so a
    reviewer sees nothing): it is attested, signed, with the failing verdict."""
    assert git(world, "notes", "--ref=chit", "remove", lanes["a2"]).returncode == 0
    run = cli(world, "audit", "attest-lane", "agent/alice", "--repo", str(world.repo))
    assert run.returncode == 1, run.stderr
    assert ": FAILED, 3 commits" in run.stderr
    (tmp_path / "lane.jsonl").write_text(run.stdout)
    statement = json.loads(base64.b64decode(json.loads(run.stdout)["payload"]))
    verdict = statement["predicate"]["verdict"]
    assert verdict["ok"] is False
    assert [(f["commit"], f["check"]) for f in verdict["findings"]] == [
        (lanes["a2"], "attestation")]
    assert [c["attestation"] is None for c in statement["predicate"]["commits"]] == [
        False, True, False]
    expected = [{"commit": lanes["a3"], "predicateType": LANE,
                 "predicate": {"verdict": verdict, "lane": "agent/alice"}}]
    assert independent(_home_keys(world, tmp_path), tmp_path / "lane.jsonl", expected,
                       tmp_path)["ok"]


@pytest.mark.parametrize(("lane", "status", "message"), [
    ("agent/..", 2, "is not a lane"),
    ("agent/nobody", 4, "no lane agent/nobody"),
])
def test_attest_lane_bad_lane(world: World, lanes: dict[str, str], lane: str, status: int,
                              message: str) -> None:
    run = cli(world, "audit", "attest-lane", lane, "--repo", str(world.repo))
    assert run.returncode == status, run.stderr
    assert message in run.stderr and run.stdout == ""


# --- docs/attestations.md's recipes, run as written ----------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "attestations.md"


def _doc_block(name: str) -> str:
    text = DOC.read_text()
    block = text.split(f"<!-- {name}:begin -->\n", 1)[1].split(f"<!-- {name}:end -->", 1)[0]
    return block.split("\n", 1)[1].rsplit("```", 1)[0]  # inside the fence


def test_the_documented_script_verifies_an_export(world: World, lanes: dict[str, str],
                                                  tmp_path: Path) -> None:
    """The docs' securesystemslib script, run as written: genuine lines pass, a line
    checked against another commit and an edited statement fail."""
    out = tmp_path / "bundle"
    assert export_cli(world, out, "agent/alice").returncode == 0
    script = tmp_path / "verify_chit.py"
    script.write_text(_doc_block("verify-script"))
    commits = [lanes["a1"], lanes["a2"], lanes["a3"]]

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-I", str(script), *args], input=stdin,
                              capture_output=True, text=True, timeout=60, check=False,
                              cwd=tmp_path)

    keys, lines = str(out / export.KEYS_FILE), str(out / export.INTOTO_FILE)
    good = run(keys, lines, *commits)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.splitlines() == [f"ok {c} agent/alice {PROVENANCE}" for c in commits]
    from_note = run(keys, "-", lanes["a2"], stdin=note(world, lanes["a2"]))
    assert from_note.returncode == 0, from_note.stdout
    other = run(keys, "-", lanes["a1"], stdin=note(world, lanes["a2"]))
    assert other.returncode == 1 and "another commit" in other.stdout
    edited = tmp_path / "edited.jsonl"
    edited.write_text(_tamper_payload(note(world, lanes["a2"]).strip()) + "\n")
    bad = run(keys, str(edited))
    assert bad.returncode == 1 and "VerificationError" in bad.stdout


def test_the_documented_openssl_recipe_verifies_an_export(world: World, lanes: dict[str, str],
                                                          tmp_path: Path) -> None:
    """The docs' OpenSSL recipe (jq, base64, openssl pkeyutl over the PAE), run as written;
    with the first line's statement edited, OpenSSL refuses it."""
    assert export_cli(world, tmp_path / "bundle", "agent/bob").returncode == 0
    recipe = _doc_block("verify-openssl")
    good = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert good.returncode == 0, good.stderr
    assert "Signature Verified Successfully" in good.stdout
    assert good.stdout.splitlines()[-1] == lanes["b1"]
    bundle = tmp_path / "bundle" / export.INTOTO_FILE
    bundle.write_text(_tamper_payload(bundle.read_text().strip()) + "\n")
    bad = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0
    assert "Signature Verification Failure" in bad.stdout + bad.stderr
