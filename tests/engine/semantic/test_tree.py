"""The merged view's tables (engine/semantic/tree.py): derived views.

A view with staged edits is derived from its base view instead of being rebuilt;
it must hold exactly what a full build of the same files holds.
"""

from __future__ import annotations

from pathlib import Path

import starlette

from engine import git as vcs
from engine.admin.seed import create_repository, files_from_directory
from engine.semantic.extract import extract
from engine.semantic.indexer import Indexer
from engine.semantic.languages import language_for
from engine.semantic.tree import TreeIndex

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
