"""Tests for engine/git/refs.py: lane names, revisions, writer locks and compare-and-swap."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

import pygit2
import pytest

from engine.errors import InvalidRequestError, RepositoryError
from engine.git import MAIN, MODE_FILE, Repository, StagedChange, lane_ref
from engine.limits import LIMITS
from engine.state import open_store
from tests.engine.git.repo_helpers import _code, _commit, _commit_files, _lane_head

# -- lanes --------------------------------------------------------------------


def test_lane_ref_shape() -> None:
    assert lane_ref("alice") == "refs/heads/agent/alice"
    for bad in ["", "a/b", "-x", "a..b", "a b", "x.lock", "a@{1}"]:
        with pytest.raises(ValueError):
            lane_ref(bad)


# -- resolve ------------------------------------------------------------------


@pytest.mark.parametrize(
    "rev",
    [
        "-x",
        "--output=/tmp/x",
        "main..x",
        "main...agent/a",
        "HEAD@{1}",
        "@{-1}",
        "main^",
        "main~1",
        "main:README.md",
        ":/fix",
        "main ",
        "ma in",
        "main\0",
        "main\n",
        "",
        "refs/tags/v1",
        "refs/remotes/origin/main",
        "a" * 300,
        "x.lock",
        "main/",
    ],
)
def test_resolve_refuses_revision_syntax(vcs: Repository, rev: str) -> None:
    # Threat: agent strings reaching git as options or revision expressions.
    with pytest.raises(InvalidRequestError) as exc:
        vcs.resolve(rev)
    assert _code(exc) == "invalid_argument"


def test_resolve_names_and_hex_prefixes(vcs: Repository, git_repo: pygit2.Repository) -> None:
    main = git_repo.references[MAIN].target
    lane = _commit_files(git_repo, lane_ref("a"), {"x": (MODE_FILE, b"x")}, [main])
    hex_main = str(main)
    assert vcs.resolve("main").id == main
    assert vcs.resolve("refs/heads/main").id == main
    assert vcs.resolve("agent/a").id == lane
    assert vcs.resolve("refs/heads/agent/a").id == lane
    assert vcs.resolve(hex_main).id == main
    assert vcs.resolve(hex_main[:7]).id == main
    assert vcs.resolve(hex_main[:12].upper()).id == main
    for unknown in ["nope", "agent/zz", "0000000", "refs/heads/nope"]:
        with pytest.raises(RepositoryError) as exc:
            vcs.resolve(unknown)
        assert _code(exc) == "not_found"
    blob = git_repo.create_blob(b"not a commit")
    with pytest.raises(RepositoryError):
        vcs.resolve(str(blob))


def test_resolve_short_hex_is_only_a_branch_name(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    short = str(git_repo.references[MAIN].target)[:6]
    with pytest.raises(RepositoryError) as exc:
        vcs.resolve(short)
    assert _code(exc) == "not_found"


# -- locks and compare-and-swap -----------------------------------------------


def test_locked_lane_is_a_conflict_and_changes_nothing(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    # Another process holding git's ref lock (a .lock file) must win.
    seed = StagedChange()
    vcs.stage_write("alice", seed, "seed.txt", b"s")
    head = _commit(vcs, "alice", seed)
    lock = Path(git_repo.path) / "refs" / "heads" / "agent" / "alice.lock"
    lock.write_bytes(b"")
    try:
        vcs.stage_write("alice", seed, "more.txt", b"m")
        before = StagedChange(seed.base, dict(seed.changes), dict(seed.modes))
        with pytest.raises(RepositoryError) as exc:
            _commit(vcs, "alice", seed)
        assert _code(exc) == "conflict"
        assert seed == before
        assert _lane_head(git_repo, "alice") == head
    finally:
        lock.unlink()
    _commit(vcs, "alice", seed)


def _age(path: Path, seconds: float) -> None:
    """Set ``path``'s times ``seconds`` in the past (not through a link)."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


STALE = LIMITS.stale_ref_lock_seconds + 5


