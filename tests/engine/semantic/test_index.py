"""The merged view's tables (engine/semantic/index.py): derived views and name lookups.

A view with staged edits is derived from its base view instead of being rebuilt;
it must hold exactly what a full build of the same files holds. The name lookup
structures must find exactly what a scan of every name finds.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import starlette
from hypothesis import given
from hypothesis import strategies as st

from engine import git as vcs
from engine.admin.seed import create_repository, files_from_directory
from engine.semantic.extract import extract
from engine.semantic.index import Indexer, NameIndex, TreeIndex, git_blob_id
from engine.semantic.languages import language_for

STARLETTE = Path(starlette.__file__).parent


def _tables(index: TreeIndex) -> dict[str, object]:
    """Everything a query reads, order-free."""
    return {
        "indexed": {p: r.blob for p, r in index.indexed.items()},
        "files": index.files,
        "by_name": {k: sorted(d.symbol for d in v) for k, v in index.by_name.items()},
        "by_qualname": {k: sorted(d.symbol for d in v) for k, v in index.by_qualname.items()},
        "by_symbol": {k: d.path for k, d in index.by_symbol.items()},
        "by_place": {k: d.symbol for k, d in index.by_place.items()},
        "uses": {k: sorted(v) for k, v in index.uses.items()},
        "imports": sorted((p, i.module, i.name or "", i.line) for p, i in index.imports),
        "impls": sorted(index.impls),
        "children": {k: sorted(d.symbol for d in v) for k, v in index.children.items()},
        "cut": index.cut,
        "unlisted": index.unlisted,
    }


def test_a_derived_view_equals_a_full_build(tmp_path: Path) -> None:
    files = files_from_directory(STARLETTE, "src/starlette")
    create_repository(tmp_path / "repo", files)
    repo = vcs.Repository(tmp_path / "repo")
    indexer = Indexer()
    base = indexer.view(repo, "a", None)
    routing = files["src/starlette/routing.py"].decode()
    # Remove a function, add one, rename a class's base, delete a file, add a file.
    edited = routing.replace("def request_response(", "def renamed_response(", 1)
    edited = edited.replace("class Router:", "class Router(BaseRouter):\n    pass\n\n\nclass X:", 1)
    assert edited != routing
    staged = vcs.StagedChange()
    repo.stage_write("a", staged, "src/starlette/routing.py", edited.encode())
    repo.stage_delete("a", staged, "src/starlette/status.py")
    repo.stage_write("a", staged, "src/starlette/extra.py",
                     b"from .routing import Router\n\ndef extra():\n    return Router()\n")
    repo.stage_write("a", staged, "src/starlette/huge.py", b"x = 1\n" * 200_000)  # over 1 MB
    derived = indexer.view(repo, "a", staged)
    assert derived is not base and indexer.parsed == len(base.indexed) + 3
    assert base.cut == () and derived.cut == ("src/starlette/huge.py",)
    _tree_id, view_files, read = repo.view_files("a", staged)
    records = []
    for path in sorted(view_files):
        language = language_for(path)
        data = read(path)
        if language is not None and data is not None:
            records.append(extract(path, view_files[path], data, language))
    full = TreeIndex.build(view_files, records)
    assert _tables(derived) == _tables(full)
    # The base view is unchanged by the derivation.
    assert "request_response" in base.by_name and "renamed_response" not in base.by_name
    assert "renamed_response" in derived.by_name and "request_response" not in derived.by_name
    assert {d.symbol for d in derived.children["BaseRouter"]} >= {
        d.symbol for d in derived.by_name["Router"] if d.path.endswith("routing.py")}
    # Lazy occurrences and the per-file uses agree with a scan.
    scanned = sorted((p, o.range.start_line) for p, r in full.indexed.items()
                     for o in r.occurrences if o.name == "Router")
    assert sorted((p, o.range.start_line) for p, o in derived.uses_of("Router")) == scanned


def test_git_blob_id_is_gits() -> None:
    assert git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


NAMES = ["Router", "router", "BaseRouter", "route", "Route", "request_response",
         "Request", "requests", "x", "X", "__init__", "é_name", "APIRouter", "Mount"]


@given(st.text(alphabet="aeiorRtuxX_ébn", min_size=1, max_size=6))
def test_name_lookups_match_a_scan(query: str) -> None:
    names = NameIndex({n: [] for n in NAMES})
    low = query.lower()
    lowered = sorted({n.lower() for n in NAMES})
    assert names.with_prefix(low) == [n for n in lowered if n.startswith(low)]
    assert names.containing(low) == [n for n in lowered if low in n]
    assert names.lower.get(low, []) == [n for n in NAMES if n.lower() == low]
    # Fuzzy: every name found is as close as difflib says; the closest name that
    # shares a third of the query's bigrams is found.
    found = names.close_to(low)
    for ratio, name in found:
        assert ratio == difflib.SequenceMatcher(None, name, low).ratio() >= 0.7


def test_fuzzy_finds_a_transposition() -> None:
    names = NameIndex({n: [] for n in NAMES})
    assert "router" in [n for _r, n in names.close_to("ruoter")]
    assert names.close_to("zzzzzz") == []


_SEGMENTS = st.sampled_from(["a", "b", "src", "x.py", "y.ts", "A"])
_GLOB_SEGMENTS = st.sampled_from(["a", "b", "src", "*", "**", "?", "*.py", "x.py", "s*"])


@given(
    paths=st.lists(st.lists(_SEGMENTS, min_size=1, max_size=4).map("/".join), max_size=20),
    scope=st.lists(
        st.lists(st.lists(_GLOB_SEGMENTS, min_size=1, max_size=4).map("/".join),
                 min_size=1, max_size=3),
        max_size=3,
    ),
)
def test_the_scope_test_of_a_large_view_agrees_with_the_token(
    paths: list[str], scope: list[list[str]]
) -> None:
    """The view's folder-remembering scope test says what ``allows_path`` says, path by path."""
    from engine.paths import in_scope, validate_glob
    from engine.semantic.index import _InScope

    for globs in scope:
        for glob in globs:
            try:
                validate_glob(glob)
            except ValueError:
                return  # a token never holds it
    test = _InScope(scope)
    for path in paths:
        assert test(path) == (bool(scope) and all(in_scope(path, g) for g in scope)), path
