"""Architecture rules (docs/architecture.md): one-way imports and pure modules."""

from __future__ import annotations

import ast
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
# Pure modules: bytes, keys and `now` in; a value or an error out.
PURE = [
    "engine/auth/agents.py",
    "engine/auth/caveats.py",
    "engine/auth/token.py",
    "engine/auth/verify.py",
    "engine/auth/cbor.py",
    "engine/auth/_mac.py",
    "engine/paths.py",
    "engine/limits.py",
    "engine/auth/sealing.py",
    "engine/audit/recordshape.py",
    "policy/__init__.py",
    "policy/model.py",
    "policy/evaluate.py",
    "policy/paths.py",
    "policy/errors.py",
    "policy/decision.py",
    "policy/_agents.py",
    "policy/_pattern.py",
    "policy/_pathindex.py",
    "engine/service/ratelimit.py",  # the clock comes in as an argument
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


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_one_way(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    for name in _imports(path):
        top = name.split(".")[0]
        if top in PACKAGES:
            assert top in ALLOWED[package], f"{path.relative_to(ROOT)} imports {name}"


@pytest.mark.parametrize("rel", PURE)
def test_pure_modules_do_no_io(rel: str) -> None:
    for name in _imports(ROOT / rel):
        assert name.split(".")[0] not in IO_MODULES, f"{rel} imports {name}"


def test_no_assert_in_product_code() -> None:
    """Checks written as assert vanish under `python -O`."""
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assert not isinstance(node, ast.Assert), f"assert in {path.relative_to(ROOT)}"
