"""Crash and interruption: a commit cut short never leaves a lane half-moved.

Real repositories only (the ``world`` fixture). Fault injection is limited to our
own code (a :class:`engine.git.Repository` subclass) and to what another git
writer really does: hold the lane's ``.lock`` file, or die with ``SIGKILL``.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pygit2
import pytest

from engine.errors import ChitError, RepositoryError
from engine.git import MAIN, Repository, StagedChange, lane_ref
from engine.limits import LIMITS
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import Caller
from tests.engine.engine_calls import error as _error

ROOT = Path(__file__).resolve().parents[3]
GIT = shutil.which("git")
T0 = 1_700_000_000
_T = TypeVar("_T")



# -- helpers ------------------------------------------------------------------


def _gitdir(world: World) -> Path:
    return Path(pygit2.Repository(str(world.repo)).path)


def _lock_file(gitdir: Path, agent: str) -> Path:
    """The file git (and libgit2) create to lock ``refs/heads/agent/<agent>``."""
    return gitdir / (lane_ref(agent) + ".lock")


def _hold_lock(gitdir: Path, agent: str) -> Path:
    """Take the lane's ref lock the way a concurrent git writer does."""
    lock = _lock_file(gitdir, agent)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "xb"):  # O_EXCL, as git's lockfile.c
        pass
    return lock


