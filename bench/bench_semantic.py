"""The semantic index beside universal-ctags, on the same real sources, in the same run.

Corpus: the installed ``starlette`` and ``pydantic`` packages (``.py`` files), as a
chit repository and as a plain folder for ctags.

Cases:

- ``ctags``: ``ctags -R --languages=Python --fields=+nKS --output-format=json``
  over the folder (a subprocess: definitions only, no references or calls);
- ``chit_cold``: ``Indexer.view`` on a fresh indexer: every file read through
  the repository view and parsed with tree-sitter (definitions, signatures,
  docs, references, calls, imports), then merged into lookup tables;
- ``chit_one_edit``: the same view with one file staged (the warm per-blob cache:
  one file parsed, the tables merged again);
- ``search``, ``relations``: one ``search_symbols`` and one ``symbol_relations``
  through the engine on a warm index (the full call: token check, policy, handler).

Start-up checks: both find ``Router`` in starlette/routing.py at the line
Python's ``ast`` gives. Timings are medians of 5 runs.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_semantic.py`` (needs ``ctags``:
``apt-get install universal-ctags``).
"""

from __future__ import annotations

import ast
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pydantic
import starlette

from engine import operator, vcs
from engine.seed import create_repository, files_from_directory
from engine.semantic.index import Indexer
from engine.service import Engine


def _median(fn: object, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ctags = shutil.which("ctags")
    files = files_from_directory(Path(starlette.__file__).parent, "src/starlette")
    files |= files_from_directory(Path(pydantic.__file__).parent, "src/pydantic")
    size = sum(len(v) for v in files.values())
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

        index = Indexer().view(repo, "bench", None)
        router = [d for d in index.by_name["Router"] if d.path == "src/starlette/routing.py"]
        assert router and router[0].name_range.start_line + 1 == router_line
        results: dict[str, object] = {"files": len(files), "bytes": size}
        results["chit_cold_s"] = _median(lambda: Indexer().view(repo, "bench", None), 3)
        warm = Indexer()
        warm.view(repo, "bench", None)
        counter = iter(range(10**6))

        def one_edit() -> None:
            staged = vcs.StagedChange()
            data = files["src/starlette/routing.py"] + f"\n# edit {next(counter)}\n".encode()
            repo.stage_write("bench", staged, "src/starlette/routing.py", data)
            warm.view(repo, "bench", staged)

        results["chit_one_edit_s"] = _median(one_edit)
        results["chit_definitions"] = sum(len(v) for v in index.by_name.values())
        results["chit_occurrences"] = sum(len(v) for v in index.uses.values())

        if ctags is not None:
            argv = [ctags, "-R", "--languages=Python", "--fields=+nKS",
                    "--output-format=json", "-f", "-", str(plain)]
            out = subprocess.run(argv, capture_output=True, check=True).stdout
            tags = [json.loads(line) for line in out.splitlines() if line.startswith(b"{")]
            assert any(t.get("name") == "Router" and t.get("line") == router_line
                       and t["path"].endswith("starlette/routing.py") for t in tags)
            results["ctags_s"] = _median(
                lambda: subprocess.run(argv, capture_output=True, check=True))
            results["ctags_definitions"] = len(tags)
            version = subprocess.run([ctags, "--version"], capture_output=True, text=True)
            results["ctags_version"] = version.stdout.splitlines()[0]
        else:
            results["ctags_s"] = None

        engine = Engine(tmp / "home", tmp / "repo")
        token = str(operator.mint_token(tmp / "home", agent="bench", operations=["read"],
                                        paths=["src/**"], ttl_seconds=3600)["token"])
        listed = engine.offer(token)["catalog_hash"]

        def invoke(tool: str, args: dict[str, object]) -> None:
            answer = engine.invoke(token, tool, args, session="b", offered_catalog_hash=listed)
            assert answer["ok"], answer

        invoke("search_symbols", {"query": "Router"})  # warm the engine's index
        results["search_ms"] = 1000 * _median(
            lambda: invoke("search_symbols", {"query": "Router"}), 21)
        results["relations_ms"] = 1000 * _median(
            lambda: invoke("symbol_relations", {"symbol": "request_response"}), 21)
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
