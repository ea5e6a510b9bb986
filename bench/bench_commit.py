"""Committing a 10-file change: chit's Engine against plain pygit2, in the same run.

Both sides land a change of ``FILES_PER_COMMIT`` files (under ``src/``) as one
commit on top of the previous one, in a fresh temporary repository seeded with
``SEED_FILES`` files on ``main``:

- chit: ``Engine.invoke`` with a real token and the catalog hash listed by
  ``Engine.offer``: ``write_file`` for each file, then ``commit``, all in one
  session. The commit lands on ``refs/heads/agent/<name>`` with provenance
  trailers, by compare-and-swap under the lane's lock.
- raw pygit2: an in-memory ``pygit2.Index`` read from the parent tree, one
  ``create_blob`` and ``Index.add`` per file, ``write_tree``, then
  ``create_commit`` updating a branch reference (libgit2's own check that the
  reference still points at the parent).

Two measurements:

1. Latency: median time per commit, the two sides interleaved commit by commit
   (each in its own repository). chit is timed for the ``commit`` call alone and
   for ``write_file`` x10 + ``commit``; raw pygit2 has no separate staging step, so
   both ratios divide by the same raw time. Target: chit / raw at most
   ``TARGET_LATENCY_RATIO`` (reported for both ratios).
2. Throughput: commits per second (each commit a whole 10-file change) with 1, 4
   and 16 concurrent sessions as threads of one process sharing one ``Engine``;
   sessions are spread over 4 agents (4 tokens), so with 16 sessions 4 share a
   lane, and each session writes its own files. A ``conflict`` from another
   session of the same agent moving the lane in between is retried (the engine
   merges onto the lane) and counted. Peer: raw pygit2 threads, each with its
   own repository handle and its own branch. Every configuration runs
   ``THROUGHPUT_ROUNDS`` times for ``THROUGHPUT_SECONDS``, the rounds interleaved
   so that drift hits each alike, and the median is reported. A diagnostic run
   gives 16 sessions 16 agents (no shared lane). Target: chit with 16 sessions at
   least as fast as with 1.
3. Throughput with sessions as processes, the shape ``chit mcp`` runs in today
   (each MCP stdio connection is its own process embedding its own ``Engine`` on
   the same home and repository): 1, 4 and 16 worker processes started with the
   ``spawn`` context (nothing is forked from a process holding pygit2 handles),
   each constructing its own ``Engine(home, repo)``, asking ``offer`` for its
   agent's catalog hash and making one warm-up commit before reporting ready.
   Sessions are spread over the same 4 agents, so with 16 processes 4 share a
   lane (engines in different processes serialise a lane with a per-lane
   ``flock``); each process commits its own changes in a loop for
   ``THROUGHPUT_SECONDS`` from a common start time (``time.monotonic``, one
   system-wide clock on Linux) and the commits completed within the window are
   counted. Start-up (interpreter, imports, ``Engine``, ``offer``, warm-up) is
   outside the window. Peer: raw pygit2 processes, each on its own branch. Same
   rounds, interleaving, median, diagnostic (16 processes, 16 agents) and target
   as 2. Each run also reports the workers' CPU seconds per second of the window
   (``cores_busy``) and the part of that CPU time spent in the kernel
   (``kernel_share_of_cpu``), which shows whether the cores or the filesystem
   limit the rate. Conflicts retried are reported as counts (with the per-lane
   ``flock`` there should be none).

4. Latency with a remote: the repository is a ``git clone --bare`` of a local
   bare ``origin`` and the engine serves it with ``remote`` set to that origin,
   so each ``commit`` also pushes the lane, the agent's provenance reference and
   ``refs/chit/catalogs`` there in one ``git push --atomic`` before answering.
   Peer in the same run, on its own clone of its own origin: the raw pygit2
   commit above, plus a provenance-like record (one blob in a commit on
   ``refs/chit/provenance/raw``), then ``git push --atomic --porcelain`` of the
   same three refs (branch, record, catalogs) by the ``git`` command. Median
   per commit, the two sides interleaved as in 1. Target: chit / peer at most
   ``TARGET_REMOTE_LATENCY_RATIO``. After the run the origin's lane and records
   must equal the engine's, and the peer's origin branch must hold every commit.
   ``--only remote`` runs the start-up checks and this measurement alone.

Every measurement uses a fresh repository under ``tempfile.gettempdir()``: set
``TMPDIR`` (for example to a tmpfs) to choose the filesystem, which dominates the
raw side's time since every object is a loose file.

Start-up checks make sure a chit commit lands on its lane with exactly the
expected tree and trailers (and that a write without the listed catalog is
refused), and a raw commit lands likewise; every timed call's result is checked,
and after each throughput run (threads or processes) the commits counted are the
commits on the lanes or branches (walked from each head to ``main``), so no side
can silently measure a failing path; conflicts retried are counted and reported.
``--profile [N]`` also prints to stderr a cProfile of N chit commits
(``write_file`` x10 + ``commit``) in one session, and of one 16-session run with
every thread's profile merged (wall time per thread, so waiting for locks and
the GIL shows).

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_commit.py [--profile [N]]``
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing
import os
import platform
import pstats
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import FileMode

from engine import admin
from engine.admin.seed import create_repository
from engine.service import Engine

FILES_PER_COMMIT = 10
SEED_FILES = 50
LATENCY_WARMUP = 10
LATENCY_COMMITS = 150
THROUGHPUT_SESSIONS = (1, 4, 16)
THROUGHPUT_AGENTS = 4
THROUGHPUT_SECONDS = 1.0
THROUGHPUT_ROUNDS = 5
CONFLICT_RETRIES = 1000
PROCESS_START_LEAD = 0.05  # s from the start signal to the window, for every worker to wake
PROCESS_TIMEOUT = 300.0  # s to wait for a worker's message before giving up
PROFILE_COMMITS = 100
PROFILE_LINES = 25
TARGET_LATENCY_RATIO = 3.0
TARGET_REMOTE_LATENCY_RATIO = 1.5
REMOTE_WARMUP = 5
REMOTE_COMMITS = 80
TARGET_THROUGHPUT_16_OVER_1 = 1.0
TOKEN_TTL = 3600
OPERATIONS = ["read", "write", "commit"]
SCOPE = ["src/**"]
MESSAGE = "bench: update {n} files"


def seed_files() -> dict[str, bytes]:
    files = {"README.md": b"# bench\n"}
    for i in range(SEED_FILES - 5):
        files[f"src/pkg{i % 5}/mod{i}.py"] = f"VALUE_{i} = {i}\n".encode() * (20 + i)
    for i in range(4):
        files[f"docs/guide{i}.md"] = f"# guide {i}\n".encode() * 10
    return files


def change(owner: str, n: int) -> dict[str, bytes]:
    """The ``n``-th change of ``owner``: its own ``FILES_PER_COMMIT`` paths, new content."""
    return {
        f"src/bench/{owner}/f{i}.py": "".join(
            f"# {owner} commit {n} file {i} line {j}\nx_{j} = {n * 1000 + j}\n" for j in range(20)
        ).encode()
        for i in range(FILES_PER_COMMIT)
    }


@contextmanager
def fresh_repo() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="chit-bench-") as tmp:
        repo = Path(tmp) / "repo"
        create_repository(repo, seed_files())
        yield Path(tmp)


# --- chit ----------------------------------------------------------------------


@dataclass
class ChitAgent:
    name: str
    token: str
    catalog_hash: str


@dataclass
class ChitWorld:
    engine: Engine
    repo: Path
    agents: list[ChitAgent]


@contextmanager
def chit_world(agents: int) -> Iterator[ChitWorld]:
    with fresh_repo() as tmp:
        home = tmp / "home"
        admin.init_home(home)
        engine = Engine(home, tmp / "repo")
        made = []
        for a in range(agents):
            name = f"bench{a}"
            token = str(admin.mint_token(home, agent=name, operations=OPERATIONS,
                                         paths=SCOPE, ttl_seconds=TOKEN_TTL)["token"])
            listed = engine.offer(token)
            if not listed["ok"]:
                raise SystemExit(f"offer refused: {listed['error']}")
            made.append(ChitAgent(name, token, str(listed["catalog_hash"])))
        with engine:  # its call log is written and signed before the folder goes
            yield ChitWorld(engine, tmp / "repo", made)


@dataclass
class ChitSession:
    engine: Engine
    agent: ChitAgent
    session: str
    conflicts: int = 0

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        out = self.engine.invoke(self.agent.token, tool, arguments, session=self.session,
                                 offered_catalog_hash=self.agent.catalog_hash)
        if not out["ok"]:
            raise RuntimeError(f"chit {tool} refused: {out['error']}")
        return dict(out["result"])

    def write_all(self, writes: list[dict[str, Any]]) -> None:
        for args in writes:
            self.call("write_file", args)

    def commit(self, message: str) -> str:
        for _ in range(CONFLICT_RETRIES):
            out = self.engine.invoke(self.agent.token, "commit", {"message": message},
                                     session=self.session,
                                     offered_catalog_hash=self.agent.catalog_hash)
            if out["ok"]:
                return str(out["result"]["commit"])
            if out["error"]["error"] != "conflict":
                raise RuntimeError(f"chit commit refused: {out['error']}")
            self.conflicts += 1  # another session of this agent moved the lane; retry
        raise RuntimeError("chit commit kept conflicting")


def write_args(files: dict[str, bytes]) -> list[dict[str, Any]]:
    return [{"path": p, "content": d.decode()} for p, d in files.items()]


# --- raw pygit2 ------------------------------------------------------------------


@dataclass
class RawBranch:
    repo: pygit2.Repository
    ref: str
    head: pygit2.Oid
    sig: pygit2.Signature = field(
        default_factory=lambda: pygit2.Signature("raw", "raw@bench.invalid", 1_700_000_000, 0)
    )

    @classmethod
    def open(cls, path: Path, ref: str) -> RawBranch:
        repo = pygit2.Repository(str(path))
        return cls(repo, ref, repo.references["refs/heads/main"].target)

    def commit(self, files: dict[str, bytes], message: str) -> pygit2.Oid:
        repo = self.repo
        parent = repo[self.head]
        index = pygit2.Index()
        index.read_tree(parent.tree)
        for path, data in files.items():
            index.add(pygit2.IndexEntry(path, repo.create_blob(data), FileMode.BLOB))
        tree = index.write_tree(repo)
        # Creates the branch, or moves it iff it still points at the parent.
        self.head = repo.create_commit(self.ref, self.sig, self.sig, message, tree, [self.head])
        return self.head


# The same size of message as chit's: the summary plus a trailer block.
RAW_MESSAGE = MESSAGE.format(n=FILES_PER_COMMIT) + "\n\n" + "".join(
    f"Chit-{k}: {'x' * 64}\n"
    for k in ("Agent", "Session", "Token-Id", "Catalog-Hash", "Catalog-Encoding")
)


# --- checks ----------------------------------------------------------------------


def tree_files(repo: pygit2.Repository, commit: pygit2.Commit) -> dict[str, bytes]:
    index = pygit2.Index()
    index.read_tree(commit.tree)
    return {e.path: repo[e.id].data for e in index}


def check_chit() -> None:
    seed = seed_files()
    with chit_world(1) as world:
        agent = world.agents[0]
        session = ChitSession(world.engine, agent, "check")
        refused = world.engine.invoke(agent.token, "write_file",
                                      {"path": "src/x.py", "content": "x"}, session="check")
        if refused["ok"] or refused["error"]["error"] != "catalog_changed":
            raise SystemExit(f"start-up check: an unlisted write was not refused: {refused}")
        repo = pygit2.Repository(str(world.repo))
        main = repo.references["refs/heads/main"].peel(pygit2.Commit)
        files = change("check", 0)
        session.write_all(write_args(files))
        oid = session.commit(MESSAGE.format(n=FILES_PER_COMMIT))
        lane = repo.references.get(f"refs/heads/agent/{agent.name}")
        problems = []
        if lane is None or str(lane.target) != oid:
            problems.append("the lane does not point at the returned commit")
        else:
            landed = lane.peel(pygit2.Commit)
            if landed.parent_ids != [main.id]:
                problems.append("the commit's parent is not main")
            if tree_files(repo, landed) != {**seed, **files}:
                problems.append("the commit's tree is not main's plus the change")
            if f"Chit-Agent: {agent.name}\n" not in landed.message:
                problems.append("the commit has no provenance trailers")
        if repo.references["refs/heads/main"].target != main.id or tree_files(repo, main) != seed:
            problems.append("main changed")
        if problems:
            raise SystemExit("start-up check (chit) failed: " + "; ".join(problems))


def check_raw() -> None:
    with fresh_repo() as tmp:
        branch = RawBranch.open(tmp / "repo", "refs/heads/raw/check")
        files = change("check", 0)
        oid = branch.commit(files, RAW_MESSAGE)
        repo = pygit2.Repository(str(tmp / "repo"))
        landed = repo.references["refs/heads/raw/check"].peel(pygit2.Commit)
        second = branch.commit(change("check", 1), RAW_MESSAGE)
        if (landed.id != oid or tree_files(repo, landed) != {**seed_files(), **files}
                or repo.references["refs/heads/raw/check"].target != second):
            raise SystemExit("start-up check (raw pygit2) failed")


def lane_length(repo: pygit2.Repository, ref: str) -> int:
    walker = repo.walk(repo.references[ref].target)
    walker.hide(repo.references["refs/heads/main"].target)
    return sum(1 for _ in walker)


# --- latency -----------------------------------------------------------------------


def measure_latency() -> dict[str, list[float]]:
    commit_s: list[float] = []
    total_s: list[float] = []
    raw_s: list[float] = []
    clock = time.perf_counter
    with chit_world(1) as world, fresh_repo() as raw_tmp:
        session = ChitSession(world.engine, world.agents[0], "latency")
        branch = RawBranch.open(raw_tmp / "repo", "refs/heads/raw/latency")
        for n in range(LATENCY_WARMUP + LATENCY_COMMITS):
            files = change("latency", n)
            writes, message = write_args(files), MESSAGE.format(n=FILES_PER_COMMIT)
            if n % 2:  # alternate which side goes first
                r0 = clock()
                branch.commit(files, RAW_MESSAGE)
                r1 = t0 = clock()
                session.write_all(writes)
                t1 = clock()
                session.commit(message)
                t2 = clock()
            else:
                t0 = clock()
                session.write_all(writes)
                t1 = clock()
                session.commit(message)
                t2 = r0 = clock()
                branch.commit(files, RAW_MESSAGE)
                r1 = clock()
            if n >= LATENCY_WARMUP:
                commit_s.append(t2 - t1)
                total_s.append(t2 - t0)
                raw_s.append(r1 - r0)
        repo = pygit2.Repository(str(world.repo))
        landed = lane_length(repo, f"refs/heads/agent/{world.agents[0].name}")
        if landed != LATENCY_WARMUP + LATENCY_COMMITS or session.conflicts:
            raise SystemExit(f"latency run: {landed} chit commits on the lane")
    return {"commit": commit_s, "total": total_s, "raw": raw_s}


# --- throughput ---------------------------------------------------------------------


Worker = Callable[[Callable[[], bool]], list[float]]


def run_threads(workers: list[Worker]) -> list[float]:
    """Run each worker in its own thread from a common start; return completion times."""
    start: list[float] = []
    barrier = threading.Barrier(len(workers), action=lambda: start.append(time.perf_counter()))
    done: list[list[float]] = [[] for _ in workers]
    errors: list[BaseException] = []

    def target(k: int) -> None:
        try:
            barrier.wait()
            deadline = start[0] + THROUGHPUT_SECONDS
            done[k] = workers[k](lambda: time.perf_counter() < deadline)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=target, args=(k,)) for k in range(len(workers))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise SystemExit(f"throughput run failed: {errors[0]!r}")
    return [t - start[0] for times in done for t in times]


def per_second(completions: list[float]) -> float:
    return sum(1 for t in completions if t <= THROUGHPUT_SECONDS) / THROUGHPUT_SECONDS


def chit_throughput(
    sessions: int, agents: int, profilers: list[cProfile.Profile] | None = None
) -> tuple[float, int]:
    """Commits per second of ``sessions`` threads over ``agents`` lanes, and conflicts retried."""
    agents = min(sessions, agents)
    with chit_world(agents) as world:
        chit_sessions = [
            ChitSession(world.engine, world.agents[k % agents], f"s{k}") for k in range(sessions)
        ]

        def worker(k: int) -> Worker:
            session = chit_sessions[k]

            def cycle(n: int) -> None:
                session.write_all(write_args(change(f"s{k}", n)))
                session.commit(MESSAGE.format(n=FILES_PER_COMMIT))

            cycle(0)  # warm-up: the lane, the catalog store entry

            def loop(running: Callable[[], bool]) -> list[float]:
                profiler = cProfile.Profile() if profilers is not None else None
                if profiler is not None:
                    profiler.enable()  # profiles this thread only
                times, n = [], 1
                while running():
                    cycle(n)
                    times.append(time.perf_counter())
                    n += 1
                if profiler is not None and profilers is not None:
                    profiler.disable()
                    profilers.append(profiler)
                return times

            return loop

        completions = run_threads([worker(k) for k in range(sessions)])
        repo = pygit2.Repository(str(world.repo))
        on_lanes = sum(lane_length(repo, f"refs/heads/agent/{a.name}") for a in world.agents)
        if on_lanes != len(completions) + sessions:
            raise SystemExit(f"chit throughput ({sessions}): {on_lanes} commits on the lanes, "
                             f"{len(completions) + sessions} made")
        return per_second(completions), sum(s.conflicts for s in chit_sessions)


def raw_throughput(threads: int) -> float:
    """Commits per second of ``threads`` raw pygit2 threads, each on its own branch."""
    with fresh_repo() as tmp:
        # One repository handle per thread: libgit2 objects are not shared between threads.
        branches = [RawBranch.open(tmp / "repo", f"refs/heads/raw/t{k}") for k in range(threads)]

        def worker(k: int) -> Worker:
            branch = branches[k]
            branch.commit(change(f"t{k}", 0), RAW_MESSAGE)  # warm-up, as for chit

            def loop(running: Callable[[], bool]) -> list[float]:
                times, n = [], 1
                while running():
                    branch.commit(change(f"t{k}", n), RAW_MESSAGE)
                    times.append(time.perf_counter())
                    n += 1
                return times

            return loop

        completions = run_threads([worker(k) for k in range(threads)])
        repo = pygit2.Repository(str(tmp / "repo"))
        on_refs = sum(lane_length(repo, f"refs/heads/raw/t{k}") for k in range(threads))
        if on_refs != len(completions) + threads:
            raise SystemExit(f"raw throughput ({threads}): {on_refs} commits on the refs, "
                             f"{len(completions) + threads} made")
        return per_second(completions)


def measure_throughput() -> dict[str, Any]:
    """Rounds of every configuration, interleaved so drift hits each one alike."""
    chit: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    conflicts: dict[int, int] = dict.fromkeys(THROUGHPUT_SESSIONS, 0)
    raw: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    own_lanes: list[float] = []
    for _ in range(THROUGHPUT_ROUNDS):
        for n in THROUGHPUT_SESSIONS:
            rate, retried = chit_throughput(n, THROUGHPUT_AGENTS)
            chit[n].append(rate)
            conflicts[n] += retried
            raw[n].append(raw_throughput(n))
        own_lanes.append(chit_throughput(THROUGHPUT_SESSIONS[-1], THROUGHPUT_SESSIONS[-1])[0])
    med = statistics.median
    lo, hi = THROUGHPUT_SESSIONS[0], THROUGHPUT_SESSIONS[-1]
    scaling = med(chit[hi]) / med(chit[lo])
    return {
        "seconds_per_run": THROUGHPUT_SECONDS,
        "rounds": THROUGHPUT_ROUNDS,
        "agents": THROUGHPUT_AGENTS,
        "chit_commits_per_s": {str(n): round(med(v), 1) for n, v in chit.items()},
        "raw_pygit2_commits_per_s": {str(n): round(med(v), 1) for n, v in raw.items()},
        "ratio_chit_over_raw": {str(n): round(med(chit[n]) / med(raw[n]), 3) for n in chit},
        "chit_conflicts_retried_per_commit": {
            str(n): round(conflicts[n] / max(1.0, sum(chit[n]) * THROUGHPUT_SECONDS), 2)
            for n in chit
        },
        f"chit_{hi}_over_{lo}": round(scaling, 2),
        f"raw_{hi}_over_{lo}": round(med(raw[hi]) / med(raw[lo]), 2),
        f"diagnostic_chit_{hi}_sessions_{hi}_agents_commits_per_s": round(med(own_lanes), 1),
        f"target_chit_{hi}_over_{lo}_at_least": TARGET_THROUGHPUT_16_OVER_1,
        "met": scaling >= TARGET_THROUGHPUT_16_OVER_1,
        "runs_commits_per_s": {
            "chit": {str(n): [round(x, 1) for x in v] for n, v in chit.items()},
            "raw_pygit2": {str(n): [round(x, 1) for x in v] for n, v in raw.items()},
        },
    }


# --- throughput: sessions as processes ---------------------------------------------


@dataclass(frozen=True)
class ChitJob:
    """One ``chit mcp``-like process: its own Engine on the shared home and repository."""

    home: str
    repo: str
    agent: str
    token: str
    session: str

    def prepare(self) -> tuple[Callable[[int], None], Callable[[], int]]:
        engine = Engine(self.home, self.repo)
        listed = engine.offer(self.token)
        if not listed["ok"]:
            raise RuntimeError(f"offer refused: {listed['error']}")
        session = ChitSession(engine, ChitAgent(self.agent, self.token,
                                                str(listed["catalog_hash"])), self.session)

        def cycle(n: int) -> None:
            session.write_all(write_args(change(self.session, n)))
            session.commit(MESSAGE.format(n=FILES_PER_COMMIT))

        return cycle, lambda: session.conflicts


@dataclass(frozen=True)
class RawJob:
    """One raw pygit2 process committing to its own branch."""

    repo: str
    ref: str
    owner: str

    def prepare(self) -> tuple[Callable[[int], None], Callable[[], int]]:
        branch = RawBranch.open(Path(self.repo), self.ref)

        def cycle(n: int) -> None:
            branch.commit(change(self.owner, n), RAW_MESSAGE)

        return cycle, lambda: 0


def process_worker(k: int, job: ChitJob | RawJob, go: Any, start_at: Any, out: Any) -> None:
    """A worker process: set up and warm up, report ready, then commit in the window.

    Puts ``("ready", k)``, then ``("done", k, completion times relative to the
    start, conflicts retried, user CPU seconds, kernel CPU seconds, wall seconds)``;
    or ``("error", k, text)``.
    """
    try:
        cycle, conflicts = job.prepare()
        cycle(0)  # warm-up: the lane, the catalog store entry
        out.put(("ready", k))
        go.wait()
        start = start_at.value
        deadline = start + THROUGHPUT_SECONDS
        time.sleep(max(0.0, start - time.monotonic()))
        cpu0 = os.times()
        times, n = [], 1
        while time.monotonic() < deadline:
            cycle(n)
            times.append(time.monotonic() - start)
            n += 1
        cpu, wall = os.times(), time.monotonic() - start
        out.put(("done", k, times, conflicts(), cpu.user - cpu0.user, cpu.system - cpu0.system,
                 wall))
    except BaseException as exc:
        out.put(("error", k, repr(exc)))


@dataclass
class ProcessRun:
    completions: list[float]
    conflicts: int
    cores_busy: float  # the workers' CPU seconds per second of the window
    kernel_share: float  # the part of that CPU time spent in the kernel


def run_processes(jobs: list[ChitJob] | list[RawJob]) -> ProcessRun:
    """Run each job in its own spawned process from a common start time."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    start_at = ctx.Value("d", 0.0, lock=False)
    procs = [ctx.Process(target=process_worker, args=(k, job, go, start_at, out), daemon=True)
             for k, job in enumerate(jobs)]

    def receive(kind: str) -> list[tuple[Any, ...]]:
        got = []
        while len(got) < len(jobs):
            try:
                msg = out.get(timeout=PROCESS_TIMEOUT)
            except queue.Empty:
                raise SystemExit(f"throughput run (processes): no {kind} message "
                                 f"in {PROCESS_TIMEOUT} s") from None
            if msg[0] == "error":
                raise SystemExit(f"throughput run (processes) failed in worker {msg[1]}: {msg[2]}")
            got.append(msg)
        return got

    for proc in procs:
        proc.start()
    finished = False
    try:
        receive("ready")
        start_at.value = time.monotonic() + PROCESS_START_LEAD
        go.set()
        done = receive("done")
        finished = True
    finally:
        for proc in procs:
            if not finished:
                proc.terminate()  # a run that failed: stop the other workers now
            proc.join(timeout=PROCESS_TIMEOUT)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    user, system = sum(msg[4] for msg in done), sum(msg[5] for msg in done)
    return ProcessRun(
        completions=[t for msg in done for t in msg[2]],
        conflicts=sum(msg[3] for msg in done),
        cores_busy=sum((msg[4] + msg[5]) / msg[6] for msg in done),
        kernel_share=system / max(user + system, 1e-9),
    )


