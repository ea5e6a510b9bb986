"""Relations where a name repeats: a file's own imports and definitions decide.

Two top-level ``build`` functions and two ``Model`` classes, in two packages,
and files that import one or the other, re-export one, import it from outside
the tree, define their own, or just use the name. Each case says which
definition a use may refer to (engine/semantic/binding.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import admin
from engine.admin.seed import create_repository
from engine.service import Engine
from tests.engine.engine_calls import EngineCalls

FILES = {
    "py/app/__init__.py": b"",
    "py/app/models.py": b"class Model:\n    pass\n\n\ndef build():\n    return Model()\n",
    "py/app/views.py": (
        b"from .models import Model, build\n\n\n"
        b"class View(Model):\n    pass\n\n\ndef show():\n    return build()\n"
    ),
    "py/other/__init__.py": b"",
    "py/other/models.py": b"class Model:\n    pass\n\n\ndef build():\n    return Model()\n",
    "py/other/user.py": (
        b"from other.models import Model, build\n\n\n"
        b"class User(Model):\n    pass\n\n\ndef make():\n    return build()\n"
    ),
    # Re-exports app's build: it proves nothing, so its users stay with both.
    "py/again/__init__.py": b"from app.models import build\n",
    "py/again/use.py": b"from again import build\n\n\ndef again_use():\n    return build()\n",
    # Imports a build from outside the tree: neither of ours.
    "py/outside.py": (
        b"from toolkit.factory import build\n\n\ndef outside_use():\n    return build()\n"
    ),
    # Defines its own build: its calls are its own.
    "py/local.py": b"def build():\n    return 1\n\n\ndef local_use():\n    return build()\n",
    # No import, no definition (a star import, a global): by name, both.
    "py/star.py": b"from app.models import *\n\n\ndef star_use():\n    return build()\n",
    "js/a.js": b"export function build() { return 1; }\n",
    "js/c.ts": b"export function build(): number { return 2; }\n",
    "js/b.js": b"import { build } from './a.js';\nexport function useA() { return build(); }\n",
    "js/d.ts": b"import { build } from './c';\nexport function useC() { return build(); }\n",
}


class World(EngineCalls):
    def __init__(self, tmp: Path) -> None:
        home, repo = tmp / "home", tmp / "repo"
        admin.init_home(home)
        create_repository(repo, FILES)
        self.engine = Engine(home, repo)
        self.token = str(admin.mint_token(home, agent="a", operations=["read"],
                                          paths=["**"], ttl_seconds=600)["token"])

    def relations(self, symbol: str, path: str, kind: str) -> set[tuple[str, str]]:
        result = self.ok(self.token, "symbol_relations",
                         {"symbol": symbol, "path": path, "kinds": [kind]})
        return {(r["symbol"]["symbol"], r["symbol"]["path"]) for r in result["relations"]}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("binding"))


def test_callers_follow_each_files_imports(world: World) -> None:
    # Through a relative import, a re-export and a star import: app's build.
    assert world.relations("build", "py/app/models.py", "callers") == {
        ("show", "py/app/views.py"),
        ("again_use", "py/again/use.py"),
        ("star_use", "py/star.py"),
    }
    assert world.relations("build", "py/other/models.py", "callers") == {
        ("make", "py/other/user.py")}
    assert world.relations("build", "py/local.py", "callers") == {("local_use", "py/local.py")}
    # outside_use's build comes from a package outside the tree: none of ours.
    for path in ("py/app/models.py", "py/other/models.py", "py/local.py"):
        assert "py/outside.py" not in {p for _s, p in world.relations("build", path, "callers")}


def test_a_name_with_no_binding_stays_matched_by_name(tmp_path: Path) -> None:
    """A use that no import or definition binds (a builtin, a global) proves nothing."""
    files = {"p/a.py": b"def emit():\n    pass\n", "p/b.py": b"def emit():\n    pass\n",
             "p/c.py": b"def go():\n    emit()\n"}
    home, repo = tmp_path / "home", tmp_path / "repo"
    admin.init_home(home)
    create_repository(repo, files)
    w = World.__new__(World)
    w.engine = Engine(home, repo)
    w.token = str(admin.mint_token(home, agent="a", operations=["read"], paths=["**"],
                                   ttl_seconds=600)["token"])
    for path in ("p/a.py", "p/b.py"):
        assert w.relations("emit", path, "callers") == {("go", "p/c.py")}


def test_children_and_imports_follow_the_module(world: World) -> None:
    assert world.relations("Model", "py/app/models.py", "children") == {
        ("View", "py/app/views.py")}
    assert world.relations("Model", "py/other/models.py", "children") == {
        ("User", "py/other/user.py")}
    imports = {path for _symbol, path in world.relations("build", "py/app/models.py", "imports")}
    assert imports == {"py/app/views.py", "py/again/__init__.py", "py/again/use.py"}


def test_callees_and_parents_resolve_through_imports(world: World) -> None:
    assert world.relations("make", "py/other/user.py", "callees") == {
        ("build", "py/other/models.py")}
    assert world.relations("show", "py/app/views.py", "callees") == {
        ("build", "py/app/models.py")}
    assert world.relations("User", "py/other/user.py", "parents") == {
        ("Model", "py/other/models.py")}


def test_javascript_and_typescript_relative_imports(world: World) -> None:
    assert world.relations("build", "js/a.js", "callers") == {("useA", "js/b.js")}
    assert world.relations("build", "js/c.ts", "callers") == {("useC", "js/d.ts")}
    assert world.relations("useC", "js/d.ts", "callees") == {("build", "js/c.ts")}
