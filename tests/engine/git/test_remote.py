"""Lanes on a remote: real bare repositories, real clones, the real ``git`` command.

Each engine repository is a ``git clone --bare`` of one ``origin``; its lanes
are pushed there with their provenance and catalog refs (engine/git/replica.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

import engine.git.replica as replica_module
from engine.errors import ConfigurationError, RepositoryError
from engine.git import Repository, StagedChange
from engine.git.reconcile import PARKED_PREFIX
from engine.limits import LIMITS
from tests.engine.git.remote_helpers import (
    CATALOGS,
    MASTER,
    clone,
    land,
    make_origin,
    open_engine_repo,
    refs_of,
    seal,
    started,
)
from tests.engine.git.repo_helpers import BASE_FILES, _code, _commit_files

LANE = "refs/heads/agent/alice"
RECORD = "refs/chit/provenance/alice"
WAIT = 60.0  # seconds a background catch-up may take on a loaded machine (not a timing test)

REJECT_HOOK = "#!/bin/sh\necho 'pushes are closed today' >&2\nexit 1\n"


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    make_origin(tmp_path / "origin.git")
    return tmp_path / "origin.git"


@pytest.fixture
def engine_clone(tmp_path: Path, origin: Path) -> Path:
    return clone(origin, tmp_path / "engine.git")


def _chit_refs(path: Path) -> dict[str, str]:
    return {k: v for k, v in refs_of(path).items()
            if k.startswith(("refs/heads/agent/", "refs/chit/"))
            and not k.startswith("refs/chit/upstream/")}


def _close_remote(origin: Path) -> None:
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(REJECT_HOOK)
    hook.chmod(0o755)


def _open_remote(origin: Path) -> None:
    (origin / "hooks" / "pre-receive").unlink()


def test_a_commit_reaches_the_remote_with_its_record_and_catalogs(
    origin: Path, engine_clone: Path
) -> None:
    vcs = open_engine_repo(engine_clone, origin)
    assert vcs.base == "master"
    first = land(vcs, "alice", {"src/a.py": b"a\n"})
    second = land(vcs, "alice", {"src/b.py": b"b\n"}, catalog=b"catalog-2")
    remote, local = refs_of(origin), refs_of(engine_clone)
    assert remote[LANE] == local[LANE] == str(second)
    assert remote[RECORD] == local[RECORD]
    assert remote[CATALOGS] == local[CATALOGS]
    assert pygit2.Repository(str(origin))[second].peel(pygit2.Commit).parent_ids == [first]
    audited = Repository(origin)
    for made in (first, second):
        assert audited.provenance_record("alice", str(made)) is not None
    report = vcs.remote_report("alice")
    assert report is not None and report["pending"] == [] and report["error"] is None
    assert report["lane_pending"] is False
    assert "refs/chit/upstream/heads/master" not in refs_of(origin)  # never pushed


def test_a_remote_never_shows_a_lane_commit_without_its_record(
    origin: Path, engine_clone: Path
) -> None:
    """Threat: an auditor finding a lane commit on the remote whose provenance is not
    there (pushed separately, one failed): the push is atomic."""
    vcs = open_engine_repo(engine_clone, origin)
    land(vcs, "alice", {"src/a.py": b"a\n"})
    hook = origin / "hooks" / "update"  # refuses only provenance refs, one ref at a time
    hook.write_text('#!/bin/sh\ncase "$1" in refs/chit/provenance/*) exit 1;; esac\nexit 0\n')
    hook.chmod(0o755)
    before = refs_of(origin)
    second = land(vcs, "alice", {"src/b.py": b"b\n"})
    assert refs_of(origin) == before  # neither the lane nor its record moved
    assert refs_of(engine_clone)[LANE] == str(second)  # the commit stands locally
    hook.unlink()
    with started(vcs) as replica:
        assert replica.wait_idle(WAIT)
    assert refs_of(origin)[LANE] == str(second)
    assert refs_of(origin)[RECORD] == refs_of(engine_clone)[RECORD]


def test_a_refusing_remote_keeps_commits_local_and_catches_up(
    origin: Path, engine_clone: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vcs = open_engine_repo(engine_clone, origin)
    land(vcs, "alice", {"src/a.py": b"a\n"})
    _close_remote(origin)
    with caplog.at_level(logging.WARNING, logger="chit.engine.remote"):
        made = [land(vcs, "alice", {f"src/{n}.py": n.encode()}) for n in "bcd"]
    assert refs_of(engine_clone)[LANE] == str(made[-1])
    assert refs_of(origin)[LANE] != str(made[-1])
    report = vcs.remote_report("alice")
    assert report is not None and report["lane_pending"] is True
    assert report["pending"][0]["lane"] == "agent/alice"
    assert "pushes are closed today" in str(report["error"])
    assert any("pushes are closed today" in r.getMessage() for r in caplog.records)
    _open_remote(origin)
    with started(vcs) as replica:
        assert replica.wait_idle(WAIT)
    assert _chit_refs(origin) == _chit_refs(engine_clone)
    walker = pygit2.Repository(str(origin)).walk(pygit2.Oid(hex=refs_of(origin)[LANE]))
    assert {c.id for c in walker} >= set(made)  # nothing lost
    report = vcs.remote_report("alice")
    assert report is not None and report["pending"] == [] and report["error"] is None


def test_an_unreachable_remote_keeps_commits_local_and_catches_up(
    tmp_path: Path, origin: Path, engine_clone: Path
) -> None:
    vcs = open_engine_repo(engine_clone, origin)
    land(vcs, "alice", {"src/a.py": b"a\n"})
    away = tmp_path / "away.git"
    os.rename(origin, away)  # the remote is gone
    with started(vcs) as replica:
        made = [land(vcs, "alice", {f"src/{n}.py": n.encode()}) for n in "bc"]
        made.append(land(vcs, "bob", {"src/bob.py": b"bob\n"}))
        report = vcs.remote_report()
        assert report is not None and {p["lane"] for p in report["pending"]} == {
            "agent/alice", "agent/bob"}
        assert report["error"] and "origin.git" in report["error"]
        os.rename(away, origin)  # it comes back; the background retries
        assert replica.wait_idle(WAIT)
    assert _chit_refs(origin) == _chit_refs(engine_clone)
    assert refs_of(origin)["refs/heads/agent/bob"] == str(made[-1])


def test_two_engines_on_one_remote_never_fork_a_lane(tmp_path: Path, origin: Path) -> None:
    """Each engine holds its own clone; one pushes, the other's next commit finds the
    remote's lane moved, fetches it, merges onto it and pushes again."""
    one = open_engine_repo(clone(origin, tmp_path / "one.git"), origin)
    two = open_engine_repo(clone(origin, tmp_path / "two.git"), origin)
    made = []
    for n in range(4):
        made.append(land(one, "alice", {f"src/one{n}.py": b"1\n"}))
        made.append(land(two, "alice", {f"src/two{n}.py": b"2\n"}, catalog=b"catalog-2"))
    remote = pygit2.Repository(str(origin))
    head = remote.references[LANE].peel(pygit2.Commit)
    history = []
    while head.parent_ids and head.id != remote.references[MASTER].target:
        history.append(head.id)
        head = head.parents[0]
    assert history == list(reversed(made))  # one line, every commit in order
    assert refs_of(tmp_path / "two.git")[LANE] == refs_of(origin)[LANE]
    for n in range(4):
        assert two.read_at(str(made[-1]), f"src/one{n}.py") == b"1\n"
        assert two.read_at(str(made[-1]), f"src/two{n}.py") == b"2\n"
    tree = remote[refs_of(origin)[CATALOGS]].peel(pygit2.Tree)
    assert len(tree) == 2  # both engines' catalogs, merged