def chit_process_throughput(sessions: int, agents: int) -> tuple[float, ProcessRun]:
    """Commits per second of ``sessions`` processes (an Engine each) over ``agents`` lanes."""
    agents = min(sessions, agents)
    with fresh_repo() as tmp:
        home = tmp / "home"
        admin.init_home(home)
        tokens = [str(admin.mint_token(home, agent=f"bench{a}", operations=OPERATIONS,
                                       paths=SCOPE, ttl_seconds=TOKEN_TTL)["token"])
                  for a in range(agents)]
        jobs = [ChitJob(str(home), str(tmp / "repo"), f"bench{k % agents}", tokens[k % agents],
                        f"p{k}") for k in range(sessions)]
        run = run_processes(jobs)
        repo = pygit2.Repository(str(tmp / "repo"))
        on_lanes = sum(lane_length(repo, f"refs/heads/agent/bench{a}") for a in range(agents))
        if on_lanes != len(run.completions) + sessions:
            raise SystemExit(f"chit throughput ({sessions} processes): {on_lanes} commits on the "
                             f"lanes, {len(run.completions) + sessions} made")
        return per_second(run.completions), run


def raw_process_throughput(processes: int) -> tuple[float, ProcessRun]:
    """Commits per second of ``processes`` raw pygit2 processes, each on its own branch."""
    with fresh_repo() as tmp:
        jobs = [RawJob(str(tmp / "repo"), f"refs/heads/raw/p{k}", f"p{k}")
                for k in range(processes)]
        run = run_processes(jobs)
        repo = pygit2.Repository(str(tmp / "repo"))
        on_refs = sum(lane_length(repo, job.ref) for job in jobs)
        if on_refs != len(run.completions) + processes:
            raise SystemExit(f"raw throughput ({processes} processes): {on_refs} commits on the "
                             f"branches, {len(run.completions) + processes} made")
        return per_second(run.completions), run


