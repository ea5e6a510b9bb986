"""Architecture rules (docs/architecture.md): one-way imports, the engine's floors, pure modules.

Every import counts, wherever it is written: at the top of a module, inside a
function, or under ``TYPE_CHECKING`` (a cycle held together by late imports is
still a cycle a reader has to hold in their head).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "engine", "policy")
# gateway -> engine -> policy; nothing points back up.
ALLOWED = {
    "gateway": {"gateway", "engine", "policy"},
    "engine": {"engine", "policy"},
    "policy": {"policy"},
}
# The engine's floors, top to bottom. A module may import modules of its own
# floor and of floors below it, never above (docs/architecture.md, "Floors").
FLOORS = (
    "engine.admin",
    "engine.service",
    "engine.tools",
    "engine.semantic",
    "engine.audit",
    "engine.catalog",
    "engine.git",
    "engine.state",
    "engine.auth",
    "engine.paths",
    "engine.progress",
    "engine.errors",
    "engine.limits",
)
# What the edges may reach of the engine: its interface, the operator's
# functions and the errors.
GATEWAY_REACH = {"engine.service", "engine.admin", "engine.errors"}
# Pure modules: bytes, keys and `now` in; a value or an error out.
PURE = [
    "engine/limits.py",
    "engine/errors.py",
    "engine/paths.py",
    "engine/auth/agents.py",
    "engine/auth/caveats.py",
    "engine/auth/reponames.py",
    "engine/auth/token.py",
    "engine/auth/verify.py",
    "engine/auth/cbor.py",
    "engine/auth/_mac.py",
    "engine/auth/sealing.py",
    "engine/audit/recordshape.py",
    "engine/audit/merkle.py",
    "engine/audit/note.py",
    "engine/catalog/schemas.py",
    "engine/catalog/declarations.py",
    "engine/service/ratelimit.py",  # the clock comes in as an argument
    "engine/service/coherence.py",
    "policy/__init__.py",
    "policy/model.py",
    "policy/evaluate.py",
    "policy/paths.py",
    "policy/segments.py",
    "policy/errors.py",
    "policy/decision.py",
    "policy/_agents.py",
    "policy/_pattern.py",
    "policy/_pathindex.py",
    "policy/confirm.py",
    "policy/tools.py",
    "engine/catalog/confirmation.py",
]
IO_MODULES = {
    "os",
    "pathlib",
    "io",
    "socket",
    "subprocess",
    "sqlite3",
    "pygit2",
    "shutil",
    "tempfile",
    "time",
    "datetime",
    "urllib",
    "http",
    "httpx",
    "requests",
    "logging",
}


def _paths() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_name(p): p for p in _paths()}


def _is_package(name: str) -> bool:
    return _modules()[name].name == "__init__.py"


def _imported(name: str) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every import in module ``name``, resolved to dotted names."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    source = _modules()[name].read_text(encoding="utf-8")
    yield from _imports_in(source, package, set(_modules()))


def _imports_in(source: str, package: str, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every import statement anywhere in ``source``.

    ``from X import y`` names ``X.y`` when that is a module in ``known``, else
    ``X``. Relative imports are resolved against ``package``.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno


def _ours(module: str) -> str | None:
    """The module of ours that importing ``module`` names, or ``None`` for a third party."""
    while module:
        if module in _modules():
            return module
        module = module.rpartition(".")[0]
    return None


@cache
def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name in _modules():
        graph[name] = set()
        for imported, _line in _imported(name):
            ours = _ours(imported)
            if ours is not None and ours != name:
                graph[name].add(ours)
    return graph


def _floor(name: str) -> int | None:
    for index, floor in enumerate(FLOORS):
        if name == floor or name.startswith(floor + "."):
            return index
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


@pytest.mark.parametrize("path", _paths(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_one_way(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    for imported, line in _imported(_name(path)):
        top = imported.split(".")[0]
        if top in PACKAGES:
            assert top in ALLOWED[package], f"{path.relative_to(ROOT)}:{line} imports {imported}"


def test_every_engine_module_is_on_a_floor() -> None:
    """A new part of the engine is declared here, with its place among the others."""
    lost = [n for n in _modules() if n.startswith("engine.") and _floor(n) is None]
    assert not lost, f"not on any floor (add them to FLOORS): {lost}"


@pytest.mark.parametrize(
    "name", [n for n in _modules() if n.startswith("engine.")], ids=lambda n: n
)
def test_engine_imports_only_downward(name: str) -> None:
    own = _floor(name)
    for imported, line in _imported(name):
        ours = _ours(imported)
        if ours is None or not ours.startswith("engine."):
            continue
        floor = _floor(ours)
        assert own is not None and floor is not None and floor >= own, (
            f"{_modules()[name].relative_to(ROOT)}:{line} imports {ours} "
            f"({FLOORS[floor] if floor is not None else '?'} is above "
            f"{FLOORS[own] if own is not None else '?'})"
        )


def test_no_import_cycle() -> None:
    """No cycle anywhere in engine, gateway or policy, late imports included."""
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    "name", [n for n in _modules() if n.startswith("gateway")], ids=lambda n: n
)
def test_gateway_reaches_the_engine_only_through_its_interface(name: str) -> None:
    for imported, line in _imported(name):
        ours = _ours(imported)
        if ours is not None and (ours == "engine" or ours.startswith("engine.")):
            assert ours in GATEWAY_REACH, (
                f"{_modules()[name].relative_to(ROOT)}:{line} imports {ours}; the edges "
                f"reach the engine only through {sorted(GATEWAY_REACH)}"
            )


@pytest.mark.parametrize("rel", PURE)
def test_pure_modules_do_no_io(rel: str) -> None:
    for imported, line in _imported(_name(ROOT / rel)):
        assert imported.split(".")[0] not in IO_MODULES, f"{rel}:{line} imports {imported}"


def test_no_assert_in_product_code() -> None:
    """Checks written as assert vanish under `python -O`."""
    for path in _paths():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assert not isinstance(node, ast.Assert), f"assert in {path.relative_to(ROOT)}"


def test_the_rules_see_late_and_relative_imports() -> None:
    """Imports inside functions, under TYPE_CHECKING and relative ones all count."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from engine.service import Engine\n"
        "def f():\n    from engine.admin import seed\n"
        "    from . import cbor\n    from ..git import Repository\n"
    )
    known = {"engine.admin.seed", "engine.auth.cbor", "engine.git"}
    found = {m for m, _line in _imports_in(source, "engine.auth", known)}
    assert found == {"typing", "engine.service", "engine.admin.seed", "engine.auth.cbor",
                     "engine.git"}


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
