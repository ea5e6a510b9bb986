"""An engine whose repository names the organisation's remote: lanes, records and catalogs
reach it, an auditor verifies them from a mirror clone, and a remote that goes away
loses nothing (docs/deployment.md, "Lanes on the organisation's remote").

Real git everywhere: ``origin`` is a bare repository, the engine serves a
``git clone --bare`` of it, the auditor runs ``git clone --mirror``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from engine import admin
from engine.admin.seed import create_repository
from engine.service import Engine, RepoSpec
from tests.conftest import FILES
from tests.engine.engine_calls import call, ok

WAIT = 60.0  # seconds the background catch-up may take on a loaded machine (not a timing test)


class Setup:
    """A home, a bare ``origin`` on master and the engine's clone of it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        admin.init_home(self.home)
        seed = tmp / "seed"
        create_repository(seed, FILES, branch="master")
        self.origin = tmp / "origin.git"
        git("clone", "--quiet", "--bare", str(seed), str(self.origin))
        self.clone = tmp / "engine.git"
        git("clone", "--quiet", "--bare", str(self.origin), str(self.clone))

    def engine(self, remote: Path | None = None) -> Engine:
        url = os.fspath(self.origin if remote is None else remote)
        return Engine(self.home, [RepoSpec("app", self.clone, remote=url)])

    def mint(self, agent: str = "alice") -> str:
        return str(admin.mint_token(self.home, agent=agent, operations=["read", "write", "commit"],
                                    paths=["src/**"], ttl_seconds=900, repos=["app"])["token"])

    def chit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(self.home),
                               *args], capture_output=True, text=True, timeout=120, check=False)

    def keys(self) -> Path:
        path = self.tmp / "engine-keys.json"
        if not path.exists():
            done = self.chit("keys", "export-public", "--out", str(path))
            assert done.returncode == 0, done.stderr
        return path


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refs(path: Path, prefix: str = "refs/") -> dict[str, str]:
    repo = pygit2.Repository(str(path))
    return {n: str(repo.references[n].target) for n in repo.references
            if n.startswith(prefix) and isinstance(repo.references[n].target, pygit2.Oid)}


def chit_refs(path: Path) -> dict[str, str]:
    found = refs(path)
    return {n: v for n, v in found.items() if n.startswith(("refs/heads/agent/", "refs/chit/"))
            and not n.startswith("refs/chit/upstream/")}


def commit(engine: Engine, token: str, files: dict[str, str], message: str,
           session: str = "s") -> dict[str, Any]:
    for path, content in files.items():
        ok(call(engine, token, "write_file", {"path": path, "content": content}, session=session))
    return ok(call(engine, token, "commit", {"message": message}, session=session))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    yield Setup(tmp_path)


def test_commits_reach_the_remote_and_verify_from_a_mirror_clone(setup: Setup) -> None:
    token = setup.mint()
    with setup.engine() as engine:
        first = commit(engine, token, {"src/a.py": "a = 1\n"}, "one")
        second = commit(engine, token, {"src/b.py": "b = 1\n"}, "two")
        status = ok(call(engine, token, "status", session="s"))
    remote = refs(setup.origin)
    assert remote["refs/heads/agent/alice"] == second["commit"]
    assert chit_refs(setup.origin) == chit_refs(setup.clone)
    assert status["base_branch"] == "master"
    assert status["remote"] == {"url": os.fspath(setup.origin), "lane_behind": False,
                                "lanes_behind": 0, "checked": status["remote"]["checked"],
                                "error": None}
    assert second["parent"] == first["commit"]

    mirror = setup.tmp / "audit.git"
    git("clone", "--quiet", "--mirror", os.fspath(setup.origin), os.fspath(mirror))
    audit = setup.chit("audit", "verify", "--repo", str(mirror), "--keys", str(setup.keys()))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "verified: 2/2 commits on agent/alice" in audit.stdout


