"""``chit operators``, ``chit approvals``, ``chit approve`` and ``chit deny``, as real processes.

Decisions made here are the CLI's: real operator keys on disk, the home's
store, the call log; the approvals they decide are made by a real engine.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from engine.audit import calllog
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.engine_calls import call, ok, refusal

POLICY = """version = 1

[[approval]]
tools = ["commit"]
paths = ["deploy/**"]
approvers = ["alice", "group:release"]
ttl = 600
"""


def run(world: World, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*world.cli(), *args], capture_output=True, text=True, timeout=60, check=False,
        env=None if env is None else {**os.environ, **env},
    )


def run_json(world: World, *args: str) -> Any:
    out = run(world, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def operators(world: World, tmp_path: Path) -> Path:
    """alice (key kept outside the home), rel (group release), carol (group ops)."""
    outside = tmp_path / "alice.key"
    assert run(world, "operators", "add", "alice", "--key-out", str(outside)).returncode == 0
    assert run(world, "operators", "add", "rel", "--group", "release").returncode == 0
    assert run(world, "operators", "add", "carol", "--group", "ops").returncode == 0
    (world.home / "policy.toml").write_text(POLICY)
    return outside


def _pending(world: World) -> tuple[str, str]:
    """An approval a real engine made for a commit, and the token that asked."""
    token = world.mint(ops="read,write,commit", paths="**")
    with Engine(world.home, world.repo) as engine:
        ok(call(engine, token, "write_file", {"path": "deploy/a.toml", "content": "a\n"}))
        listed = engine.offer(token).get("catalog_hash")
        answer = engine.invoke(token, "commit", {"message": "Deploy"}, session="s1",
                               offered_catalog_hash=listed)
    return str(refusal(answer)["approval"]["id"]), token


def test_operators_add_writes_a_private_key_once_and_registers_the_public_one(
    world: World, operators: Path
) -> None:
    """Threat: an operator key readable by others, or overwritten (the old one lost)."""
    assert stat.S_IMODE(operators.stat().st_mode) == 0o600
    in_home = world.home / "operators" / "rel.key"
    assert stat.S_IMODE(in_home.stat().st_mode) == 0o600
    listed = run_json(world, "operators", "list")
    assert [(o["name"], o["groups"]) for o in listed] == [
        ("alice", []), ("carol", ["ops"]), ("rel", ["release"])]
    assert all(len(o["key_id"]) == 32 for o in listed)
    before = operators.read_bytes()
    again = run(world, "operators", "add", "bob", "--key-out", str(operators))
    assert again.returncode == 2 and "exists" in again.stderr
    assert operators.read_bytes() == before
    assert "bob" not in {o["name"] for o in run_json(world, "operators", "list")}
    taken = run(world, "operators", "add", "alice", "--key-out", str(operators) + ".2")
    assert taken.returncode == 2 and "already registered" in taken.stderr
    assert not Path(str(operators) + ".2").exists()
    bad = run(world, "operators", "add", "Alice")
    assert bad.returncode == 2 and "a-z 0-9" in bad.stderr
    assert run(world, "operators", "remove", "carol").returncode == 0
    assert "carol" not in {o["name"] for o in run_json(world, "operators", "list")}
    removed = run_json(world, "operators", "list", "--removed")
    assert [o["removed_at"] > 0 for o in removed if o["name"] == "carol"] == [True]
    gone = run(world, "operators", "remove", "carol")
    assert gone.returncode == 2 and "no operator named carol" in gone.stderr
    # Threat: terminal escapes in a name typed or pasted are never echoed back.
    hostile = run(world, "operators", "remove", "x\x1b]0;owned\x07\x1b[2J")
    assert hostile.returncode == 2 and "no such operator" in hostile.stderr
    assert "\x1b" not in hostile.stderr and "owned" not in hostile.stderr


def test_policy_check_with_a_home_reports_unknown_approvers(world: World) -> None:
    (world.home / "policy.toml").write_text(POLICY)
    out = run(world, "policy", "check")
    assert out.returncode == 1
    assert "approval[0].approvers[0]: no operator is named 'alice'" in out.stdout
    assert "policy.toml:6: approval[0].approvers[1]: no operator is in group 'release'" in (
        out.stdout)
    run(world, "operators", "add", "alice")
    run(world, "operators", "add", "rel", "--group", "release")
    assert run(world, "policy", "check").returncode == 0


def test_list_show_approve_and_the_retry_lands(world: World, operators: Path) -> None:
    approval, token = _pending(world)
    (listed,) = run_json(world, "approvals", "list")
    assert listed["id"] == approval and listed["state"] == "pending"
    text = run(world, "approvals", "list").stdout
    assert approval in text and "deploy/a.toml" in text
    shown = run_json(world, "approvals", "show", approval)
    assert shown["asked"]["paths"] == ["deploy/a.toml"] and shown["approvers"] == [
        "alice", "group:release"]
    assert "approvers  alice, group:release" in run(world, "approvals", "show", approval).stdout
    out = run(world, "approve", approval, "--as", "alice", "--key", str(operators),
              "--note", "go")
    assert out.returncode == 0, out.stderr
    assert f"{approval} approved by alice" in out.stdout
    assert run_json(world, "approvals", "list") == []
    (decided,) = run_json(world, "approvals", "list", "--all")
    assert (decided["state"], decided["decided_by"], decided["note"]) == (
        "approved", "alice", "go")
    # "decision" is an outcome everywhere; the signed record is the discharge.
    assert "decision" not in decided and len(bytes.fromhex(decided["discharge"])) > 64
    with closing(open_store(world.home, None)) as store:
        rows = list(store.log_rows(agent=calllog.OPERATOR))
    entry = calllog.decode_entry(rows[-1].entry)
    assert entry["tool"] == "chit approve" and entry["session"] == "s1"
    assert entry["arguments"]["approval"] == approval
    assert entry["arguments"]["operator"] == "alice"
    with Engine(world.home, world.repo) as engine:  # the retry, in a new engine, lands
        answer = engine.invoke(token, "commit", {"message": "Deploy"}, session="s1",
                               offered_catalog_hash=engine.offer(token).get("catalog_hash"))
    assert answer["ok"] is True, answer


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--as", "carol"], "not_an_approver"),
        (["--as", "dave"], "unknown_operator"),
        (["--as", "rel", "--key", "ALICE"], "wrong_key"),
    ],
)
def test_refused_decisions_exit_3_with_a_stable_line_and_record_nothing(
    world: World, operators: Path, args: list[str], reason: str
) -> None:
    """Threats: an operator the policy does not list, an unknown one, a key not theirs."""
    approval, _token = _pending(world)
    args = [str(operators) if a == "ALICE" else a for a in args]
    out = run(world, "approve", approval, *args)
    assert out.returncode == 3  # refused (docs/errors.md, "Exit statuses")
    assert out.stderr.startswith(f"chit approve: refused ({reason}): ")
    assert out.stderr.count("\n") == 1
    assert run_json(world, "approvals", "show", approval)["state"] == "pending"
    with closing(open_store(world.home, None)) as store:
        assert list(store.log_rows(agent=calllog.OPERATOR)) == []


def test_deny_with_the_operator_from_the_environment_then_decided_is_refused(
    world: World, operators: Path
) -> None:
    approval, _token = _pending(world)
    out = run(world, "deny", approval, "--note", "not now", env={"CHIT_OPERATOR": "rel"})
    assert out.returncode == 0, out.stderr
    assert f"{approval} denied by rel" in out.stdout
    again = run(world, "approve", approval, "--as", "alice", "--key", str(operators))
    assert again.returncode == 3
    assert again.stderr.startswith("chit approve: refused (already_decided): ")
    unknown = run(world, "approvals", "show", "apr_" + "b" * 26)
    assert unknown.returncode == 4 and "refused (unknown_approval)" in unknown.stderr
    nobody = run(world, "approve", approval, env={"CHIT_OPERATOR": ""})
    assert nobody.returncode == 2 and "--as NAME" in nobody.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "group_readable"])
def test_a_key_path_that_is_no_private_key_file_is_refused_at_once(
    world: World, operators: Path, tmp_path: Path, kind: str
) -> None:
    """A FIFO must not block the CLI waiting for a writer; a folder or a loose file is named."""
    approval, _token = _pending(world)
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(operators.read_bytes())
        path.chmod(0o640)
    out = run(world, "approve", approval, "--as", "alice", "--key", str(path))
    assert out.returncode == 2, out.stderr
    expected = "readable by others" if kind == "group_readable" else "is not a regular file"
    assert expected in out.stderr and "Traceback" not in out.stderr
    assert run_json(world, "approvals", "list")[0]["id"] == approval  # still pending