def measure_process_throughput() -> dict[str, Any]:
    """Rounds of every configuration as processes, interleaved as in measure_throughput."""
    chit: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    chit_busy: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    conflicts: dict[int, int] = dict.fromkeys(THROUGHPUT_SESSIONS, 0)
    raw: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    raw_busy: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    chit_kernel: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    raw_kernel: dict[int, list[float]] = {n: [] for n in THROUGHPUT_SESSIONS}
    own_lanes: list[float] = []
    own_lanes_conflicts = 0
    lo, hi = THROUGHPUT_SESSIONS[0], THROUGHPUT_SESSIONS[-1]
    for _ in range(THROUGHPUT_ROUNDS):
        for n in THROUGHPUT_SESSIONS:
            rate, run = chit_process_throughput(n, THROUGHPUT_AGENTS)
            chit[n].append(rate)
            chit_busy[n].append(run.cores_busy)
            chit_kernel[n].append(run.kernel_share)
            conflicts[n] += run.conflicts
            rate, run = raw_process_throughput(n)
            raw[n].append(rate)
            raw_busy[n].append(run.cores_busy)
            raw_kernel[n].append(run.kernel_share)
        rate, run = chit_process_throughput(hi, hi)
        own_lanes.append(rate)
        own_lanes_conflicts += run.conflicts
    med = statistics.median
    scaling = med(chit[hi]) / med(chit[lo])
    return {
        "shape": "sessions as processes: one Engine per process (per MCP stdio connection, "
                 "as `chit mcp` runs today), spawned, on one home and repository",
        "seconds_per_run": THROUGHPUT_SECONDS,
        "rounds": THROUGHPUT_ROUNDS,
        "agents": THROUGHPUT_AGENTS,
        "chit_commits_per_s": {str(n): round(med(v), 1) for n, v in chit.items()},
        "raw_pygit2_commits_per_s": {str(n): round(med(v), 1) for n, v in raw.items()},
        "ratio_chit_over_raw": {str(n): round(med(chit[n]) / med(raw[n]), 3) for n in chit},
        "chit_conflicts_retried": {str(n): conflicts[n] for n in chit},
        f"chit_{hi}_over_{lo}": round(scaling, 2),
        f"raw_{hi}_over_{lo}": round(med(raw[hi]) / med(raw[lo]), 2),
        f"diagnostic_chit_{hi}_sessions_{hi}_agents_commits_per_s": round(med(own_lanes), 1),
        f"diagnostic_chit_{hi}_sessions_{hi}_agents_conflicts_retried": own_lanes_conflicts,
        f"target_chit_{hi}_over_{lo}_at_least": TARGET_THROUGHPUT_16_OVER_1,
        "met": scaling >= TARGET_THROUGHPUT_16_OVER_1,
        "cores_busy": {
            "chit": {str(n): round(med(v), 2) for n, v in chit_busy.items()},
            "raw_pygit2": {str(n): round(med(v), 2) for n, v in raw_busy.items()},
        },
        "kernel_share_of_cpu": {
            "chit": {str(n): round(med(v), 2) for n, v in chit_kernel.items()},
            "raw_pygit2": {str(n): round(med(v), 2) for n, v in raw_kernel.items()},
        },
        "runs_commits_per_s": {
            "chit": {str(n): [round(x, 1) for x in v] for n, v in chit.items()},
            "raw_pygit2": {str(n): [round(x, 1) for x in v] for n, v in raw.items()},
        },
    }