def test_a_lane_that_went_two_ways_parks_the_local_commits(tmp_path: Path, origin: Path) -> None:
    """One engine could not reach the remote while another pushed to the same lane: the
    remote's lane wins and the local commits are kept, and pushed, under
    refs/chit/parked/<agent>/<id>. Nothing is lost; the remote's lane never forks."""
    link = tmp_path / "link.git"
    link.symlink_to(origin)
    cut = open_engine_repo(clone(origin, tmp_path / "cut.git"), link)
    other = open_engine_repo(clone(origin, tmp_path / "other.git"), origin)
    link.unlink()
    alone = land(cut, "alice", {"src/cut.py": b"cut\n"})
    theirs = land(other, "alice", {"src/other.py": b"other\n"})
    link.symlink_to(origin)
    with started(cut) as replica:
        assert replica.wait_idle(WAIT)
    remote = refs_of(origin)
    assert remote[LANE] == str(theirs)
    assert remote[f"{PARKED_PREFIX}alice/{alone}"] == str(alone)
    assert refs_of(tmp_path / "cut.git")[LANE] == str(theirs)
    audited = Repository(origin)
    for made in (alone, theirs):
        assert audited.provenance_record("alice", str(made)) is not None
    # The next commit of the cut engine lands on the remote's lane.
    after = land(cut, "alice", {"src/after.py": b"after\n"})
    assert pygit2.Repository(str(origin))[after].peel(pygit2.Commit).parent_ids == [theirs]


