"""The semantic tools on real code nobody here wrote: installed starlette and pydantic.

Expected facts come from Python's own ``ast`` over the same installed sources, not
from tree-sitter, so the index is checked against an independent parser. Scope
tests name the threat they cover.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pydantic
import pytest
import starlette

from engine import admin
from engine.admin.seed import create_repository, files_from_directory
from engine.semantic import indexer_for
from engine.service import Engine
from tests.engine.engine_calls import EngineCalls

STARLETTE = Path(starlette.__file__).parent
PYDANTIC = Path(pydantic.__file__).parent


class Repo(EngineCalls):
    default_session = "s1"

    def __init__(self, tmp: Path, *, with_pydantic: bool = True) -> None:
        files = files_from_directory(STARLETTE, "src/starlette")
        if with_pydantic:
            files |= files_from_directory(PYDANTIC, "src/pydantic")
        files["AGENTS.md"] = b"# Agents\nRun the tests.\n"
        files["src/starlette/AGENTS.md"] = b"# Starlette rules\nKeep it ASGI.\n"
        files[".editorconfig"] = b"root = true\n[*.py]\nindent_size = 4\n"
        files["src/tests/test_routing.py"] = (
            b"from starlette.routing import request_response\n\n"
            b"def test_wraps():\n    assert request_response(lambda r: r)\n"
        )
        self.home = tmp / "home"
        self.repo = tmp / "repo"
        create_repository(self.repo, files)
        admin.init_home(self.home)
        self.engine = Engine(self.home, self.repo)

    def mint(self, agent: str = "alice", paths: str = "src/**,AGENTS.md,.editorconfig",
             ops: str = "read,write") -> str:
        info = admin.mint_token(self.home, agent=agent, operations=ops.split(","),
                                paths=paths.split(","), ttl_seconds=900)
        return str(info["token"])


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return Repo(tmp_path_factory.mktemp("semantic"))


def _class_line(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next(n.lineno for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _def_line(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next(n.lineno for n in tree.body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name)


def _call_lines(path: Path, cls: str, method: str, callee: str) -> set[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    func = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    return {n.lineno for n in ast.walk(func) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == callee}


def test_search_finds_a_known_class_at_its_definition_line(real: Repo) -> None:
    token = real.mint()
    found = real.ok(token, "search_symbols", {"query": "Router", "limit": 5})
    assert found["symbols"][0] == {
        "symbol": "Router", "kind": "class", "path": "src/starlette/routing.py",
        "line": _class_line(STARLETTE / "routing.py", "Router"),
    }
    # Prefix and fuzzy matches rank after the exact one.
    prefix = real.ok(token, "search_symbols", {"query": "request_resp"})["symbols"]
    assert prefix[0]["symbol"] == "request_response"
    assert prefix[0]["line"] == _def_line(STARLETTE / "routing.py", "request_response")
    fuzzy = real.ok(token, "search_symbols", {"query": "Ruoter"})["symbols"]
    assert "Router" in [s["symbol"] for s in fuzzy]


def test_symbol_context_of_pydantic_base_model(real: Repo) -> None:
    token = real.mint()
    context = real.ok(token, "symbol_context", {"symbol": "BaseModel",
                                                "path": "src/pydantic/main.py"})
    main = PYDANTIC / "main.py"
    line = _class_line(main, "BaseModel")
    assert context["symbol"]["line"] == line and context["symbol"]["kind"] == "class"
    assert context["signature"].startswith("class BaseModel(")
    tree = ast.parse(main.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BaseModel")
    docstring = ast.get_docstring(node) or ""
    assert context["doc"].splitlines()[0] == docstring.splitlines()[0]
    assert context["code"].splitlines()[2].startswith("class BaseModel")  # two lines before
    assert context["scope"] is None
    method = real.ok(token, "symbol_context", {"symbol": "BaseModel.model_dump"})
    assert method["scope"] == "BaseModel" and method["symbol"]["kind"] == "method"


def test_relations_known_caller_import_and_parent(real: Repo) -> None:
    token = real.mint()
    callers = real.ok(token, "symbol_relations",
                      {"symbol": "request_response", "kinds": ["callers"]})["relations"]
    lines = _call_lines(STARLETTE / "routing.py", "Route", "__init__", "request_response")
    assert {"kind": "callers", "symbol": {"symbol": "Route.__init__", "kind": "method",
            "path": "src/starlette/routing.py", "line": min(lines)}} in callers
    imports = real.ok(token, "symbol_relations",
                      {"symbol": "Router", "kinds": ["imports"]})["relations"]
    assert ("src/starlette/applications.py", "starlette.routing.Router") in {
        (r["symbol"]["path"], r["symbol"]["symbol"]) for r in imports}
    parents = real.ok(token, "symbol_relations",
                      {"symbol": "RootModel", "kinds": ["parents"]})["relations"]
    assert ("BaseModel", "src/pydantic/main.py") in {
        (r["symbol"]["symbol"], r["symbol"]["path"]) for r in parents}
    children = real.ok(token, "symbol_relations",
                       {"symbol": "BaseModel", "path": "src/pydantic/main.py",
                        "kinds": ["children"]})["relations"]
    assert ("RootModel", "src/pydantic/root_model.py") in {
        (r["symbol"]["symbol"], r["symbol"]["path"]) for r in children}
    callees = real.ok(token, "symbol_relations",
                      {"symbol": "Route.__init__", "kinds": ["callees"]})["relations"]
    assert "request_response" in {r["symbol"]["symbol"] for r in callees}


def _v1_subclasses_of_base_model() -> set[tuple[str, str]]:
    """(class, path) under pydantic/v1 that subclass a BaseModel their file imports from v1."""
    found = set()
    for file in (PYDANTIC / "v1").rglob("*.py"):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        imported = {
            (node.level, node.module or "") for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and any(a.name == "BaseModel" for a in node.names)
        }
        from_v1 = any(mod.startswith("pydantic.v1") or level > 0 for level, mod in imported)
        defines = any(isinstance(n, ast.ClassDef) and n.name == "BaseModel" for n in tree.body)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and (from_v1 or defines) and any(
                    isinstance(b, ast.Name) and b.id == "BaseModel" for b in node.bases):
                found.add((node.name, f"src/pydantic/v1/{file.relative_to(PYDANTIC / 'v1')}"))
    return found


def test_relations_follow_imports_where_a_name_repeats(real: Repo) -> None:
    """pydantic ships its v1 API beside v2: two top-level BaseModel classes.

    Files under pydantic/v1 import (or define) v1's BaseModel, so their
    subclasses and imports belong to it, not to pydantic.main.BaseModel.
    Expected facts come from Python's ast.
    """
    v1_children = _v1_subclasses_of_base_model()
    assert v1_children  # the corpus has them
    token = real.mint()

    def relations(path: str, kind: str) -> set[tuple[str, str]]:
        result = real.ok(token, "symbol_relations",
                         {"symbol": "BaseModel", "path": path, "kinds": [kind]})
        return {(r["symbol"]["symbol"], r["symbol"]["path"]) for r in result["relations"]}

    v2 = relations("src/pydantic/main.py", "children")
    assert ("RootModel", "src/pydantic/root_model.py") in v2
    assert not v2 & v1_children
    assert v1_children <= relations("src/pydantic/v1/main.py", "children")
    imports = relations("src/pydantic/main.py", "imports")
    assert "src/pydantic/root_model.py" in {p for _s, p in imports}
    assert not any(p.startswith("src/pydantic/v1/") for _s, p in imports)


def test_change_impact_reaches_callers_and_tests(real: Repo) -> None:
    token = real.mint()
    impact = real.ok(token, "change_impact", {"symbols": ["request_response"]})
    assert impact["touched"][0]["symbol"] == "request_response"
    affected = [a["symbol"] for a in impact["affected"]]
    # Direct callers rank first (depth 1), then what reaches them.
    assert set(affected[:2]) == {"Route.__init__", "test_wraps"}
    assert "Router.add_route" in affected
    assert "src/tests/test_routing.py" in impact["tests"]


def test_scope_pruning_with_a_sub_folder_token(real: Repo) -> None:
    """Threat: a token limited to a sub-folder learns names, paths or code outside it."""
    token = real.mint(agent="mw", paths="src/starlette/middleware/**")
    found = real.ok(token, "search_symbols", {"query": "Router"})
    assert all(s["path"].startswith("src/starlette/middleware/") for s in found["symbols"])
    # Query text is matched within the view only: hidden matches are not even counted.
    assert found["pruned"] == 0
    for tool, args in [("symbol_context", {"symbol": "Router"}),
                       ("symbol_relations", {"symbol": "Router"})]:
        answer = real.call(token, tool, args)
        assert answer["ok"] is False and answer["error"]["error"] == "not_found"
    relations = real.ok(token, "symbol_relations", {"symbol": "Middleware"})
    text = json.dumps(relations)
    assert "routing.py" not in text and "applications.py" not in text
    assert relations["pruned"] >= 2  # applications.py and routing.py import it
    # A path argument outside the scope is refused, not pruned.
    outside = real.call(token, "project_context", {"paths": ["src/starlette/routing.py"]})
    assert outside["ok"] is False and outside["error"]["error"] == "path_outside_scope"
    impact = real.ok(token, "change_impact", {"symbols": ["request_response"]})
    # A symbol defined only out of scope touches nothing and is not counted (as one
    # defined nowhere); a visible one's hidden uses are counted.
    assert impact["touched"] == [] and impact["affected"] == [] and impact["pruned"] == 0
    impact = real.ok(token, "change_impact", {"symbols": ["Middleware"]})
    assert impact["touched"] and impact["pruned"] >= 2
    assert "routing.py" not in json.dumps(impact)


def test_results_are_bounded_and_say_so(real: Repo) -> None:
    token = real.mint()
    found = real.ok(token, "search_symbols", {"query": "e", "limit": 200})
    assert len(json.dumps(found["symbols"]).encode()) <= 32_768 + 200
    assert found["truncated"] is True


def test_project_context_conventions_nearest_first(real: Repo) -> None:
    token = real.mint()
    briefing = real.ok(token, "project_context", {"paths": ["src/starlette/routing.py"]},
                       session="brief")
    assert [c["path"] for c in briefing["conventions"]] == [
        "src/starlette/AGENTS.md", "AGENTS.md", ".editorconfig"]
    assert "Router" in {s["symbol"] for s in briefing["symbols"]}
    assert briefing["peers"] == []
    # A token that cannot read the root files is not shown them; it is told how many.
    narrow = real.mint(agent="bob", paths="src/starlette/**")
    brief2 = real.ok(narrow, "project_context", {"paths": ["src/starlette/routing.py"]},
                     session="brief2")
    assert [c["path"] for c in brief2["conventions"]] == ["src/starlette/AGENTS.md"]
    assert brief2["pruned"] >= 2


def test_staged_edits_are_seen_by_their_session_and_reuse_the_cache(tmp_path: Path) -> None:
    repo = Repo(tmp_path, with_pydantic=False)
    token = repo.mint()
    assert repo.ok(token, "search_symbols", {"query": "brand_new_helper"})["symbols"] == []
    indexer = indexer_for(next(iter(repo.engine._repos)).repo)
    before = indexer.parsed
    source = (STARLETTE / "routing.py").read_text(encoding="utf-8")
    edited = source.replace("def request_response(", "def brand_new_helper():\n    return 1\n\n\n"
                            "def request_response(", 1)
    repo.ok(token, "write_file", {"path": "src/starlette/routing.py", "content": edited})
    found = repo.ok(token, "search_symbols", {"query": "brand_new_helper"})["symbols"]
    assert [(s["path"], s["kind"]) for s in found] == [("src/starlette/routing.py", "function")]
    assert indexer.parsed == before + 1  # only the edited blob was parsed again
    # Another session (even of the same agent) does not see this session's edit.
    other = repo.ok(token, "search_symbols", {"query": "brand_new_helper"}, session="s2")
    assert other["symbols"] == []
    # The staged change's impact: the new function, nothing reaches it yet.
    impact = repo.ok(token, "change_impact", {})
    assert [t["symbol"] for t in impact["touched"]] == ["brand_new_helper"]


def test_peer_intents_in_one_engine(tmp_path: Path) -> None:
    """Two sessions of one engine: the second is told about the first (agent and paths only)."""
    repo = Repo(tmp_path, with_pydantic=False)
    alice = repo.mint(agent="alice")
    bob = repo.mint(agent="bob")
    carol = repo.mint(agent="carol", paths="src/tests/**")
    repo.ok(alice, "project_context", {"paths": ["src/starlette/routing.py"]}, session="a")
    repo.ok(alice, "write_file", {"path": "src/starlette/routing.py", "content": "x = 1\n"},
            session="a")
    seen = repo.ok(bob, "project_context", {"paths": ["src/starlette"]}, session="b")
    assert seen["peers"] == [{"agent": "alice", "paths": ["src/starlette/routing.py"]}]
    assert "x = 1" not in json.dumps(seen)
    # A peer on paths the caller may not see is counted, not named.
    hidden = repo.ok(carol, "project_context", {"paths": ["src/tests"]}, session="c")
    assert hidden["peers"] == []