@pytest.mark.parametrize("store", [False, True], ids=["lane", "store"])
def test_a_stale_ref_lock_is_removed_and_a_fresh_one_refuses(
    vcs: Repository,
    git_repo: pygit2.Repository,
    store: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Threat: a writer killed holding git's lock on a lane or on ``refs/chit/*``
    wedges every later update of it for good; or a live writer's fresh lock is
    broken."""
    ref = "refs/chit/catalogs" if store else lane_ref("alice")
    lock = Path(git_repo.path) / (ref + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_bytes(b"")  # what a writer leaves when it dies holding the lock
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")

    def update() -> None:
        if store:
            vcs.put_blob_in_store(ref, "ab" * 32, b"entry")
        else:
            _commit(vcs, "alice", staged)

    with pytest.raises(RepositoryError) as exc:
        update()  # a fresh lock: a writer may be at work
    assert _code(exc) == "conflict"
    assert lock.exists() and git_repo.references.get(ref) is None
    _age(lock, STALE)
    with caplog.at_level(logging.WARNING, logger="chit.engine"):
        update()
    assert not lock.exists()
    assert git_repo.references.get(ref) is not None
    assert any(ref in r.getMessage() and "removed" in r.getMessage() for r in caplog.records)


def test_a_stale_lock_that_is_a_link_or_behind_one_is_never_removed(
    vcs: Repository, git_repo: pygit2.Repository, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Threat: a link planted at a lock file's name, or at a folder on its way,
    makes chit delete a file elsewhere."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    lanes = Path(git_repo.path) / "refs" / "heads" / "agent"
    lanes.mkdir(parents=True)
    link = lanes / "alice.lock"
    link.symlink_to(victim)
    _age(link, STALE)
    _age(victim, STALE)
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    with caplog.at_level(logging.WARNING, logger="chit.engine"), pytest.raises(
        RepositoryError
    ) as exc:
        _commit(vcs, "alice", staged)
    assert _code(exc) == "conflict"
    assert link.is_symlink() and victim.read_bytes() == b"keep"
    assert any(lane_ref("alice") in r.getMessage() for r in caplog.records)

    # A folder on the way is a link: the lock behind it stays.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stale = elsewhere / "catalogs.lock"
    stale.write_bytes(b"")
    _age(stale, STALE)
    (Path(git_repo.path) / "refs" / "chit").symlink_to(elsewhere)
    with pytest.raises(RepositoryError) as exc:
        vcs.put_blob_in_store("refs/chit/catalogs", "ab" * 32, b"entry")
    assert _code(exc) == "conflict"
    assert stale.exists()


def test_the_shared_lane_lock_does_not_depend_on_where_the_repository_is(
    postgres_url: str, git_repo: pygit2.Repository, tmp_path: Path
) -> None:
    """Threat: hosts that mount one shared repository at different paths take
    different store locks on one lane, so their commits race."""
    stores = [open_store(tmp_path / f"home-{n}", postgres_url) for n in range(2)]
    try:
        here = Path(git_repo.path)
        there = tmp_path / "mounted-elsewhere.git"  # the same repository, another path
        shutil.copytree(here, there)
        hosts = [
            Repository(path, shared_lock=store.lane_lock)
            for path, store in zip((here, there), stores, strict=True)
        ]
        ref = lane_ref("alice")
        held, release, entered = threading.Event(), threading.Event(), threading.Event()

        def first() -> None:
            with hosts[0]._ref_locks.hold(ref):
                held.set()
                release.wait(30)

        def second() -> None:
            with hosts[1]._ref_locks.hold(ref):
                entered.set()

        threads = [threading.Thread(target=first, daemon=True)]
        threads[0].start()
        assert held.wait(30)
        threads.append(threading.Thread(target=second, daemon=True))
        threads[1].start()
        assert not entered.wait(0.5), "the other host's writer went ahead"
        release.set()
        assert entered.wait(30), "the lane stayed locked after its holder let go"
        for thread in threads:
            thread.join(30)
    finally:
        for store in stores:
            store.close()


def test_chit_folder_is_private_and_a_symlink_in_its_place_is_refused(
    vcs: Repository, git_repo: pygit2.Repository, tmp_path: Path
) -> None:
    """Threat: a link or a loose folder at .git/chit sends lock files where someone else chose."""
    chit = Path(git_repo.path) / "chit"
    chit.mkdir(mode=0o755)
    os.chmod(chit, 0o755)
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    _commit(vcs, "alice", staged)
    assert chit.stat().st_mode & 0o777 == 0o700
    assert (chit / "locks").stat().st_mode & 0o777 == 0o700
    # A fresh engine on a repository whose chit folder is a symbolic link.
    shutil.rmtree(chit)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chit.symlink_to(elsewhere)
    fresh = Repository(git_repo.path)
    head = _lane_head(git_repo, "alice")
    again = StagedChange()
    fresh.stage_write("alice", again, "b.txt", b"b")
    before = StagedChange(again.base, dict(again.changes), dict(again.modes))
    with pytest.raises(RepositoryError) as exc:
        _commit(fresh, "alice", again)
    assert _code(exc) == "internal_error"
    assert again == before and _lane_head(git_repo, "alice") == head
    assert list(elsewhere.iterdir()) == []


def test_concurrent_commits_on_one_lane_one_winner_per_base(vcs: Repository) -> None:
    sessions = [StagedChange() for _ in range(8)]
    for i, staged in enumerate(sessions):
        vcs.stage_write("alice", staged, f"f{i}.txt", str(i).encode())
    outcomes: list[str] = []
    barrier = threading.Barrier(len(sessions))

    def run(staged: StagedChange) -> None:
        barrier.wait()
        try:
            _commit(vcs, "alice", staged)
            outcomes.append("ok")
        except RepositoryError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["ok"]
    assert len(vcs.lane_commits("alice")) == 1


def test_concurrent_commits_on_many_lanes_all_land(vcs: Repository) -> None:
    agents = [f"agent{i}" for i in range(6)]
    errors: list[BaseException] = []

    def run(agent: str) -> None:
        try:
            staged = StagedChange()
            for n in range(3):
                vcs.stage_write(agent, staged, f"{agent}/{n}.txt", b"x")
                _commit(vcs, agent, staged)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert vcs.lanes() == sorted(agents)
    assert all(len(vcs.lane_commits(a)) == 3 for a in agents)
