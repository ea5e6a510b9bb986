"""The ``change_impact`` tool: what a change touches and what reaches it, tests included.

The reverse-reference closure walks visible definitions only (docs/semantic.md,
"Relations and impact").
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from engine.catalog import schemas as s
from engine.errors import RepositoryError
from engine.limits import LIMITS
from engine.semantic.indexer import git_blob_id, indexer_for
from engine.semantic.languages import language_for
from engine.semantic.names import rank_key
from engine.semantic.records import Definition
from engine.semantic.tree import TreeIndex
from engine.tools.context import CallContext
from engine.tools.semantic._shared import (
    base_holds,
    bound_elsewhere,
    check_paths,
    fit,
    resolve,
    to_symbol,
    under,
    view_index,
    visible_of,
)

__all__ = ["change_impact"]

_TEST_PATH = re.compile(
    r"(^|/)(tests?|__tests__|spec)/|(^|/)test_[^/]*\.py$|_test\.(py|go)$|"
    r"\.(test|spec)\.[jt]sx?$|(^|/)src/test/|Tests?\.java$"
)


def _changed_defs(ctx: CallContext, index: TreeIndex) -> list[Definition]:
    """Definitions the staged change touches: overlapping changed lines, or removed."""
    staged = ctx.session.staged
    touched: list[Definition] = []
    base = staged.base
    for path, data in staged.changes.items():
        language = language_for(path)
        if language is None:
            continue
        old: bytes | None = None
        if base is not None:
            try:
                old = ctx.repo.read_at(str(base), path)
            except RepositoryError:
                old = None
        record = index.indexed.get(path)
        new_defs = list(record.definitions) if record is not None and data is not None else []
        if old is None:
            touched.extend(new_defs)
            continue
        old_lines = old.decode("utf-8", "replace").splitlines()
        new_lines = (data or b"").decode("utf-8", "replace").splitlines()
        changed: list[tuple[int, int]] = []
        matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                changed.append((j1, max(j1, j2 - 1)))
        for nd in new_defs:
            if any(a <= nd.range.end_line and nd.range.start_line <= b for a, b in changed):
                touched.append(nd)
        old_record = (
            indexer_for(ctx.repo).file_index(path, git_blob_id(old), _reader(old))
            if len(old)
            else None
        )
        kept = {nd.qualname for nd in new_defs}
        if old_record is not None:
            touched.extend(od for od in old_record.definitions if od.qualname not in kept)
    return touched


def _reader(data: bytes) -> Callable[[str], bytes | None]:
    """A reader that returns ``data`` for any path.

    For :meth:`~engine.semantic.indexer.Indexer.file_index`.
    """
    return lambda _path: data


def _uses_reaching(ctx: CallContext, index: TreeIndex, d: Definition) -> list[tuple[str, Any]]:
    """Uses that reach a definition, by name.

    A dunder method (``__init__``) or a method whose name many visible
    definitions share is reached through its class's name instead, so one
    touched constructor does not pull in every constructor of the tree.
    """
    name = d.name
    via = d
    if d.scope and (
        (name.startswith("__") and name.endswith("__"))
        or len(visible_of(ctx, index.by_name.get(name, ()))) > LIMITS.ambiguous_name_definitions
    ):
        name = d.scope.rsplit(".", 1)[-1]
        via = index.by_place.get((d.path, d.scope), d)
    elsewhere = bound_elsewhere(ctx, index, via) if via.name == name else lambda _path: False
    return [(path, occ) for path, occ in index.uses_of(name) if not elsewhere(path)]


def change_impact(ctx: CallContext, args: s.ChangeImpactArgs) -> s.Impact:
    """Symbols a change touches, their reverse-reference closure, and the tests that reach them.

    ``pruned`` counts hidden files under the given folders (one each) and uses,
    in files the caller may not see, of the walked definitions that the base branch holds;
    a symbol argument defined only in hidden files touches nothing and is not
    counted.
    """
    index = view_index(ctx)
    pruned = 0
    touched: list[Definition] = []
    if args.paths is None and args.symbols is None:
        touched = _changed_defs(ctx, index)
    if args.paths:
        folders = check_paths(ctx, args.paths)
        for p, rec in index.indexed.items():
            if under(p, folders):
                if ctx.visible(p):
                    touched.extend(rec.definitions)
                else:
                    pruned += 1  # one per hidden file, whatever it defines
    for symbol in args.symbols or ():
        touched.extend(resolve(ctx, index, symbol))
    visible_touched: dict[tuple[str, str], Definition] = {}
    for d in touched:
        if ctx.visible(d.path):
            visible_touched.setdefault((d.path, d.qualname), d)
    # Reverse references, breadth first, over visible definitions only.
    depth_of: dict[tuple[str, str], int] = {}
    hits: dict[tuple[str, str], int] = {}
    places: dict[tuple[str, str], Definition] = {}
    tests: dict[str, int] = {}
    hidden: set[tuple[str, int]] = set()
    on_base = base_holds(ctx)
    frontier = list(visible_touched.values())
    truncated = index.truncated_for(ctx.visible)
    for depth in range(1, LIMITS.impact_depth_levels + 1):
        following: list[Definition] = []
        for d in frontier:
            counted = on_base(d)
            for path, occ in _uses_reaching(ctx, index, d):
                if not ctx.visible(path):
                    if counted:
                        hidden.add((path, occ.range.start_line))
                    continue
                if _TEST_PATH.search(path):
                    tests[path] = min(tests.get(path, depth), depth)
                enclosing = index.enclosing(path, occ)
                if enclosing is None:
                    continue
                key = (enclosing.path, enclosing.qualname)
                if key in visible_touched:
                    continue
                hits[key] = hits.get(key, 0) + 1
                if key not in depth_of:
                    if len(depth_of) >= LIMITS.impact_nodes:
                        truncated = True
                        continue
                    depth_of[key] = depth
                    places[key] = enclosing
                    following.append(enclosing)
        frontier = following
    pruned += len(hidden)
    affected_keys = sorted(depth_of, key=lambda k: (depth_of[k], -hits[k], rank_key(places[k])))
    touched_symbols, cut1 = fit(
        (to_symbol(d) for d in sorted(visible_touched.values(), key=rank_key)),
        LIMITS.result_budget_bytes // 4,
    )
    affected, cut2 = fit(
        (to_symbol(places[k]) for k in affected_keys), LIMITS.result_budget_bytes // 2
    )
    for d in visible_touched.values():
        if _TEST_PATH.search(d.path):
            tests.setdefault(d.path, 0)
    test_paths = sorted(tests, key=lambda p: (tests[p], p))
    kept_tests: list[str] = []
    used = 0
    for path in test_paths:
        used += len(path.encode()) + 3
        if used > LIMITS.result_budget_bytes // 4:
            truncated = True
            break
        kept_tests.append(path)
    return s.Impact(
        touched=touched_symbols,
        affected=affected,
        tests=kept_tests,
        pruned=pruned,
        truncated=truncated or cut1 or cut2,
    )

