"""Audit and graph against repository tricks beyond record tampering.

Each case came from an attack on a real repository: git features libgit2 ignores
(replace refs, grafts), commit headers chit never writes, planted references,
linked worktrees, weak public keys and hostile session ids.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pygit2
import pytest

from engine import git as vcs
from engine.audit import graph
from engine.audit.verify import verify_repository
from engine.auth import signkeys
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, land

GIT = shutil.which("git")


def public(world: World) -> dict[str, Any]:
    return signkeys.load_public_keys(signkeys.export_public_keys(world.home))


def checks(report: dict[str, Any], commit: str = "-") -> set[str]:
    return {f["check"] for f in report["findings"] if f["commit"] == commit}


def move_record(repo: pygit2.Repository, agent: str, old: str, new: str) -> None:
    """Copy the record filed under ``old`` to ``new`` (the attacker's bookkeeping)."""
    ref = f"refs/chit/provenance/{agent}"
    store = repo[repo.references[ref].target]
    blob = store.tree[f"{old[:2]}/{old[2:]}"].id
    root = repo.TreeBuilder(store.tree)
    fan = store.tree[new[:2]] if new[:2] in store.tree else None
    sub = repo.TreeBuilder(fan) if fan is not None else repo.TreeBuilder()
    sub.insert(new[2:], blob, pygit2.enums.FileMode.BLOB)
    root.insert(new[:2], sub.write(), pygit2.enums.FileMode.TREE)
    sig = pygit2.Signature("m", "m@example.com", 1_800_000_000, 0)
    repo.create_commit(ref, sig, sig, "move", root.write(), [store.id])


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def test_replace_refs_and_grafts_are_findings(world: World, engine: Engine) -> None:
    """Threat: ``refs/replace/<lane head>`` makes git show and merge a backdoored
    twin of a verified commit, while libgit2 (and so the audit) reads the original."""
    head = land(engine, world.mint(), "honest\n")
    repo = pygit2.Repository(str(world.repo))
    original = repo[head]
    builder = repo.TreeBuilder(original.tree)
    src = repo.TreeBuilder(original.tree["src"])
    src.insert("app.py", repo.create_blob(b"BACKDOOR\n"), pygit2.enums.FileMode.BLOB)
    builder.insert("src", src.write(), pygit2.enums.FileMode.TREE)
    twin = repo.create_commit(None, original.author, original.committer, original.message,
                              builder.write(), original.parent_ids)
    repo.references.create(f"refs/replace/{head}", twin)
    report = verify_repository(world.repo, public_keys=public(world))
    assert not report["ok"]
    assert checks(report) == {"refs"}
    assert any(f"refs/replace/{head}" in f["reason"] for f in report["findings"])
    repo.references.delete(f"refs/replace/{head}")
    assert verify_repository(world.repo, public_keys=public(world))["ok"]

    (Path(repo.path) / "info").mkdir(exist_ok=True)
    (Path(repo.path) / "info" / "grafts").write_text(f"{head}\n")
    report = verify_repository(world.repo, public_keys=public(world))
    assert checks(report) == {"refs"} and "grafts" in report["findings"][0]["reason"]


def test_a_symbolic_main_is_a_finding(world: World, engine: Engine) -> None:
    """Threat: ``main`` made a symbolic ref to a lane hides that lane's commits
    from the walk, so a forged commit on it is never checked."""
    land(engine, world.mint(agent="lead"), "x\n")
    repo = pygit2.Repository(str(world.repo))
    repo.references.create("refs/heads/main", "refs/heads/agent/lead", force=True)
    report = verify_repository(world.repo, public_keys=public(world))
    assert not report["ok"] and "refs" in checks(report)


def test_commit_headers_chit_never_writes_are_refused(world: World, engine: Engine) -> None:
    """Threat: a genuine commit re-made with a ``gpgsig`` (or ``encoding``) header
    gets a new id that the old record still describes field by field."""
    head = land(engine, world.mint(), "honest\n")
    repo = pygit2.Repository(str(world.repo))
    kind, raw = repo.odb.read(head)
    header, message = raw.split(b"\n\n", 1)
    for extra in (b"gpgsig -----BEGIN PGP SIGNATURE-----\n Approved-by: security\n "
                  b"-----END PGP SIGNATURE-----", b"encoding ISO-8859-1"):
        forged = repo.odb.write(kind, header + b"\n" + extra + b"\n\n" + message)
        move_record(repo, "alice", head, str(forged))
        repo.references.create(vcs.lane_ref("alice"), forged, force=True)
        report = verify_repository(world.repo, public_keys=public(world))
        assert checks(report, str(forged)) == {"record_commit"}, extra
        repo.references.create(vcs.lane_ref("alice"), pygit2.Oid(hex=head), force=True)
    assert verify_repository(world.repo, public_keys=public(world))["ok"]


def test_planted_refs_are_findings_not_crashes(world: World, engine: Engine) -> None:
    """Threat: one odd reference (symbolic, or at a blob) stops the audit or the
    graph for every agent instead of being reported."""
    token = world.mint()
    head = land(engine, token, "x\n")
    land(engine, world.mint(agent="bob"), "y\n", session="b1")
    repo = pygit2.Repository(str(world.repo))
    blob = repo.create_blob(b"not a commit")
    repo.references.create("refs/heads/agent/evil", blob)
    repo.references.create("refs/chit/provenance/alice", "refs/chit/provenance/bob", force=True)
    report = verify_repository(world.repo, public_keys=public(world))
    assert "record_missing" in checks(report, head)
    assert any("agent/evil" in f["reason"] for f in report["findings"])
    # The graph keeps working for everyone else.
    entries, unverified, _ = graph.collect(vcs.Repository(world.repo), public(world))
    assert {e.agent for e in entries} == {"bob"} and unverified == 1

    catalogs = repo.references["refs/chit/catalogs"].target
    repo.references.create("refs/chit/catalogs", blob, force=True)
    report = verify_repository(world.repo, ["agent/bob"], public_keys=public(world))
    assert {f["check"] for f in report["findings"]} == {"catalog_stored"}
    repo.references.create("refs/chit/catalogs", catalogs, force=True)


def test_the_graph_only_shows_commits_that_pass_the_audit(world: World, engine: Engine) -> None:
    """Threat: a commit re-made with another summary and author (record copied
    to it) shows up in provenance_graph as verified, under the forged text."""
    token = world.mint()
    head = land(engine, token, "x\n")
    repo = pygit2.Repository(str(world.repo))
    original = repo[head]
    ciso = pygit2.Signature("ciso", "ciso@example.com", original.author.time, 0)
    forged = repo.create_commit(
        None, ciso, ciso, "Security review passed\n" + original.message.split("\n", 1)[1],
        original.tree.id, original.parent_ids,
    )
    move_record(repo, "alice", head, str(forged))
    repo.references.create(vcs.lane_ref("alice"), forged, force=True)
    answer = call(engine, token, "provenance_graph", {"handle": str(forged)}, session="g")
    assert answer["error"]["error"] == "not_found"
    assert "Security review" not in json.dumps(answer)


def test_weak_public_keys_are_refused(world: World, engine: Engine, tmp_path: Path) -> None:
    """Threat: an identity (small-order) key slipped into the trusted keys file
    lets a record "signed" with R = identity, S = 0 verify."""
    doc = signkeys.export_public_keys(world.home)
    identity = base64.urlsafe_b64encode(bytes([1]) + bytes(31)).rstrip(b"=").decode()
    doc["keys"] = [*doc["keys"], {"kid": "weak", "alg": "ed25519", "created": 0,  # type: ignore[misc]
                                  "status": "active", "public": identity}]
    with pytest.raises(ValueError, match="small order"):
        signkeys.load_public_keys(doc)
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([*world.cli(), "audit", "verify", "--repo", str(world.repo),
                          "--keys", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "weak" in out.stderr and "Traceback" not in out.stderr
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    out = subprocess.run([*world.cli(), "audit", "verify", "--repo", str(world.repo),
                          "--keys", str(deep)], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr


@pytest.mark.parametrize("session", ["x\nChit-Agent: admin", "", "a b", "x" * 129, "-x", 5])
def test_hostile_session_ids_are_refused(world: World, engine: Engine, session: Any) -> None:
    """Threat: a session id carrying a newline forges a trailer on the commit
    (a separate engine takes session ids from the network)."""
    token = world.mint()
    answer = call(engine, token, "write_file", {"path": "src/a.py", "content": "a"}, session)
    assert answer["error"]["error"] == "invalid_argument"
    assert "agent/alice" not in {str(r) for r in pygit2.Repository(str(world.repo)).branches}


def test_engines_on_a_linked_worktree_share_the_lane_lock(world: World) -> None:
    """Threat: an engine opened on a linked worktree takes its lane locks in the
    worktree's own git directory, so it races an engine on the main checkout
    and corrupts the shared provenance ref."""
    assert GIT is not None
    linked = world.repo.parent / "linked"
    subprocess.run([GIT, "-C", str(world.repo), "worktree", "add", "-q", "--detach",
                    str(linked)], check=True, capture_output=True)
    token = world.mint()
    engines = [Engine(world.home, world.repo), Engine(world.home, linked)]
    errors: list[Any] = []

    def work(n: int) -> None:
        engine = engines[n % 2]
        for i in range(10):
            try:
                land(engine, token, f"{n} {i}\n", path=f"src/w{n}/f{i}.py", session=f"w{n}")
            except AssertionError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    report = verify_repository(world.repo, public_keys=public(world))
    assert report["ok"] and len(report["commits"]) == 40