def test_a_clone_without_chit_refs_fails_and_says_why(setup: Setup) -> None:
    """Threat: an auditor reading "verified: 0/0" on a clone that holds nothing to verify,
    or every commit failing with no word that refs/chit/* was never fetched."""
    token = setup.mint()
    with setup.engine() as engine:
        commit(engine, token, {"src/a.py": "a = 1\n"}, "one")
    plain = setup.tmp / "plain"
    git("clone", "--quiet", os.fspath(setup.origin), os.fspath(plain))
    audit = setup.chit("audit", "verify", "--repo", str(plain), "--keys", str(setup.keys()))
    assert audit.returncode == 1
    assert "FAILED" in audit.stdout and "no lane (refs/heads/agent/*)" in audit.stdout
    assert "git clone --mirror" in audit.stdout
    git("-C", os.fspath(plain), "fetch", "--quiet", "origin",
        "+refs/heads/agent/*:refs/heads/agent/*")  # lanes, but no refs/chit/*
    audit = setup.chit("audit", "verify", "--repo", str(plain), "--keys", str(setup.keys()))
    assert audit.returncode == 1
    assert "refs/chit/provenance/alice is missing" in audit.stdout
    assert "refs/chit/catalogs is missing" in audit.stdout
    git("-C", os.fspath(plain), "fetch", "--quiet", "origin", "+refs/chit/*:refs/chit/*")
    audit = setup.chit("audit", "verify", "--repo", str(plain), "--keys", str(setup.keys()))
    assert audit.returncode == 1  # the commit's attestation is a note, not under refs/chit/
    assert "refs/notes/chit is missing" in audit.stdout
    git("-C", os.fspath(plain), "fetch", "--quiet", "origin", "refs/notes/chit:refs/notes/chit")
    audit = setup.chit("audit", "verify", "--repo", str(plain), "--keys", str(setup.keys()))
    assert audit.returncode == 0, audit.stdout  # the documented fetch is all it needed


def test_a_remote_gone_mid_run_loses_nothing_and_catches_up(setup: Setup) -> None:
    token, bob = setup.mint(), setup.mint("bob")
    away = setup.tmp / "away.git"
    made: list[str] = []
    with setup.engine() as engine:
        made.append(commit(engine, token, {"src/a.py": "a = 1\n"}, "one")["commit"])
        os.rename(setup.origin, away)
        for n in range(3):
            made.append(commit(engine, token, {f"src/n{n}.py": f"n = {n}\n"}, f"n{n}")["commit"])
        made.append(commit(engine, bob, {"src/bob.py": "b = 1\n"}, "bob", session="b")["commit"])
        status = ok(call(engine, token, "status", session="s"))
        assert status["remote"]["lane_behind"] is True and status["remote"]["lanes_behind"] == 2
        assert "origin.git" in status["remote"]["error"]
        doctor = setup.chit("doctor", "--repo", str(setup.clone), "--remote",
                            os.fspath(setup.origin), "--json")
        assert doctor.returncode == 1 and '"reachable": false' in doctor.stdout
        assert refs(setup.clone)["refs/heads/agent/alice"] == made[-2]  # landed locally
        os.rename(away, setup.origin)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and chit_refs(setup.origin) != chit_refs(setup.clone):
            time.sleep(0.1)
        status = ok(call(engine, token, "status", session="s"))
    assert chit_refs(setup.origin) == chit_refs(setup.clone)
    assert status["remote"]["lane_behind"] is False
    origin = pygit2.Repository(str(setup.origin))
    on_remote = {str(c.id) for lane in ("alice", "bob")
                 for c in origin.walk(origin.references[f"refs/heads/agent/{lane}"].target)}
    assert set(made) <= on_remote  # nothing lost
    doctor = setup.chit("doctor", "--repo", str(setup.clone), "--remote", os.fspath(setup.origin))
    assert doctor.returncode == 0, doctor.stdout
    mirror = setup.tmp / "audit.git"
    git("clone", "--quiet", "--mirror", os.fspath(setup.origin), os.fspath(mirror))
    audit = setup.chit("audit", "verify", "--repo", str(mirror), "--keys", str(setup.keys()))
    assert audit.returncode == 0 and "verified: 5/5 commits" in audit.stdout, audit.stdout