# --- latency with a remote ------------------------------------------------------------


def git_clone_bare(source: Path, dest: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", "--bare", str(source), str(dest)], check=True,
                   capture_output=True)
    return dest


@contextmanager
def chit_remote_world() -> Iterator[tuple[ChitWorld, Path, Path]]:
    """An Engine on a clone of a local bare origin, pushing its lanes there."""
    from engine.service import RepoSpec  # the repositories an engine serves, with their remote

    with fresh_repo() as tmp:
        origin = git_clone_bare(tmp / "repo", tmp / "origin.git")
        clone = git_clone_bare(origin, tmp / "engine.git")
        home = tmp / "home"
        admin.init_home(home)
        engine = Engine(home, [RepoSpec("repo", clone, remote=str(origin))])
        token = str(admin.mint_token(home, agent="bench0", operations=OPERATIONS,
                                     paths=SCOPE, ttl_seconds=TOKEN_TTL)["token"])
        listed = engine.offer(token)
        if not listed["ok"]:
            raise SystemExit(f"offer refused: {listed['error']}")
        with engine:
            yield ChitWorld(engine, clone, [ChitAgent("bench0", token,
                                                      str(listed["catalog_hash"]))]), clone, origin


@dataclass
class RawRemoteBranch:
    """The peer: a raw pygit2 commit, a record commit, and `git push --atomic` of three refs."""

    branch: RawBranch
    git_dir: Path
    origin: Path
    record_ref: str = "refs/chit/provenance/raw"
    catalogs_ref: str = "refs/chit/catalogs"

    @classmethod
    def open(cls, clone: Path, origin: Path, ref: str) -> RawRemoteBranch:
        peer = cls(RawBranch.open(clone, ref), clone, origin)
        repo = peer.branch.repo
        blob = repo.create_blob(b"catalog")
        builder = repo.TreeBuilder()
        builder.insert("c" * 64, blob, FileMode.BLOB)
        sig = peer.branch.sig
        repo.create_commit(peer.catalogs_ref, sig, sig, "catalogs\n", builder.write(), [])
        return peer

    def commit(self, files: dict[str, bytes], message: str) -> pygit2.Oid:
        oid = self.branch.commit(files, message)
        repo = self.branch.repo
        parent = repo.references.get(self.record_ref)
        builder = repo.TreeBuilder()
        builder.insert(str(oid), repo.create_blob(message.encode()), FileMode.BLOB)
        sig = self.branch.sig
        repo.create_commit(self.record_ref, sig, sig, "record\n", builder.write(),
                           [] if parent is None else [parent.target])
        subprocess.run(["git", f"--git-dir={self.git_dir}", "push", "--atomic", "--porcelain",
                        "--quiet", str(self.origin), self.branch.ref, self.record_ref,
                        self.catalogs_ref], check=True, capture_output=True)
        return oid


