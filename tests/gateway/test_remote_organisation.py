"""Two engines, as on two hosts, each with its own clone of one remote, on one PostgreSQL.

Real ``chit engine serve`` processes, each with its own home (the distributed
keyring and policy) whose ``engine.toml`` names its clone and the shared
``origin`` (a bare repository), on one PostgreSQL store started by the tests.
Sixteen sessions, eight per engine, commit on two shared lanes.

Threat: two hosts forking a lane on the organisation's remote (each pushing its
own history), or a commit answered to an agent that never reaches the remote,
or a lane commit there whose provenance an auditor cannot check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pygit2

from engine import admin
from engine.admin.seed import create_repository
from gateway.remote_engine import RemoteEngine
from tests.conftest import FILES
from tests.gateway.mcp_client import engine_server

SESSIONS_PER_ENGINE = 8
COMMITS_PER_SESSION = 4
AGENTS = ("alice", "bob")


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _home_for(source: Path, home: Path, clone: Path, origin: Path) -> Path:
    if source != home:
        shutil.copytree(source, home)  # the keyring and policy the operator distributes
    (home / "engine.toml").write_text(
        f'[[repo]]\nname = "app"\npath = "{clone}"\nremote = "{origin}"\n', encoding="utf-8")
    os.chmod(home / "engine.toml", 0o600)
    return home


def test_two_engines_with_their_own_clones_never_fork_a_lane(
    tmp_path: Path, postgres_url: str
) -> None:
    seed = tmp_path / "seed"
    create_repository(seed, FILES, branch="master")
    origin = tmp_path / "origin.git"
    _git("clone", "--quiet", "--bare", str(seed), str(origin))
    clones = [tmp_path / "host-a.git", tmp_path / "host-b.git"]
    for clone in clones:
        _git("clone", "--quiet", "--bare", str(origin), str(clone))
    home_a = tmp_path / "home-a"
    admin.init_home(home_a)
    homes = [_home_for(home_a, home_a, clones[0], origin),
             _home_for(home_a, tmp_path / "home-b", clones[1], origin)]
    tokens = {a: str(admin.mint_token(home_a, agent=a, operations=["read", "write", "commit"],
                                      paths=["src/**"], ttl_seconds=900,
                                      repos=["app"])["token"]) for a in AGENTS}
    landed: dict[str, list[str]] = {a: [] for a in AGENTS}
    answered: set[str] = set()
    guard = threading.Lock()
    errors: list[Any] = []
    state = ("--state", postgres_url, "--workers", "1")
    with engine_server(homes[0], None, *state) as a, engine_server(homes[1], None, *state) as b:

        def session(k: int) -> None:
            agent = AGENTS[k % 2]
            token = tokens[agent]
            server = (a, b)[(k // 2) % 2]  # each engine: 8 sessions, 4 per lane
            with RemoteEngine(server.url) as engine:
                listed = engine.offer(token).catalog_hash
                for n in range(COMMITS_PER_SESSION):
                    path = f"src/{agent}/s{k}-{n}.txt"
                    wrote = engine.invoke(token, "write_file",
                                          {"path": path, "content": f"{k} {n}\n"},
                                          session=f"c{k}", offered_catalog_hash=listed)
                    if not wrote.ok:
                        errors.append(wrote)
                        return
                    for _ in range(200):
                        got = engine.invoke(token, "commit", {"message": f"s{k} c{n}"},
                                            session=f"c{k}", offered_catalog_hash=listed)
                        if got.ok or got.code != "conflict":
                            break
                    if not got.ok:
                        errors.append(got)
                        return
                    with guard:
                        landed[agent].append(path)
                        answered.add(got.result["commit"])

        threads = [threading.Thread(target=session, args=(k,))
                   for k in range(2 * SESSIONS_PER_ENGINE)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    for server in (a, b):  # no push failed, nothing was parked
        assert "is not on" not in server.output() and "went two ways" not in server.output()
    remote = pygit2.Repository(str(origin))
    master = remote.references["refs/heads/master"].target
    per_lane = SESSIONS_PER_ENGINE * COMMITS_PER_SESSION
    on_remote: set[str] = set()
    for agent in AGENTS:
        head = remote.references[f"refs/heads/agent/{agent}"].peel(pygit2.Commit)
        line = []
        while head.id != master:  # one line back to master: no merge, no fork
            assert len(head.parent_ids) == 1
            line.append(head)
            head = head.parents[0]
        assert len(line) == per_lane  # every commit of the lane, none lost
        on_remote |= {str(c.id) for c in line}
        tree = line[0].tree
        for path in landed[agent]:
            assert _has(tree, path), path
        for clone in clones:  # each host's lane is the remote's or behind it, never apart
            local = pygit2.Repository(str(clone)).references[f"refs/heads/agent/{agent}"].target
            assert str(local) in {str(c.id) for c in line}
    assert answered == on_remote  # every commit answered to an agent is on the remote
    assert not [r for r in remote.references if r.startswith("refs/chit/parked/")]
    mirror = tmp_path / "audit.git"
    _git("clone", "--quiet", "--mirror", str(origin), str(mirror))
    keys = tmp_path / "engine-keys.json"
    chit = [sys.executable, "-m", "gateway.cli", "--home", str(home_a)]
    subprocess.run([*chit, "keys", "export-public", "--out", str(keys)], check=True,
                   capture_output=True)
    audit = subprocess.run([*chit, "audit", "verify", "--repo", str(mirror), "--keys", str(keys)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert f"verified: {2 * per_lane}/{2 * per_lane} commits" in audit.stdout


def _has(tree: pygit2.Tree, path: str) -> bool:
    try:
        tree[path]
    except KeyError:
        return False
    return True
