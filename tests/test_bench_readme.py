"""bench/README.md's install line is enough: every module a benchmark imports is installed by it."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"engine", "gateway", "policy", "tests", "bench"} | {
    p.stem for p in (ROOT / "bench").glob("*.py")}


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _requirement_name(spec: str) -> str | None:
    """The distribution a requirement names, or ``None`` if its marker excludes this machine."""
    requirement = Requirement(spec)
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        return None
    return requirement.name.lower().replace("_", "-")


def _installed_by_bench_extra() -> set[str]:
    """Top-level modules the distributions of chit's dependencies and bench extra provide."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["bench"]]
    wanted = [name for name in map(_requirement_name, specs) if name is not None]
    modules: set[str] = set()
    seen: set[str] = set()
    while wanted:  # the requirements' own requirements come with them
        name = wanted.pop()
        if name in seen or name == "chit":
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        for file in dist.files or ():
            top = file.parts[0]
            if top.endswith((".dist-info", ".data")) or top == "..":
                continue
            modules.add(top.removesuffix(".py").split(".")[0])
        for req in dist.requires or ():
            name = _requirement_name(req)
            if name is not None:
                wanted.append(name)
    return modules


def test_every_benchmark_import_comes_with_the_bench_extra() -> None:
    available = _installed_by_bench_extra()
    missing = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        for module in _imported(path):
            if module in sys.stdlib_module_names or module in FIRST_PARTY:
                continue
            if module not in available:
                missing[path.name] = module
    assert missing == {}