def measure_remote_latency() -> dict[str, list[float]]:
    commit_s: list[float] = []
    total_s: list[float] = []
    raw_s: list[float] = []
    clock = time.perf_counter
    with chit_remote_world() as (world, clone, origin), fresh_repo() as raw_tmp:
        session = ChitSession(world.engine, world.agents[0], "remote")
        raw_origin = git_clone_bare(raw_tmp / "repo", raw_tmp / "origin.git")
        raw_clone = git_clone_bare(raw_origin, raw_tmp / "clone.git")
        peer = RawRemoteBranch.open(raw_clone, raw_origin, "refs/heads/raw/remote")
        for n in range(REMOTE_WARMUP + REMOTE_COMMITS):
            files = change("remote", n)
            writes, message = write_args(files), MESSAGE.format(n=FILES_PER_COMMIT)
            if n % 2:
                r0 = clock()
                peer.commit(files, RAW_MESSAGE)
                r1 = t0 = clock()
                session.write_all(writes)
                t1 = clock()
                session.commit(message)
                t2 = clock()
            else:
                t0 = clock()
                session.write_all(writes)
                t1 = clock()
                session.commit(message)
                t2 = r0 = clock()
                peer.commit(files, RAW_MESSAGE)
                r1 = clock()
            if n >= REMOTE_WARMUP:
                commit_s.append(t2 - t1)
                total_s.append(t2 - t0)
                raw_s.append(r1 - r0)
        lane = "refs/heads/agent/bench0"
        theirs, ours = pygit2.Repository(str(origin)), pygit2.Repository(str(clone))
        for ref in (lane, "refs/chit/provenance/bench0", "refs/chit/catalogs"):
            if theirs.references[ref].target != ours.references[ref].target:
                raise SystemExit(f"remote latency run: the origin's {ref} is not the engine's")
        if lane_length(theirs, lane) != REMOTE_WARMUP + REMOTE_COMMITS or session.conflicts:
            raise SystemExit("remote latency run: not every chit commit reached the origin")
        raw_origin_repo = pygit2.Repository(str(raw_origin))
        if lane_length(raw_origin_repo, "refs/heads/raw/remote") != REMOTE_WARMUP + REMOTE_COMMITS:
            raise SystemExit("remote latency run: not every raw commit reached the origin")
    return {"commit": commit_s, "total": total_s, "raw": raw_s}