def test_a_new_lane_starts_from_the_remote_base(tmp_path: Path, origin: Path,
                                                engine_clone: Path) -> None:
    base = pygit2.Repository(str(origin))
    old = base.references[MASTER].target
    moved = _commit_files(base, MASTER, {**BASE_FILES, "docs/new.md": (0o100644, b"new\n")},
                          [old], "the organisation moves on\n")
    vcs = open_engine_repo(engine_clone, origin)
    assert refs_of(engine_clone)[MASTER] == str(old)  # the clone's master is stale
    lane = land(vcs, "alice", {"src/a.py": b"a\n"})
    assert base[lane].peel(pygit2.Commit).parent_ids == [moved]
    assert refs_of(engine_clone)[MASTER] == str(old)  # still never written
    assert vcs.base_head().id == moved
    assert [c.id for c in vcs.lane_commits("alice")] == [lane]


def test_lanes_left_behind_are_pushed_when_the_engine_starts(
    origin: Path, engine_clone: Path
) -> None:
    plain = Repository(engine_clone)  # no remote configured yet
    staged = StagedChange()
    plain.stage_write("alice", staged, "src/a.py", b"a\n")
    lane = plain.commit("alice", staged, "w\n", author_name="a", author_email="a@x", time=1)
    vcs = open_engine_repo(engine_clone, origin)
    with started(vcs) as replica:
        assert replica.wait_idle(WAIT)
    assert refs_of(origin)[LANE] == str(lane)


def test_compare_says_which_lanes_are_behind_and_why(origin: Path, engine_clone: Path) -> None:
    vcs = open_engine_repo(engine_clone, origin)
    land(vcs, "alice", {"src/a.py": b"a\n"})
    _close_remote(origin)
    land(vcs, "alice", {"src/b.py": b"b\n"})
    land(vcs, "bob", {"src/c.py": b"c\n"})
    assert vcs.remote is not None
    found = vcs.remote.compare()
    assert found["reachable"] and found["behind"] == ["agent/alice", "agent/bob"]
    assert {(x["lane"], x["state"], x["commits"]) for x in found["lanes"]} == {
        ("agent/alice", "behind", 1), ("agent/bob", "behind", 1)}
    assert found["would_push"] is True  # a dry run does not run the refusing hook
    shutil.rmtree(origin)
    gone = vcs.remote.compare()
    assert not gone["reachable"] and gone["error"]


