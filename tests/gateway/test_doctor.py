"""``chit doctor``: the home, the store, a repository, and whether its remote has every lane.

Real git: a bare ``origin``, the engine's ``git clone --bare`` of it, commits made
through the engine's git floor (which pushes them), a remote that refuses pushes
(a ``pre-receive`` hook) or is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine import admin
from tests.engine.git.remote_helpers import clone, land, make_origin, open_engine_repo


def _doctor(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), "doctor",
                           *args], capture_output=True, text=True, timeout=120, check=False)


def test_doctor_says_which_lanes_the_remote_lacks_and_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    admin.init_home(home)
    make_origin(tmp_path / "origin.git")
    origin = tmp_path / "origin.git"
    engine_clone = clone(origin, tmp_path / "engine.git")
    vcs = open_engine_repo(engine_clone, origin)
    land(vcs, "alice", {"src/a.py": b"a\n"})
    args = ("--repo", str(engine_clone), "--remote", os.fspath(origin))

    healthy = _doctor(home, *args)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "base master" in healthy.stdout and "doctor: all good" in healthy.stdout

    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'quota exceeded' >&2\nexit 1\n")
    hook.chmod(0o755)
    land(vcs, "alice", {"src/b.py": b"b\n"})
    land(vcs, "alice", {"src/c.py": b"c\n"})
    behind = _doctor(home, *args)
    assert behind.returncode == 1
    assert "behind: agent/alice (2 commits not on the remote)" in behind.stdout
    assert "needs attention" in behind.stdout
    report = json.loads(_doctor(home, *args, "--json").stdout)
    [repo] = report["repositories"]
    assert repo["remote"]["behind"] == ["agent/alice"] and not repo["ok"]

    os.rename(origin, tmp_path / "gone.git")
    gone = _doctor(home, *args)
    assert gone.returncode == 1 and "unreachable" in gone.stdout


def test_doctor_never_prints_a_password_of_the_remote_url(tmp_path: Path) -> None:
    """Threat: an operator's diagnostic printing the credentials embedded in a remote URL."""
    home = tmp_path / "home"
    admin.init_home(home)
    make_origin(tmp_path / "origin.git")
    engine_clone = clone(tmp_path / "origin.git", tmp_path / "engine.git")
    url = "https://ci-bot:T0ps3cr3t-value@127.0.0.1:9/org/app.git"  # nothing listens there
    for extra in ((), ("--json",)):
        out = _doctor(home, "--repo", str(engine_clone), "--remote", url, *extra)
        assert out.returncode == 1
        text = out.stdout + out.stderr
        assert "T0ps3cr3t-value" not in text and "ci-bot" not in text
        assert "https://***@127.0.0.1:9/org/app.git" in text


def test_doctor_checks_the_home_and_a_repository_without_a_remote(tmp_path: Path) -> None:
    home = tmp_path / "home"
    missing = _doctor(home)
    assert missing.returncode == 1 and "FAIL home" in missing.stdout
    admin.init_home(home)
    make_origin(tmp_path / "r.git")
    plain = _doctor(home, "--repo", str(tmp_path / "r.git"))
    assert plain.returncode == 0, plain.stdout
    assert "base master" in plain.stdout
    assert [line for line in plain.stdout.splitlines() if " policy:" in line] == [
        "ok   policy: valid"]  # once, not again as a sign
    wrong = _doctor(home, "--repo", str(tmp_path / "r.git"), "--base", "trunk")
    assert wrong.returncode == 1 and "trunk" in wrong.stdout


def test_doctor_examines_the_repositories_of_engine_toml(tmp_path: Path) -> None:
    home = tmp_path / "home"
    admin.init_home(home)
    make_origin(tmp_path / "origin.git")
    origin = tmp_path / "origin.git"
    engine_clone = clone(origin, tmp_path / "engine.git")
    (home / "engine.toml").write_text(
        f'[[repo]]\nname = "app"\npath = "{engine_clone}"\nbase = "master"\n'
        f'remote = "{origin}"\n', encoding="utf-8")
    (home / "engine.toml").chmod(0o600)
    land(open_engine_repo(engine_clone, origin), "alice", {"src/a.py": b"a\n"})
    report = json.loads(_doctor(home, "--json").stdout)
    [repo] = report["repositories"]
    assert (repo["name"], repo["base"], repo["ok"]) == ("app", "master", True)
    assert repo["remote"]["lanes"] == [{"lane": "agent/alice", "state": "level", "commits": 0}]
    (home / "engine.toml").write_text('[[repo]]\nname = "app"\n', encoding="utf-8")
    broken = _doctor(home)
    assert broken.returncode == 1 and "FAIL engine.toml" in broken.stdout


def test_doctor_fails_a_policy_naming_an_approver_the_store_does_not_know(
    tmp_path: Path,
) -> None:
    """An engine refuses such a policy; doctor must not call it valid (it did)."""
    home = tmp_path / "home"
    admin.init_home(home)
    admin.add_operator(home, "alice")
    policy = home / "policy.toml"
    policy.write_text(policy.read_text() + '\n[[approval]]\ntools = ["commit"]\n'
                      'approvers = ["alice"]\nttl = 600\n')
    assert _doctor(home).returncode == 0
    removed = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home),
                              "operators", "remove", "alice"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert removed.returncode == 0 and "warning:" in removed.stderr  # the engine would refuse
    gone = _doctor(home)
    assert gone.returncode == 1, gone.stdout
    assert "FAIL policy" in gone.stdout and "alice" in gone.stdout


def test_doctor_repo_takes_a_name_of_engine_toml_or_a_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    admin.init_home(home)
    make_origin(tmp_path / "origin.git")
    origin = tmp_path / "origin.git"
    engine_clone = clone(origin, tmp_path / "engine.git")
    (home / "engine.toml").write_text(
        f'[[repo]]\nname = "app"\npath = "{engine_clone}"\nbase = "master"\n'
        f'remote = "{origin}"\n', encoding="utf-8")
    (home / "engine.toml").chmod(0o600)
    named = _doctor(home, "--repo", "app", "--json")
    assert named.returncode == 0, named.stdout + named.stderr
    [repo] = json.loads(named.stdout)["repositories"]
    assert (repo["name"], repo["base"], repo["error"]) == ("app", "master", None)
    assert repo["remote"] is not None  # the table's remote was used
    by_path = _doctor(home, "--repo", str(engine_clone), "--json")
    assert by_path.returncode == 0, by_path.stdout + by_path.stderr
    [repo] = json.loads(by_path.stdout)["repositories"]
    assert repo["name"] == str(engine_clone) and repo["remote"] is None
    unknown = _doctor(home, "--repo", "nope")
    assert unknown.returncode == 2
    assert "no [[repo]]" in unknown.stderr and "Traceback" not in unknown.stderr