def _fsck(gitdir: Path) -> str:
    """Run ``git fsck --strict``; assert exit 0 and no error line. Returns its output."""
    assert GIT is not None
    result = subprocess.run(
        [GIT, "--git-dir", str(gitdir), "fsck", "--strict", "--no-progress"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(gitdir),
            "GIT_CONFIG_NOSYSTEM": "1",
        },
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Dangling objects (written by a commit whose ref never moved) are expected;
    # anything else (missing, broken link, bad object, bad sha1 file) is not.
    for line in output.splitlines():
        assert line.startswith(("dangling ", "Checking ")), output
    return output


def _lane(gitdir: Path, agent: str) -> pygit2.Oid | None:
    """The lane's target read by a fresh handle (no cache shared with the writer)."""
    reference = pygit2.Repository(str(gitdir)).references.get(lane_ref(agent))
    if reference is None:
        return None
    target = reference.target
    assert isinstance(target, pygit2.Oid)  # a lane is never a symbolic reference
    return target


def _copy(staged: StagedChange) -> StagedChange:
    return StagedChange(
        staged.base, dict(staged.changes), dict(staged.modes), dict(staged.conflicts)
    )


def _within(seconds: float, fn: Callable[[], _T]) -> _T:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it blocks."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "call blocked: a lock was not released"
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _commit(
    vcs: Repository,
    agent: str,
    staged: StagedChange,
    message: str = "m\n",
    seal: Callable[[dict[str, Any]], bytes] | None = None,
) -> Any:
    return vcs.commit(
        agent, staged, message, author_name="Tester", author_email="t@example.org", time=T0,
        seal=seal,
    )


def _age(path: Path, seconds: float) -> None:
    """Set ``path``'s modification time ``seconds`` in the past, as if left that long ago."""
    then = time.time() - seconds
    os.utime(path, (then, then))


STALE = LIMITS.stale_ref_lock_seconds + 5
"""How far back a test ages a lock file to make it stale."""


class _LockedBeforeRefUpdate(Repository):
    """Fault injection: a concurrent writer takes the lane lock between the
    object writes and the reference update (the commit object already exists)."""

    def __init__(self, path: Path, gitdir: Path) -> None:
        super().__init__(path)
        self.gitdir = gitdir
        self.inject = True
        self.written: list[pygit2.Oid] = []

    def _cas_update(self, repo, ref, new, expected, reflog):  # type: ignore[no-untyped-def,override]
        self.written.append(new)
        if self.inject:
            assert repo.get(new) is not None  # objects are on disk before the ref moves
            _hold_lock(self.gitdir, ref.removeprefix("refs/heads/agent/"))
        Repository._cas_update(repo, ref, new, expected, reflog)


# -- 1. interrupted after objects, before the ref ------------------------------


@pytest.mark.parametrize("lane_exists", [False, True])
def test_commit_interrupted_before_the_ref_moves_leaves_a_consistent_repository(
    world: World, lane_exists: bool
) -> None:
    """Threat: a commit dies after writing its objects but before moving the lane
    (a concurrent git writer holds the ref lock), leaving a half-moved lane, a
    consumed staged change, a wedged per-lane lock or a corrupt object store."""
    gitdir = _gitdir(world)
    vcs = _LockedBeforeRefUpdate(world.repo, gitdir)
    staged = StagedChange()
    if lane_exists:
        vcs.inject = False
        vcs.stage_write("alice", staged, "src/first.py", b"first\n")
        _commit(vcs, "alice", staged)
        vcs.inject = True
    before_lane = _lane(gitdir, "alice")
    assert (before_lane is not None) is lane_exists
    vcs.stage_write("alice", staged, "src/new.py", b"new\n")
    vcs.stage_delete("alice", staged, "src/api/v1.py")
    before = _copy(staged)

    with pytest.raises(ChitError) as caught:
        _within(10, lambda: _commit(vcs, "alice", staged))
    assert isinstance(caught.value, RepositoryError)
    assert caught.value.code == "conflict"
    orphan = vcs.written[-1]

    lock = _lock_file(gitdir, "alice")
    assert lock.exists()  # the other writer's lock is left alone
    assert _lane(gitdir, "alice") == before_lane
    assert staged == before  # base, changes, modes, conflicts untouched
    assert str(pygit2.Repository(str(world.repo)).references[MAIN].target) == world.main_id
    # The commit object was written, is complete, and nothing points at it.
    fresh = pygit2.Repository(str(gitdir))
    written = fresh[orphan].peel(pygit2.Commit)
    assert written.parent_ids == [before.base]
    assert _data(written.tree, "src/new.py") == b"new\n"
    assert f"dangling commit {orphan}" in _fsck(gitdir)

    # The per-lane threading lock was released: once the other writer is gone,
    # the very same staged change commits (a leaked lock would block here).
    assert not vcs._ref_locks._locks[lane_ref("alice")].locked()
    lock.unlink()
    vcs.inject = False
    new = _within(10, lambda: _commit(vcs, "alice", staged))
    assert _lane(gitdir, "alice") == new
    assert fresh[new].peel(pygit2.Commit).parent_ids == [before.base]
    assert staged.base == new and staged.is_empty()
    _fsck(gitdir)


# -- 2. SIGKILL in the middle of commits ---------------------------------------

_CHILD = r"""
import sys
from engine.git import Repository, StagedChange

path, agent = sys.argv[1], sys.argv[2]
vcs = Repository(path)
step = len(vcs.lane_commits(agent))  # continue the numbering where the lane is
staged = StagedChange()
print("ready", flush=True)
while True:
    vcs.stage_write(agent, staged, f"crash/{step:06d}.txt", f"step {step}\n".encode())
    vcs.stage_write(agent, staged, "crash/last", f"{step}\n".encode())
    try:
        vcs.commit(agent, staged, f"crash step {step}\n",
                   author_name="crash", author_email="crash@example.org", time=1700000000)
    except Exception as exc:
        print(f"refused {getattr(exc, 'code', exc)!r}", flush=True)
        sys.exit(3)
    step += 1
"""

_CHILD_HOLDS_LOCK = r"""
import sys, time
from engine.git import Repository, StagedChange

class Stalls(Repository):
    @staticmethod
    def _cas_update(repo, ref, new, expected, reflog):
        with repo.transaction() as txn:
            txn.lock_ref(ref)
            print(new, flush=True)
            time.sleep(60)  # killed here, holding git's lock on the reference

# "provenance": the commit carries a record, stored first, so the first reference
# locked is refs/chit/provenance/<agent>; "lane": no record, the lane is locked.
seal = (lambda facts: b"record") if sys.argv[3] == "provenance" else None
vcs = Stalls(sys.argv[1])
staged = StagedChange()
vcs.stage_write(sys.argv[2], staged, "src/stalled.py", b"stalled\n")
vcs.commit(sys.argv[2], staged, "stalled\n", author_name="crash",
           author_email="crash@example.org", time=1700000000, seal=seal)
"""


@pytest.fixture
def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env.pop("PYTHONSTARTUP", None)
    return env


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes started by a test; any still running at the end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _spawn(
    script: str,
    world: World,
    agent: str,
    env: dict[str, str],
    children: list[subprocess.Popen[str]],
    *args: str,
) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(world.repo), agent, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )
    children.append(proc)
    assert proc.stdout is not None
    first = proc.stdout.readline().strip()
    if not first:
        proc.wait(timeout=10)
        assert proc.stderr is not None
        pytest.fail(f"child did not start: {proc.stderr.read()}")
    return proc, first


