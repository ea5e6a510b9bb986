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
   sessions are spread over 4 agents (4 tokens), so up to 4 sessions share a
   lane, and each session writes its own files. A ``conflict`` from a session of
   the same agent committing in between is retried (the engine merges onto the
   lane) and counted. Peer: raw pygit2 threads, each with its own repository
   handle and its own branch. Target: chit with 16 sessions at least as fast as
   with 1.

Start-up checks make sure a chit commit lands on its lane with exactly the
expected tree and trailers (and that a write without the listed catalog is
refused), and a raw commit lands likewise; every timed call's result is checked,
and after each throughput run the commits counted are the commits on the lanes,
so no side can silently measure a failing path. ``--profile [N]`` also prints a
cProfile of N chit commits (``write_file`` x10 + ``commit``) to stderr.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_commit.py [--profile [N]]``
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
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

from engine import operator
from engine.seed import create_repository
from engine.service import Engine

FILES_PER_COMMIT = 10
SEED_FILES = 50
LATENCY_WARMUP = 10
LATENCY_COMMITS = 150
THROUGHPUT_SESSIONS = (1, 4, 16)
THROUGHPUT_AGENTS = 4
THROUGHPUT_SECONDS = 3.0
THROUGHPUT_WINDOWS = 3
CONFLICT_RETRIES = 20
PROFILE_COMMITS = 100
TARGET_LATENCY_RATIO = 3.0
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
        operator.init_home(home)
        engine = Engine(home, tmp / "repo")
        made = []
        for a in range(agents):
            name = f"bench{a}"
            token = str(operator.mint_token(home, agent=name, operations=OPERATIONS,
                                            paths=SCOPE, ttl_seconds=TOKEN_TTL)["token"])
            listed = engine.offer(token)
            if not listed["ok"]:
                raise SystemExit(f"offer refused: {listed['error']}")
            made.append(ChitAgent(name, token, str(listed["catalog_hash"])))
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
        first = self.ref not in repo.references
        oid = repo.create_commit(None if first else self.ref, self.sig, self.sig, message,
                                 tree, [self.head])
        if first:
            repo.references.create(self.ref, oid)
        self.head = oid
        return oid


def raw_message(n: int) -> str:
    # The same size of message as chit's: the summary plus a trailer block.
    trailers = "".join(f"Chit-{k}: {'x' * 64}\n" for k in ("Agent", "Session", "Token-Id",
                                                           "Catalog-Hash", "Catalog-Encoding"))
    return MESSAGE.format(n=n) + "\n\n" + trailers


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
        files = change("check", 0)
        session.write_all(write_args(files))
        oid = session.commit(MESSAGE.format(n=FILES_PER_COMMIT))
        repo = pygit2.Repository(str(world.repo))
        main = repo.references["refs/heads/main"].peel(pygit2.Commit)
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
        if str(main.id) != str(repo.references["refs/heads/main"].target) or tree_files(
            repo, main
        ) != seed:
            problems.append("main changed")
        if problems:
            raise SystemExit("start-up check (chit) failed: " + "; ".join(problems))


def check_raw() -> None:
    with fresh_repo() as tmp:
        branch = RawBranch.open(tmp / "repo", "refs/heads/raw/check")
        files = change("check", 0)
        oid = branch.commit(files, raw_message(0))
        repo = pygit2.Repository(str(tmp / "repo"))
        landed = repo.references["refs/heads/raw/check"].peel(pygit2.Commit)
        second = branch.commit(change("check", 1), raw_message(1))
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
            rmessage = raw_message(n)
            t0 = clock()
            session.write_all(writes)
            t1 = clock()
            session.commit(message)
            t2 = clock()
            branch.commit(files, rmessage)
            t3 = clock()
            if n >= LATENCY_WARMUP:
                commit_s.append(t2 - t1)
                total_s.append(t2 - t0)
                raw_s.append(t3 - t2)
        repo = pygit2.Repository(str(world.repo))
        landed = lane_length(repo, f"refs/heads/agent/{world.agents[0].name}")
        if landed != LATENCY_WARMUP + LATENCY_COMMITS or session.conflicts:
            raise SystemExit(f"latency run: {landed} chit commits on the lane")
    return {"commit": commit_s, "total": total_s, "raw": raw_s}


# --- throughput ---------------------------------------------------------------------


def run_threads(workers: list[Callable[[Callable[[], bool]], list[float]]]) -> list[float]:
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


def rates(completions: list[float]) -> dict[str, float]:
    width = THROUGHPUT_SECONDS / THROUGHPUT_WINDOWS
    counted = [t for t in completions if t <= THROUGHPUT_SECONDS]
    per_window = [
        sum(1 for t in counted if i * width < t <= (i + 1) * width) / width
        for i in range(THROUGHPUT_WINDOWS)
    ]
    return {
        "commits_per_s": round(len(counted) / THROUGHPUT_SECONDS, 1),
        "commits_per_s_window_median": round(statistics.median(per_window), 1),
        "commits": len(completions),
    }


