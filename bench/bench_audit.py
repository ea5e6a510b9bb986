"""Auditing a lane of 2,000 commits: ``verify_repository`` against ``git log``, in the same run.

Set-up (untimed): a fresh temporary repository seeded with a few files on
``main``, a chit home (``admin.init_home``) and one ``Engine``; one agent token,
then ``LANE_COMMITS`` commits on the agent's lane through ``Engine.invoke``, each
``write_file`` of 1 to 3 files (from a pool of ``POOL_FILES`` paths, so the
changes vary in size and place) and ``commit``. Every commit carries a signed
``chit-provenance/1`` record under ``refs/chit/provenance/<agent>``.

Measured, over the range ``main..agent/<name>``:

- chit in-process: wall time of ``engine.audit.verify.verify_repository(repo,
  ["agent/<name>"], public_keys=...)`` with the keys an auditor has
  (``signkeys.export_public_keys`` loaded by ``signkeys.load_public_keys``): for every
  commit the trailers, the record's presence and hash, the record's encoding,
  the Ed25519 signature, the record against the commit (tree, parents, author,
  committer, message digest), the trailers against the record, the lane, the
  delegation chain, the change against the commit's diff, and the catalog's
  storage, hash, encoding and scope. Reported as commits per second.
- peer: ``git log --format=%H%n%B main..agent/<name>`` as a subprocess (the
  same commits walked and their messages printed; no signature or record is
  checked). Reported as commits per second; the ratio chit / git log is what
  compares across machines.
- chit CLI, once: ``python -m gateway.cli audit verify --repo R --keys FILE
  agent/<name> --json`` as a subprocess, which includes interpreter start-up and
  imports; reported separately, with the same command over an empty range
  (``agent/<name>..agent/<name>``) to show what start-up alone costs.

Both sides run ``ROUNDS`` times, interleaved (alternating which goes first) so
that drift hits each alike, and the median is reported. Target (the project's
issue): chit in-process at least ``TARGET_COMMITS_PER_S`` commits per second.

Start-up checks make sure the timed path is not a no-op: the report is ok with
exactly ``LANE_COMMITS`` commits, each ok, and they are exactly the commits of
``main..agent/<name>``; a copy of the repository with one provenance record
deleted is NOT ok (exactly one finding, ``record_missing``, on that commit); and
verifying with a key the engine never used fails every commit's ``signature``
check. Every timed chit report is checked again (ok, ``LANE_COMMITS`` commits),
and every ``git log`` output must name every commit of the lane. If ``git`` is
not on ``PATH`` the peer is skipped and the report says so.

``--profile`` also prints to stderr a cProfile of one in-process verification.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_audit.py [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pygit2.enums import FileMode

from engine import admin
from engine.admin.seed import create_repository
from engine.audit.verify import verify_repository
from engine.auth import signkeys
from engine.git.repository import Repository
from engine.service import Engine

LANE_COMMITS = 2000
POOL_FILES = 8
ROUNDS = 5
TARGET_COMMITS_PER_S = 1000.0
PROFILE_LINES = 25
TOKEN_TTL = 3600
AGENT = "auditee"
OPERATIONS = ["read", "write", "commit"]
SCOPE = ["src/**"]
SUBPROCESS_TIMEOUT = 600.0


def seed_files() -> dict[str, bytes]:
    files = {"README.md": b"# bench\n"}
    for i in range(POOL_FILES):
        files[f"src/pkg{i % 3}/mod{i}.py"] = f"VALUE_{i} = {i}\n".encode() * (10 + i)
    return files


def change(n: int) -> dict[str, str]:
    """The ``n``-th change: 1 to 3 distinct paths of the pool, new content each time."""
    count = 1 + n % 3
    picks = sorted({(n * 5 + 3 * j) % POOL_FILES for j in range(count)})
    return {
        f"src/pkg{i % 3}/mod{i}.py": "".join(
            f"# commit {n} line {j}\nVALUE_{i}_{j} = {n * 100 + j}\n" for j in range(5 + n % 7)
        )
        for i in picks
    }


@dataclass
class World:
    tmp: Path
    repo: Path
    home: Path
    keys_file: Path
    public_keys: dict[str, Ed25519PublicKey]
    commits: list[str]  # main..agent/AGENT, newest first


@contextmanager
def audit_world() -> Iterator[World]:
    """A repository whose lane ``agent/AGENT`` holds ``LANE_COMMITS`` chit commits."""
    with tempfile.TemporaryDirectory(prefix="chit-bench-audit-") as tmp_name:
        tmp = Path(tmp_name)
        repo, home = tmp / "repo", tmp / "home"
        create_repository(repo, seed_files())
        admin.init_home(home)
        engine = Engine(home, repo)
        token = str(admin.mint_token(home, agent=AGENT, operations=OPERATIONS, paths=SCOPE,
                                     ttl_seconds=TOKEN_TTL)["token"])
        listed = engine.offer(token)
        if not listed["ok"]:
            raise SystemExit(f"offer refused: {listed['error']}")
        catalog = str(listed["catalog_hash"])

        def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            out = engine.invoke(token, tool, arguments, session="audit-bench",
                                offered_catalog_hash=catalog)
            if not out["ok"]:
                raise SystemExit(f"set-up: chit {tool} refused: {out['error']}")
            return dict(out["result"])

        made = []
        for n in range(LANE_COMMITS):
            files = change(n)
            for path, content in files.items():
                call("write_file", {"path": path, "content": content})
            made.append(str(call("commit", {"message": f"bench: change {len(files)} files"})
                            ["commit"]))
        doc = signkeys.export_public_keys(home)
        keys_file = tmp / "engine-keys.json"
        keys_file.write_text(json.dumps(doc), encoding="utf-8")
        git = pygit2.Repository(str(repo))
        walker = git.walk(git.references[f"refs/heads/agent/{AGENT}"].target)
        walker.hide(git.references["refs/heads/main"].target)
        commits = [str(c.id) for c in walker]
        if sorted(commits) != sorted(made):
            raise SystemExit("set-up: the lane does not hold exactly the commits made")
        yield World(tmp, repo, home, keys_file, signkeys.load_public_keys(doc), commits)


# --- the two sides ---------------------------------------------------------------


def chit_verify(world: World, repo: Path | None = None,
                public_keys: dict[str, Ed25519PublicKey] | None = None) -> dict[str, Any]:
    return verify_repository(repo or world.repo, [f"agent/{AGENT}"],
                             public_keys=world.public_keys if public_keys is None else public_keys)


def check_report(report: dict[str, Any], world: World, where: str) -> None:
    """The report is ok and covers exactly the lane's commits, each ok."""
    listed = [c["commit"] for c in report["commits"]]
    if (not report["ok"] or report["findings"] or len(listed) != LANE_COMMITS
            or sorted(listed) != sorted(world.commits)
            or not all(c["ok"] for c in report["commits"])):
        raise SystemExit(f"{where}: the report is not ok with exactly {LANE_COMMITS} commits "
                         f"(ok={report['ok']}, {len(listed)} commits, "
                         f"{len(report['findings'])} findings)")


