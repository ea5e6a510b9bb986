"""The semantic index beside universal-ctags, on the same real sources, in the same run.

Corpus: the installed ``starlette``, ``pydantic`` and ``hypothesis`` packages
(``.py`` files, about 100,000 lines), as a chit repository and as a plain folder
for ctags.

Cases (each repeated, ctags and chit interleaved, medians reported):

- ``ctags``: ``ctags -R --languages=Python --fields=+nKS --output-format=json``
  over the folder (a subprocess: definitions only, no references or calls);
  wall time and its CPU time (``RUSAGE_CHILDREN``);
- ``cold``: ``Indexer.view`` with an empty persisted index: every file read
  through the repository view, parsed by the worker pool (definitions,
  signatures, docs, references, calls, imports), decoded, stored, merged. The
  first cold run includes starting the pool (``cold_first``); ``cold_cpu`` adds
  the CPU the workers report to this process's;
- ``warm``: a new ``Indexer`` on the persisted index the cold run wrote (what a
  new engine process does): nothing parsed; wall and CPU time;
- ``one_edit``: the warm view with one file staged (one file parsed, the
  tables derived from the base view);
- ``search``, ``context``, ``relations``, ``impact``: one call each through
  the engine on a warm index (the full call: token check, policy, handler,
  call-log entry), beside ``effective_scope`` (the same call path, no index);
- memory: a fresh child process builds the index and reports its peak RSS
  (``VmHWM``) after the build and again after making every file's occurrences
  (the most a query mix can make), beside its RSS before the build; another
  child reports the same peaks of Python allocations (``tracemalloc``). Once on
  the persisted index (``memory_warm``), once cold (``memory_cold``: the
  engine's process only; the workers are separate processes).

Start-up checks: both find ``Router`` in starlette/routing.py at the line
Python's ``ast`` gives.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_semantic.py`` (needs ``ctags``:
``apt-get install universal-ctags``). ``--runs N`` repeats each case N times.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import hypothesis
import pydantic
import starlette

from engine import git as vcs
from engine.admin import operator
from engine.admin.seed import create_repository, files_from_directory
from engine.semantic import indexer as index_module
from engine.semantic.indexer import Indexer
from engine.semantic.persist import PersistedIndex
from engine.service import Engine

KEY = b"bench-semantic-key-material-32by"


def corpus() -> dict[str, bytes]:
    files = files_from_directory(Path(starlette.__file__).parent, "src/starlette")
    files |= files_from_directory(Path(pydantic.__file__).parent, "src/pydantic")
    files |= files_from_directory(Path(hypothesis.__file__).parent, "src/hypothesis")
    return files


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds)."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _ctags(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _worker_cpu() -> float:
    """CPU seconds the process's parse workers have reported so far."""
    pool = index_module._POOL
    return 0.0 if pool is None else pool.worker_cpu


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def _status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def memory_child(repo_path: str, db_folder: str, traced: bool) -> int:
    """Build the index in this (fresh) process; print memory figures as JSON.

    VmHWM (the peak RSS since exec; ``ru_maxrss`` would carry the parent's
    figure over the fork) is read before and after the build, and again after
    every file's occurrences are made (the most a query mix can make). With
    ``traced``, Python's allocations are traced instead (``tracemalloc``, whose
    own bookkeeping inflates the RSS, so the two are measured in two runs).
    """
    repo = vcs.Repository(repo_path)
    if traced:
        tracemalloc.start()
    before = _status_mb("VmHWM")
    indexer = Indexer(PersistedIndex(db_folder, lambda: KEY))
    index = indexer.view(repo, "bench", None)
    out: dict[str, object] = {"loaded": indexer.loaded, "parsed": indexer.parsed,
                              "files": len(index.indexed)}
    if traced:
        out["tracemalloc_peak_index_mb"] = round(tracemalloc.get_traced_memory()[1] / 1e6, 1)
    else:
        out["rss_before_mb"] = before
        out["rss_peak_index_mb"] = _status_mb("VmHWM")
    out["occurrences"] = sum(len(record.occurrences) for record in index.indexed.values())
    if traced:
        out["tracemalloc_peak_all_occurrences_mb"] = round(
            tracemalloc.get_traced_memory()[1] / 1e6, 1)
    else:
        out["rss_peak_all_occurrences_mb"] = _status_mb("VmHWM")
    json.dump(out, sys.stdout)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--memory-child", nargs=2, metavar=("REPO", "DB"))
    parser.add_argument("--traced", action="store_true")
    options = parser.parse_args()
    if options.memory_child:
        return memory_child(*options.memory_child, options.traced)
    ctags = shutil.which("ctags")
    files = corpus()
    lines = sum(data.count(b"\n") for data in files.values())
    tmp = Path(tempfile.mkdtemp(prefix="chit-bench-sem-"))
    try:
        plain = tmp / "plain"
        for path, data in files.items():
            (plain / path).parent.mkdir(parents=True, exist_ok=True)
            (plain / path).write_bytes(data)
        create_repository(tmp / "repo", files)
        operator.init_home(tmp / "home")
        repo = vcs.Repository(tmp / "repo")
        routing = Path(starlette.__file__).parent / "routing.py"
        tree = ast.parse(routing.read_text(encoding="utf-8"))
        router_line = next(n.lineno for n in tree.body
                           if isinstance(n, ast.ClassDef) and n.name == "Router")
        results: dict[str, object] = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()],
            "files": len(files), "lines": lines, "bytes": sum(len(v) for v in files.values()),
        }

        argv: list[str] = []
        if ctags is not None:
            argv = [ctags, "-R", "--languages=Python", "--fields=+nKS",
                    "--output-format=json", "-f", "-", str(plain)]
            out = subprocess.run(argv, capture_output=True, check=True).stdout
            tags = [json.loads(line) for line in out.splitlines() if line.startswith(b"{")]
            assert any(t.get("name") == "Router" and t.get("line") == router_line
                       and t["path"].endswith("starlette/routing.py") for t in tags)
            results["ctags_definitions"] = len(tags)
            version = subprocess.run([ctags, "--version"], capture_output=True, text=True)
            results["ctags_version"] = version.stdout.splitlines()[0]

        # Cold and warm, interleaved with ctags.
        ctags_wall: list[float] = []
        ctags_cpu: list[float] = []
        cold: list[float] = []
        cold_cpu: list[float] = []
        warm_wall: list[float] = []
        warm_cpu: list[float] = []
        folders: list[Path] = []
        for run in range(options.runs):
            if argv:
                wall, cpu = _ctags(argv)
                ctags_wall.append(wall)
                ctags_cpu.append(cpu)
            folder = tmp / f"db{run}"
            folders.append(folder)
            fresh = Indexer(PersistedIndex(folder, lambda: KEY))
            workers_before = _worker_cpu()
            wall, cpu = _timed(lambda i=fresh: i.view(repo, "bench", None))  # type: ignore[misc]
            assert fresh.parsed > 0
            if run == 0:
                results["cold_first_s"] = round(wall, 4)
            cold.append(wall)
            cold_cpu.append(cpu + _worker_cpu() - workers_before)
            again = Indexer(PersistedIndex(folder, lambda: KEY))
            wall, cpu = _timed(lambda i=again: i.view(repo, "bench", None))  # type: ignore[misc]
            assert again.parsed == 0 and again.loaded == fresh.parsed
            warm_wall.append(wall)
            warm_cpu.append(cpu)
        if argv:
            results["ctags_s"] = _median(ctags_wall)
            results["ctags_cpu_s"] = _median(ctags_cpu)
        results["cold_s"] = _median(cold[1:] or cold)
        results["cold_cpu_s"] = _median(cold_cpu[1:] or cold_cpu)
        results["warm_s"] = _median(warm_wall)
        results["warm_cpu_s"] = _median(warm_cpu)

        warm = Indexer(PersistedIndex(folders[0], lambda: KEY))
        index = warm.view(repo, "bench", None)
        router = [d for d in index.by_name["Router"] if d.path == "src/starlette/routing.py"]
        assert router and router[0].name_range.start_line + 1 == router_line
        results["chit_definitions"] = sum(len(v) for v in index.by_name.values())
        results["chit_occurrences"] = index.occurrence_count()
        counter = iter(range(10**6))

        def one_edit() -> None:
            staged = vcs.StagedChange()
            data = files["src/starlette/routing.py"] + f"\n# edit {next(counter)}\n".encode()
            repo.stage_write("bench", staged, "src/starlette/routing.py", data)
            warm.view(repo, "bench", staged)

        results["one_edit_ms"] = 1000 * _median(
            [_timed(one_edit)[0] for _ in range(21)])

        engine = Engine(tmp / "home", tmp / "repo")
        token = str(operator.mint_token(tmp / "home", agent="bench", operations=["read"],
                                        paths=["src/**"], ttl_seconds=3600)["token"])
        listed = engine.offer(token)["catalog_hash"]

        def invoke(tool: str, args: dict[str, object]) -> None:
            answer = engine.invoke(token, tool, args, session="b", offered_catalog_hash=listed)
            assert answer["ok"], answer

        invoke("search_symbols", {"query": "Router"})  # warm the engine's index
        queries: dict[str, tuple[str, dict[str, object]]] = {
            "effective_scope": ("effective_scope", {}),
            "search": ("search_symbols", {"query": "Router"}),
            "search_fuzzy": ("search_symbols", {"query": "Ruoter"}),
            "context": ("symbol_context", {"symbol": "BaseModel", "path": "src/pydantic/main.py"}),
            "relations": ("symbol_relations", {"symbol": "request_response"}),
            "impact": ("change_impact", {"symbols": ["request_response"]}),
        }
        for _ in range(3):
            for tool, args in queries.values():
                invoke(tool, args)
        timings: dict[str, list[float]] = {name: [] for name in queries}
        for _ in range(21):  # interleaved, so load spikes hit every case alike
            for name, (tool, args) in queries.items():
                timings[name].append(_timed(lambda t=tool, a=args: invoke(t, a))[0])  # type: ignore[misc]
        for name, values in timings.items():
            results[f"{name}_ms"] = 1000 * _median(values)

        cases = [("memory_warm", folders[0], []), ("memory_warm", folders[0], ["--traced"]),
                 ("memory_cold", tmp / "db-memory", []),
                 ("memory_cold", tmp / "db-memory-traced", ["--traced"])]
        for case, folder, extra in cases:
            child = subprocess.run(
                [sys.executable, __file__, "--memory-child", str(tmp / "repo"), str(folder),
                 *extra],
                capture_output=True, check=True, text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            found = results.setdefault(case, {})
            assert isinstance(found, dict)
            found.update(json.loads(child.stdout))
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