def chit_throughput(sessions: int) -> dict[str, Any]:
    agents = min(sessions, THROUGHPUT_AGENTS)
    with chit_world(agents) as world:
        chit_sessions = [
            ChitSession(world.engine, world.agents[k % agents], f"s{k}") for k in range(sessions)
        ]

        def worker(k: int) -> Callable[[Callable[[], bool]], list[float]]:
            session = chit_sessions[k]
            owner = f"s{k}"

            def cycle(n: int) -> None:
                session.write_all(write_args(change(owner, n)))
                session.commit(MESSAGE.format(n=FILES_PER_COMMIT))

            cycle(0)  # warm-up: the thread's repository handle, the lane

            def loop(running: Callable[[], bool]) -> list[float]:
                times, n = [], 1
                while running():
                    cycle(n)
                    times.append(time.perf_counter())
                    n += 1
                return times

            return loop

        completions = run_threads([worker(k) for k in range(sessions)])
        repo = pygit2.Repository(str(world.repo))
        on_lanes = sum(lane_length(repo, f"refs/heads/agent/{a.name}") for a in world.agents)
        if on_lanes != len(completions) + sessions:
            raise SystemExit(f"chit throughput ({sessions}): {on_lanes} commits on the lanes, "
                             f"{len(completions) + sessions} made")
        out = rates(completions)
        out["conflicts_retried"] = sum(s.conflicts for s in chit_sessions)
        return out


def raw_throughput(threads: int) -> dict[str, Any]:
    with fresh_repo() as tmp:
        branches = [RawBranch.open(tmp / "repo", f"refs/heads/raw/t{k}") for k in range(threads)]

        def worker(k: int) -> Callable[[Callable[[], bool]], list[float]]:
            owner = f"t{k}"
            branches[k].commit(change(owner, 0), raw_message(0))  # warm-up, as for chit

            def loop(running: Callable[[], bool]) -> list[float]:
                times, n = [], 1
                while running():
                    branches[k].commit(change(owner, n), raw_message(n))
                    times.append(time.perf_counter())
                    n += 1
                return times

            return loop

        completions = run_threads([worker(k) for k in range(threads)])
        repo = pygit2.Repository(str(tmp / "repo"))
        on_refs = sum(lane_length(repo, f"refs/heads/raw/t{k}") for k in range(threads))
        if on_refs != len(completions) + threads:
            raise SystemExit(f"raw throughput ({threads}): {on_refs} commits on the refs")
        return rates(completions)


# --- harness -----------------------------------------------------------------------


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
    for key in ("cumulative", "tottime"):
        print(f"\n== chit, {commits} commits of {FILES_PER_COMMIT} files "
              f"(write_file x{FILES_PER_COMMIT} + commit), top 25 by {key} ==", file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(key).print_stats(25)


def ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", nargs="?", type=int, const=PROFILE_COMMITS, default=0,
                        metavar="N", help=f"cProfile N chit commits (default {PROFILE_COMMITS})")
    args = parser.parse_args()
    began = time.perf_counter()

    check_chit()
    check_raw()

    lat = measure_latency()
    commit_ratio = statistics.median(lat["commit"]) / statistics.median(lat["raw"])
    total_ratio = statistics.median(lat["total"]) / statistics.median(lat["raw"])

    chit_tp = {str(n): chit_throughput(n) for n in THROUGHPUT_SESSIONS}
    raw_tp = {str(n): raw_throughput(n) for n in THROUGHPUT_SESSIONS}
    lo, hi = str(THROUGHPUT_SESSIONS[0]), str(THROUGHPUT_SESSIONS[-1])
    chit_scaling = chit_tp[hi]["commits_per_s"] / chit_tp[lo]["commits_per_s"]
    raw_scaling = raw_tp[hi]["commits_per_s"] / raw_tp[lo]["commits_per_s"]

    result = {
        "benchmark": f"commit a {FILES_PER_COMMIT}-file change: chit Engine.invoke "
                     "(write_file + commit) vs raw pygit2 (in-memory Index + create_commit)",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "pygit2": pygit2.__version__,
        "libgit2": pygit2.LIBGIT2_VERSION,
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
        "throughput": {
            "seconds_per_run": THROUGHPUT_SECONDS,
            "agents": THROUGHPUT_AGENTS,
            "chit": chit_tp,
            "raw_pygit2": raw_tp,
            "ratio_chit_over_raw": {
                n: round(chit_tp[n]["commits_per_s"] / raw_tp[n]["commits_per_s"], 3)
                for n in chit_tp
            },
            f"chit_{hi}_over_{lo}": round(chit_scaling, 2),
            f"raw_{hi}_over_{lo}": round(raw_scaling, 2),
            "target_chit_16_over_1_at_least": TARGET_THROUGHPUT_16_OVER_1,
            "met": chit_scaling >= TARGET_THROUGHPUT_16_OVER_1,
        },
        "wall_seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(result, indent=2))
    if args.profile:
        profile_chit(args.profile)


if __name__ == "__main__":
    main()