def _kill(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    # Killed by us, not dead of its own accord (a refused commit, a traceback).
    assert proc.returncode == -signal.SIGKILL, f"rc={proc.returncode} {out} {err}"
    return out


def _data(tree: pygit2.Tree, path: str) -> bytes:
    return tree[path].peel(pygit2.Blob).data


def _check_complete_lane(gitdir: Path, agent: str) -> int:
    """Assert the lane holds only whole commits, one step each; return the step count."""
    repo = pygit2.Repository(str(gitdir))
    reference = repo.references.get(lane_ref(agent))
    if reference is None:
        return 0
    head = reference.peel(pygit2.Commit)
    main = repo.references[MAIN].target
    chain = []
    commit = head
    while commit.id != main:
        chain.append(commit)
        assert len(commit.parent_ids) == 1
        commit = commit.parents[0]
    steps = len(chain)
    for depth, commit in enumerate(chain):
        step = steps - 1 - depth
        assert commit.message == f"crash step {step}\n"
        crash = commit.tree["crash"].peel(pygit2.Tree)
        names = sorted(str(entry.name) for entry in crash)
        assert names == sorted([f"{i:06d}.txt" for i in range(step + 1)] + ["last"])
        assert _data(crash, "last") == f"{step}\n".encode()
        if depth < 3:  # full content check on the newest commits (the ones at risk)
            for i in range(step + 1):
                assert _data(crash, f"{i:06d}.txt") == f"step {i}\n".encode()
    return steps


def test_sigkill_during_commits_never_leaves_a_partial_commit_on_the_lane(
    world: World, child_env: dict[str, str], children: list[subprocess.Popen[str]]
) -> None:
    """Threat: a process killed (SIGKILL, no cleanup) in the middle of a commit
    leaves the lane pointing at a missing or partial commit, a corrupt object
    store, or a stale ref lock that a later commit overrides or is wedged by."""
    gitdir = _gitdir(world)
    delays: list[float] = []
    lock = _lock_file(gitdir, "crash")
    stale_locks = 0
    steps = 0
    for round_ in range(8):
        delays.append(0.05 + secrets.randbelow(451) / 1000)  # 0.05 to 0.5 s
        where = f"round={round_} delays={delays}"
        proc, first = _spawn(_CHILD, world, "crash", child_env, children)
        assert first == "ready", where
        try:
            proc.wait(timeout=delays[-1])
        except subprocess.TimeoutExpired:
            pass
        _kill(proc)

        _fsck(gitdir)
        now = _check_complete_lane(gitdir, "crash")
        assert now >= steps, where  # the lane only ever moves forward
        steps = now
        # Only git's lock on the lane can be left behind (no provenance records here).
        others = [p for p in gitdir.rglob("*.lock") if p != lock]
        assert others == [], (where, others)
        if lock.exists():
            # Killed while holding the lane's lock: while the lock is fresh the next
            # commit is refused as a conflict and changes nothing; it does not
            # break or steal the lock.
            stale_locks += 1
            vcs = Repository(world.repo)
            staged = StagedChange()
            vcs.stage_write("crash", staged, "crash/intruder", b"x")
            before = _copy(staged)
            lane_before = _lane(gitdir, "crash")
            os.utime(lock)  # fresh, however long the checks above took
            with pytest.raises(RepositoryError) as caught:
                _within(10, lambda: _commit(vcs, "crash", staged))  # noqa: B023
            assert caught.value.code == "conflict", where
            assert staged == before and _lane(gitdir, "crash") == lane_before, where
            assert lock.exists(), where
            _fsck(gitdir)
            _age(lock, STALE)  # the next round's first commit removes it
    assert steps > 0, f"delays={delays}: no commit ever landed; the test exercised nothing"
    # A kill inside the lock window is rare; whether it happened is recorded, and the
    # deterministic case is covered by the next test.
    print(f"delays={delays} steps={steps} stale_locks={stale_locks}")
    # After all the kills, an ordinary commit still lands on top.
    vcs = Repository(world.repo)
    staged = StagedChange()
    vcs.stage_write("crash", staged, f"crash/{steps:06d}.txt", f"step {steps}\n".encode())
    vcs.stage_write("crash", staged, "crash/last", f"{steps}\n".encode())
    _commit(vcs, "crash", staged, f"crash step {steps}\n")
    assert _check_complete_lane(gitdir, "crash") == steps + 1
    _fsck(gitdir)


def test_a_lock_on_the_provenance_ref_refuses_while_fresh_and_is_cleared_once_stale(
    world: World,
) -> None:
    """Threat: an engine killed while updating ``refs/chit/provenance/<agent>``
    leaves git's ``.lock`` on it, and every later commit of that agent fails; or
    a live writer's fresh lock is broken."""
    gitdir = _gitdir(world)
    engine = Engine(world.home, world.repo)
    token = world.mint()
    assert _call(engine, token, "write_file", {"path": "src/a.py", "content": "a\n"})["ok"]
    assert _call(engine, token, "commit", {"message": "one"})["ok"]
    head = _lane(gitdir, "alice")
    stale = gitdir / "refs" / "chit" / "provenance" / "alice.lock"
    stale.write_bytes(b"")  # what a killed writer leaves
    assert _call(engine, token, "write_file", {"path": "src/b.py", "content": "b\n"})["ok"]
    assert _error(_call(engine, token, "commit", {"message": "two"})) == "conflict"
    assert stale.exists() and _lane(gitdir, "alice") == head
    _age(stale, STALE)
    done = _call(engine, token, "commit", {"message": "two"})
    assert done["ok"], done
    assert not stale.exists()
    record = Repository(world.repo).provenance_record("alice", done["result"]["commit"])
    assert record is not None
    _fsck(gitdir)


@pytest.mark.parametrize(
    ("locked", "lane_exists"),
    [("lane", False), ("lane", True), ("provenance", False), ("provenance", True)],
)
def test_a_lock_left_by_a_killed_writer_refuses_while_fresh_and_is_removed_once_stale(
    world: World,
    child_env: dict[str, str],
    children: list[subprocess.Popen[str]],
    caplog: pytest.LogCaptureFixture,
    locked: str,
    lane_exists: bool,
) -> None:
    """Threat: a writer killed (SIGKILL) holding git's lock on a lane or on its
    provenance ref (lock file made, ref not yet renamed) wedges every later
    commit of that agent for good; or a later commit silently overwrites a live
    writer's lock or leaves a half-written ref. A fresh lock must refuse with
    ``conflict``; one older than ``stale_ref_lock_seconds`` is removed."""
    gitdir = _gitdir(world)
    vcs = Repository(world.repo)
    staged = StagedChange()

    def seal(facts: dict[str, Any]) -> bytes:
        return b"record of " + facts["tree"].encode()

    if lane_exists:
        vcs.stage_write("alice", staged, "src/first.py", b"first\n")
        _commit(vcs, "alice", staged, seal=seal)
    lane_before = _lane(gitdir, "alice")
    proc, printed = _spawn(_CHILD_HOLDS_LOCK, world, "alice", child_env, children, locked)
    orphan = pygit2.Oid(hex=printed)
    _kill(proc)

    ref = lane_ref("alice") if locked == "lane" else vcs.provenance_ref("alice")
    lock = gitdir / (ref + ".lock")
    assert lock.exists()
    assert [p for p in gitdir.rglob("*.lock") if p != lock] == []
    assert _lane(gitdir, "alice") == lane_before
    assert f"dangling commit {orphan}" in _fsck(gitdir)

    vcs.stage_write("alice", staged, "src/after.py", b"after\n")
    before = _copy(staged)
    os.utime(lock)  # fresh: a writer outside chit may be at work
    with pytest.raises(RepositoryError) as caught:
        _within(10, lambda: _commit(vcs, "alice", staged, seal=seal))
    assert caught.value.code == "conflict"
    assert "retry" in caught.value.message
    assert staged == before
    assert _lane(gitdir, "alice") == lane_before
    assert lock.exists()

    _age(lock, STALE)
    with caplog.at_level(logging.WARNING, logger="chit.engine"):
        new = _within(10, lambda: _commit(vcs, "alice", staged, seal=seal))
    assert _lane(gitdir, "alice") == new
    assert not lock.exists()
    assert vcs.provenance_record("alice", str(new)) is not None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(ref in m and "removed" in m for m in warned), warned
    _fsck(gitdir)


# -- 3. locks are released after failed mutations through the engine -----------


_call = Caller(through=lambda invoke: _within(10, invoke)).call  # the invoke, not the listing


def _staged_paths(engine: Engine, token: str) -> list[tuple[str, str]]:
    status = _call(engine, token, "status")
    assert status["ok"], status
    return [(e["path"], e["change"]) for e in status["result"]["staged"]]


def test_failed_commits_through_the_engine_release_every_lock(world: World) -> None:
    """Threat: a commit refused mid-way (forbidden ``Chit-`` trailer, or the lane
    locked by another writer) keeps the session or lane lock held, or loses or
    half-applies the staged change, so the agent can never commit again."""
    gitdir = _gitdir(world)
    engine = Engine(world.home, world.repo)
    token = world.mint()
    assert _call(engine, token, "write_file", {"path": "src/a.py", "content": "a\n"})["ok"]
    assert _call(engine, token, "delete_file", {"path": "src/api/v1.py"})["ok"]
    staged = [("src/a.py", "added"), ("src/api/v1.py", "deleted")]
    assert _staged_paths(engine, token) == staged

    forged = _call(engine, token, "commit", {"message": "fix\n\nChit-Agent: mallory"})
    assert _error(forged) == "invalid_argument"
    assert _staged_paths(engine, token) == staged
    assert _lane(gitdir, "alice") is None

    lock = _hold_lock(gitdir, "alice")
    for _ in range(2):  # refused twice in a row: nothing stays held in between
        locked = _call(engine, token, "commit", {"message": "fix"})
        assert _error(locked) == "conflict"
        assert _staged_paths(engine, token) == staged
        assert _lane(gitdir, "alice") is None
    lock.unlink()

    done = _call(engine, token, "commit", {"message": "fix"})
    assert done["ok"], done
    assert _lane(gitdir, "alice") == pygit2.Oid(hex=done["result"]["commit"])
    assert done["result"]["parent"] == world.main_id
    assert _staged_paths(engine, token) == []

    # Once the lane exists: the same again on top of it.
    assert _call(engine, token, "write_file", {"path": "src/b.py", "content": "b\n"})["ok"]
    head = _lane(gitdir, "alice")
    lock = _hold_lock(gitdir, "alice")
    assert _error(_call(engine, token, "commit", {"message": "b"})) == "conflict"
    assert (
        _error(_call(engine, token, "commit", {"message": "Chit-Session: x"})) == "invalid_argument"
    )
    assert _staged_paths(engine, token) == [("src/b.py", "added")]
    assert _lane(gitdir, "alice") == head
    lock.unlink()
    again = _call(engine, token, "commit", {"message": "b"})
    assert again["ok"], again
    assert again["result"]["parent"] == str(head)
    assert str(pygit2.Repository(str(gitdir)).references[MAIN].target) == world.main_id
    _fsck(gitdir)


# -- 4. engines in separate processes share a lane --------------------------------

_CHILD_ENGINE = r"""
import sys
from pathlib import Path
from engine.service import Engine

repo, agent, home, token, tag, rounds = sys.argv[1:7]
engine = Engine(Path(home), Path(repo))
listed = engine.offer(token)["catalog_hash"]
print("ready", flush=True)
sys.stdin.readline()  # start together
for n in range(int(rounds)):
    args = [("write_file", {"path": f"src/{tag}/f{n}.py", "content": f"{tag} {n}\n"}),
            ("write_file", {"path": f"src/{tag}/last.py", "content": f"{tag} last {n}\n"}),
            ("commit", {"message": f"{tag} {n}"})]
    for tool, arguments in args:
        out = engine.invoke(token, tool, arguments, session=tag, offered_catalog_hash=listed)
        if not out["ok"]:
            print(f"refused {tool} {out['error']['error']}", flush=True)
            sys.exit(3)
    print(out["result"]["commit"], flush=True)
"""

_CHILD_HOLDS_FLOCK = r"""
import sys, time
from engine.git import Repository, lane_ref

vcs = Repository(sys.argv[1])
with vcs._ref_locks.hold(lane_ref(sys.argv[2])):
    print("holding", flush=True)
    time.sleep(60)  # killed here, holding the cross-process lane lock
"""


def test_engines_in_separate_processes_serialise_one_lane(
    world: World, child_env: dict[str, str], children: list[subprocess.Popen[str]]
) -> None:
    """Threat: two engine processes (two ``chit mcp`` stdio servers for one agent)
    race on the agent's lane, so one's commit is lost, lands half-merged, or is
    refused with ``conflict`` although the sessions touched different files."""
    gitdir = _gitdir(world)
    token = world.mint(paths="src/**")
    rounds, tags = 12, ["p0", "p1", "p2"]
    procs = []
    for tag in tags:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD_ENGINE, str(world.repo), "alice", str(world.home),
             token, tag, str(rounds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=child_env, cwd=str(ROOT),
        )
        children.append(proc)
        procs.append(proc)
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    commits: dict[str, list[str]] = {}
    for tag, proc in zip(tags, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (tag, out, err)
        commits[tag] = out.split()
        assert len(commits[tag]) == rounds, (tag, out)

    repo = pygit2.Repository(str(gitdir))
    lane = [c.id for c in repo.walk(repo.references[lane_ref("alice")].target)]
    main = pygit2.Oid(hex=world.main_id)
    lane = lane[: lane.index(main)]
    assert len(lane) == rounds * len(tags)  # nothing lost, nothing extra
    assert sorted(str(c) for c in lane) == sorted(c for cs in commits.values() for c in cs)
    head = repo[lane[0]].peel(pygit2.Commit).tree
    for tag in tags:
        for n, oid in enumerate(commits[tag]):
            commit = repo[oid].peel(pygit2.Commit)
            assert len(commit.parent_ids) == 1
            assert commit.message.startswith(f"{tag} {n}\n")
            # Each commit holds exactly its own change on top of its parent.
            diff = repo.diff(commit.parents[0], commit)
            changed = sorted(p.delta.new_file.path for p in diff)
            expected = sorted({f"src/{tag}/f{n}.py", f"src/{tag}/last.py"})
            assert changed == expected, (tag, n, changed)
            assert _data(commit.tree, f"src/{tag}/f{n}.py") == f"{tag} {n}\n".encode()
        assert _data(head, f"src/{tag}/last.py") == f"{tag} last {rounds - 1}\n".encode()
    _fsck(gitdir)


def test_a_killed_holder_of_the_cross_process_lane_lock_never_wedges_the_lane(
    world: World, child_env: dict[str, str], children: list[subprocess.Popen[str]]
) -> None:
    """Threat: a writer process killed while holding the lane's cross-process
    lock leaves the lane locked for ever (unlike git's ``.lock`` file, the kernel
    must release it), or a commit slips past a live holder."""
    gitdir = _gitdir(world)
    proc, first = _spawn(_CHILD_HOLDS_FLOCK, world, "alice", child_env, children)
    assert first == "holding"
    vcs = Repository(world.repo)
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/after.py", b"after\n")
    box: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: box.update(new=_commit(vcs, "alice", staged)),
                              daemon=True)
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive(), "a commit went ahead while another process held the lane"
    assert _lane(gitdir, "alice") is None
    _kill(proc)
    waiter.join(10)
    assert not waiter.is_alive(), "the lane stayed locked after its holder died"
    assert _lane(gitdir, "alice") == box["new"]
    locks = list((gitdir / "chit" / "locks").iterdir())
    assert [oct(p.stat().st_mode & 0o777) for p in locks] == ["0o600"]
    _fsck(gitdir)