def test_a_password_in_the_url_never_reaches_reports_or_logs(
    engine_clone: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Threat: the remote's password, embedded in its URL, printed in a status or a log."""
    url = "http://deploy:Pa55word-42@127.0.0.1:9/org/app.git"  # port 9: nothing listens
    vcs = Repository(engine_clone, remote=url, pushed_stores=(CATALOGS,))
    with caplog.at_level(logging.DEBUG):
        land(vcs, "alice", {"src/a.py": b"a\n"})
        report = vcs.remote_report("alice")
    assert report is not None and report["lane_pending"]
    text = repr(report) + repr(vcs.remote) + caplog.text
    assert "Pa55word-42" not in text and "deploy:" not in text
    assert report["url"] == "http://***@127.0.0.1:9/org/app.git"


def test_a_remote_helper_url_is_refused(engine_clone: Path) -> None:
    """Threat: a configured remote that makes git run a command."""
    with pytest.raises(ConfigurationError):
        Repository(engine_clone, remote="ext::sh -c id")


def test_an_empty_clone_takes_its_base_from_the_remote(tmp_path: Path, origin: Path) -> None:
    empty = pygit2.init_repository(str(tmp_path / "empty.git"), bare=True, initial_head="master")
    vcs = open_engine_repo(Path(empty.path), origin)
    assert vcs.base_head().id == pygit2.Repository(str(origin)).references[MASTER].target
    with pytest.raises(ConfigurationError, match="trunk"):
        open_engine_repo(Path(empty.path), origin, base="trunk")


def test_a_lane_that_keeps_moving_on_the_remote_refuses_the_commit(
    tmp_path: Path, origin: Path, engine_clone: Path
) -> None:
    """Another engine pushes to the lane between each of this commit's attempts: after
    LIMITS.remote_push_attempts the commit is refused with conflict, nothing of it is
    committed anywhere, and the staged change is kept for the next try."""
    vcs = open_engine_repo(engine_clone, origin)
    land(vcs, "alice", {"src/a.py": b"a\n"})
    rival = open_engine_repo(clone(origin, tmp_path / "rival.git"), origin)
    attempts = 0

    def sealed_while_the_rival_commits(facts: dict[str, Any]) -> bytes:
        nonlocal attempts
        attempts += 1
        land(rival, "alice", {f"src/r{attempts}.py": b"r\n"})
        return seal(facts)

    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/z.py", b"z\n")
    with pytest.raises(RepositoryError) as exc:
        vcs.commit("alice", staged, "z\n", author_name="a", author_email="a@x", time=1,
                   merge=True, seal=sealed_while_the_rival_commits)
    assert _code(exc) == "conflict" and attempts == LIMITS.remote_push_attempts
    assert staged.changes == {"src/z.py": b"z\n"}
    for path in (engine_clone, origin):
        tree = pygit2.Repository(str(path))[refs_of(path)[LANE]].peel(pygit2.Tree)
        assert "z.py" not in {e.name for e in tree["src"].peel(pygit2.Tree)}
    # The next try, with nobody in the way, lands on the rival's lane.
    landed = vcs.commit("alice", staged, "z\n", author_name="a", author_email="a@x", time=1,
                        merge=True, seal=seal)
    assert refs_of(origin)[LANE] == str(landed)


def test_lanes_another_process_left_behind_are_found_and_pushed(
    origin: Path, engine_clone: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine process that stopped while the remote was away took its pending lanes
    with it; a running engine's periodic comparison finds and pushes them."""
    monkeypatch.setattr(replica_module, "LIMITS",
                        dataclasses.replace(LIMITS, remote_check_seconds=0.2))
    vcs = open_engine_repo(engine_clone, origin)
    with started(vcs) as replica:
        assert replica.wait_idle(WAIT)
        other = Repository(engine_clone)  # another process's commit that never got pushed
        staged = StagedChange()
        other.stage_write("carol", staged, "src/c.py", b"c\n")
        lane = other.commit("carol", staged, "c\n", author_name="c", author_email="c@x", time=1)
        deadline = time.monotonic() + WAIT
        while refs_of(origin).get("refs/heads/agent/carol") != str(lane):
            assert time.monotonic() < deadline, "the left-behind lane was never pushed"
            time.sleep(0.05)


def test_two_engines_adding_catalogs_at_once_lose_nothing(tmp_path: Path, origin: Path) -> None:
    """Threat: two engines with no shared store racing to move the shared catalog store on
    the remote, one push refused, and its commit left behind or parked as a fork."""
    engines = [open_engine_repo(clone(origin, tmp_path / f"e{k}.git"), origin) for k in range(2)]
    COMMITS = 16
    made: list[list[pygit2.Oid]] = [[], []]
    failures: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for n in range(COMMITS):
                for _ in range(20):  # a conflict means "the lane kept moving": try again
                    try:
                        made[k].append(land(engines[k], f"agent{k}", {f"src/{k}-{n}.py": b"x\n"},
                                            catalog=f"catalog {k} {n}".encode()))
                        break
                    except RepositoryError as exc:
                        if exc.code != "conflict":
                            raise
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    remote = refs_of(origin)
    for k in range(2):
        assert remote[f"refs/heads/agent/agent{k}"] == str(made[k][-1])
        assert len(made[k]) == COMMITS
    assert not [r for r in remote if r.startswith(PARKED_PREFIX)]
    catalogs = pygit2.Repository(str(origin))[remote[CATALOGS]].peel(pygit2.Tree)
    assert len(catalogs) == 2 * COMMITS  # every engine's every catalog