def remote_latency_result() -> dict[str, Any]:
    lat = measure_remote_latency()
    ratio = statistics.median(lat["commit"]) / statistics.median(lat["raw"])
    total = statistics.median(lat["total"]) / statistics.median(lat["raw"])
    return {
        "shape": "each commit pushed to a local bare origin (file path) in one atomic push of "
                 "lane, provenance ref, attestation notes and catalogs; peer: raw pygit2 commit "
                 "+ record commit + `git push --atomic` of lane, record and catalogs",
        "commits": REMOTE_COMMITS,
        "chit_commit_ms": ms(lat["commit"]),
        "chit_write_x10_plus_commit_ms": ms(lat["total"]),
        "peer_commit_plus_git_push_ms": ms(lat["raw"]),
        "ratio_chit_commit_over_peer": round(ratio, 2),
        "ratio_chit_write_x10_plus_commit_over_peer": round(total, 2),
        "target_ratio_at_most": TARGET_REMOTE_LATENCY_RATIO,
        "met_commit": ratio <= TARGET_REMOTE_LATENCY_RATIO,
    }


# --- harness -----------------------------------------------------------------------


def print_profile(profilers: list[cProfile.Profile], title: str) -> None:
    for key in ("cumulative", "tottime"):
        print(f"\n== {title}, top {PROFILE_LINES} by {key} ==", file=sys.stderr)
        stats = pstats.Stats(profilers[0], stream=sys.stderr)
        for more in profilers[1:]:
            stats.add(more)
        stats.sort_stats(key).print_stats(PROFILE_LINES)