def git_log_command(git: str, repo: Path) -> list[str]:
    return [git, "-C", str(repo), "log", "--format=%H%n%B", f"main..agent/{AGENT}"]


def run_git_log(git: str, world: World) -> float:
    """Seconds for one ``git log`` subprocess; its output must name every commit."""
    t0 = time.perf_counter()
    out = subprocess.run(git_log_command(git, world.repo),
                         capture_output=True, check=False, timeout=SUBPROCESS_TIMEOUT)
    elapsed = time.perf_counter() - t0
    named = set(out.stdout.decode().splitlines()) & set(world.commits)
    if out.returncode != 0 or len(named) != LANE_COMMITS:
        raise SystemExit(f"git log: exit {out.returncode}, {len(named)} of {LANE_COMMITS} "
                         f"commits named: {out.stderr.decode().strip()}")
    return elapsed


def cli_command(world: World, lane: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "audit", "verify", "--repo", str(world.repo),
            "--keys", str(world.keys_file), lane, "--json"]


def run_cli(world: World, lane: str, expected: int) -> float:
    """Seconds for one CLI subprocess; its report must be ok with ``expected`` commits."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    out = subprocess.run(cli_command(world, lane), capture_output=True, check=False,
                         env=env, timeout=SUBPROCESS_TIMEOUT)
    elapsed = time.perf_counter() - t0
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        report = {"ok": False, "commits": []}
    if out.returncode != 0 or not report["ok"] or len(report["commits"]) != expected:
        raise SystemExit(f"chit CLI ({lane}): exit {out.returncode}, ok={report['ok']}, "
                         f"{len(report['commits'])} commits, expected {expected}: "
                         f"{out.stderr.decode().strip()[-500:]}")
    if expected == LANE_COMMITS:
        check_report(report, world, "chit CLI")
    return elapsed


# --- start-up checks ---------------------------------------------------------------


def delete_record(repo_path: Path, commit: str) -> None:
    """Remove ``commit``'s envelope from the agent's provenance ref (a new record commit)."""
    repo = pygit2.Repository(str(repo_path))
    ref = repo.references[Repository.provenance_ref(AGENT)]
    parent = ref.peel(pygit2.Commit)
    fan = parent.tree[commit[:2]].peel(pygit2.Tree)
    sub = repo.TreeBuilder(fan)
    sub.remove(commit[2:])
    root = repo.TreeBuilder(parent.tree)
    root.insert(commit[:2], sub.write(), FileMode.TREE)
    sig = pygit2.Signature("tamper", "tamper@bench.invalid", 1_700_000_000, 0)
    new = repo.create_commit(None, sig, sig, "tamper: drop a record\n", root.write(), [parent.id])
    ref.set_target(new)


def startup_checks(world: World) -> dict[str, Any]:
    check_report(chit_verify(world), world, "start-up check")

    tampered = world.tmp / "tampered"
    shutil.copytree(world.repo, tampered)
    victim = world.commits[LANE_COMMITS // 2]
    delete_record(tampered, victim)
    report = chit_verify(world, tampered)
    findings = [(f["commit"], f["check"]) for f in report["findings"]]
    if report["ok"] or findings != [(victim, "record_missing")]:
        raise SystemExit(f"start-up check: a copy with one record deleted gave ok={report['ok']}, "
                         f"findings {findings[:5]}")

    kid = next(iter(world.public_keys))
    stranger = {kid: Ed25519PrivateKey.generate().public_key()}
    report = chit_verify(world, public_keys=stranger)
    failed = {f["commit"] for f in report["findings"] if f["check"] == "signature"}
    if report["ok"] or failed != set(world.commits):
        raise SystemExit(f"start-up check: a stranger's key did not fail every signature "
                         f"(ok={report['ok']}, {len(failed)} signature findings)")
    return {
        "one_record_deleted": {"ok": False, "findings": [
            {"commit": victim, "check": "record_missing"}]},
        "stranger_key": {"ok": False, "signature_findings": len(failed)},
    }


# --- harness -----------------------------------------------------------------------


def measure(world: World, git: str | None) -> dict[str, list[float]]:
    chit_s: list[float] = []
    git_s: list[float] = []
    clock = time.perf_counter
    for n in range(ROUNDS):
        if git is not None and n % 2:
            git_s.append(run_git_log(git, world))
        t0 = clock()
        report = chit_verify(world)
        chit_s.append(clock() - t0)
        check_report(report, world, f"timed round {n}")
        if git is not None and not n % 2:
            git_s.append(run_git_log(git, world))
    return {"chit": chit_s, "git": git_s}


def profile_verify(world: World) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    report = chit_verify(world)
    profiler.disable()
    check_report(report, world, "profiled run")
    for key in ("cumulative", "tottime"):
        print(f"\n== verify_repository, {LANE_COMMITS} commits, top {PROFILE_LINES} by {key} ==",
              file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(key).print_stats(PROFILE_LINES)


def per_s(seconds: list[float]) -> float:
    return LANE_COMMITS / statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile one in-process verification (to stderr)")
    args = parser.parse_args()
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    git = shutil.which("git")

    with audit_world() as world:
        setup_s = time.perf_counter() - began
        checks = startup_checks(world)
        if git is not None:
            run_git_log(git, world)  # start-up check of the peer, and a warm-up
        runs = measure(world, git)
        cli_s = run_cli(world, f"agent/{AGENT}", LANE_COMMITS)
        cli_empty_s = run_cli(world, f"agent/{AGENT}..agent/{AGENT}", 0)
        if args.profile:
            profile_verify(world)

    chit_rate = per_s(runs["chit"])
    peer: dict[str, Any]
    if git is None:
        peer = {"git": "not found on PATH: peer skipped, no ratio"}
    else:
        version = subprocess.run([git, "--version"], capture_output=True, text=True,
                                 check=False).stdout.strip()
        git_rate = per_s(runs["git"])
        peer = {
            "git": version,
            "git_log_command": "git log --format=%H%n%B main..agent/<name>",
            "git_log_ms": round(statistics.median(runs["git"]) * 1e3, 1),
            "git_log_commits_per_s": round(git_rate, 1),
            "ratio_chit_over_git_log_commits_per_s": round(chit_rate / git_rate, 3),
            "runs_git_log_ms": [round(s * 1e3, 1) for s in runs["git"]],
        }
    result = {
        "benchmark": f"audit a lane of {LANE_COMMITS} chit commits: verify_repository "
                     "(signed provenance, every check) vs git log over main..agent/<name>",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "pygit2": pygit2.__version__,
        "libgit2": pygit2.LIBGIT2_VERSION,
        "tmpdir": tempfile.gettempdir(),
        "commits": LANE_COMMITS,
        "rounds": ROUNDS,
        "chit_verify_ms": round(statistics.median(runs["chit"]) * 1e3, 1),
        "chit_commits_per_s": round(chit_rate, 1),
        **peer,
        "target_chit_commits_per_s_at_least": TARGET_COMMITS_PER_S,
        "met": chit_rate >= TARGET_COMMITS_PER_S,
        "runs_chit_verify_ms": [round(s * 1e3, 1) for s in runs["chit"]],
        "cli": {
            "command": "python -m gateway.cli audit verify --repo R --keys FILE agent/<name> "
                       "--json",
            "wall_ms": round(cli_s * 1e3, 1),
            "commits_per_s": round(LANE_COMMITS / cli_s, 1),
            "empty_range_wall_ms": round(cli_empty_s * 1e3, 1),
            "note": "one run each, as a subprocess: includes interpreter start-up and imports; "
                    "the empty range (agent/<name>..agent/<name>) is start-up alone",
        },
        "startup_checks": checks,
        "load_average_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "setup_seconds": round(setup_s, 1),
        "wall_seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