def profile_chit(commits: int) -> None:
    with chit_world(1) as world:
        session = ChitSession(world.engine, world.agents[0], "profile")
        work = [(write_args(change("profile", n)), MESSAGE.format(n=FILES_PER_COMMIT))
                for n in range(commits + 1)]
        session.write_all(work[0][0])
        session.commit(work[0][1])
        profiler = cProfile.Profile()
        profiler.enable()
        for writes, message in work[1:]:
            session.write_all(writes)
            session.commit(message)
        profiler.disable()
    print_profile([profiler], f"chit, 1 session, {commits} commits "
                              f"(write_file x{FILES_PER_COMMIT} + commit)")
    hi = THROUGHPUT_SESSIONS[-1]
    profilers: list[cProfile.Profile] = []
    rate, retried = chit_throughput(hi, THROUGHPUT_AGENTS, profilers)
    print_profile(profilers, f"chit, {hi} sessions over {THROUGHPUT_AGENTS} agents, "
                             f"{THROUGHPUT_SECONDS} s ({rate:.1f} commits/s, {retried} conflicts "
                             "retried), all threads merged")


def ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", nargs="?", type=int, const=PROFILE_COMMITS, default=0,
                        metavar="N", help=f"cProfile N chit commits (default {PROFILE_COMMITS}) "
                        f"and a {THROUGHPUT_SESSIONS[-1]}-session run")
    parser.add_argument("--only", choices=("remote",), help="run one measurement alone")
    args = parser.parse_args()
    began = time.perf_counter()

    check_chit()
    check_raw()
    if args.only == "remote":
        print(json.dumps({"latency_remote": remote_latency_result(),
                          "wall_seconds": round(time.perf_counter() - began, 1)}, indent=2))
        return

    lat = measure_latency()
    commit_ratio = statistics.median(lat["commit"]) / statistics.median(lat["raw"])
    total_ratio = statistics.median(lat["total"]) / statistics.median(lat["raw"])
    throughput = measure_throughput()
    throughput_processes = measure_process_throughput()
    remote = remote_latency_result()

    result = {
        "benchmark": f"commit a {FILES_PER_COMMIT}-file change: chit Engine.invoke "
                     "(write_file + commit) vs raw pygit2 (in-memory Index + create_commit)",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "pygit2": pygit2.__version__,
        "libgit2": pygit2.LIBGIT2_VERSION,
        "tmpdir": tempfile.gettempdir(),
        "seed_files": SEED_FILES,
        "latency": {
            "commits": LATENCY_COMMITS,
            "chit_commit_ms": ms(lat["commit"]),
            "chit_write_x10_plus_commit_ms": ms(lat["total"]),
            "raw_pygit2_commit_ms": ms(lat["raw"]),
            "ratio_chit_commit_over_raw": round(commit_ratio, 2),
            "ratio_chit_write_x10_plus_commit_over_raw": round(total_ratio, 2),
            "target_ratio_at_most": TARGET_LATENCY_RATIO,
            "met_commit": commit_ratio <= TARGET_LATENCY_RATIO,
            "met_write_x10_plus_commit": total_ratio <= TARGET_LATENCY_RATIO,
        },
        "throughput": throughput,
        "throughput_processes": throughput_processes,
        "latency_remote": remote,
        "wall_seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(result, indent=2))
    if args.profile:
        profile_chit(args.profile)


if __name__ == "__main__":
    main()
