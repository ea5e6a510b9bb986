"""Handlers of the semantic tools.

search_symbols, symbol_context, symbol_relations, change_impact and project_context.

Each reads the index of the caller's session view (its staged edits over its
lane) and prunes by ``ctx.visible`` (scope and policy, as for any read): no
result names a path, symbol or snippet the caller may not see, and ``pruned``
says how many were left out, never what. Text the caller chooses (a query, a
symbol argument, the names its code calls) is matched only against definitions
it may see: a symbol only defined outside its view is ``not_found``, exactly as
one that does not exist, and is not counted, so no count can be steered to
spell out hidden names (docs/semantic.md, "What pruned counts").

Results are bounded by :data:`RESULT_BYTE_BUDGET`: list items are added while
the UTF-8 JSON of the items so far stays within it, then ``truncated`` is set
(docs/semantic.md). Relations and impact are resolved by name (no type
checker runs), so they over-approximate where names repeat.
"""

from __future__ import annotations

import bisect
import difflib
import json
import logging
import os
import re
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

import policy
from engine import git
from engine.catalog import schemas as s
from engine.errors import AccessDeniedError, RepositoryError, denied
from engine.paths import glob_may_match_below, validate_path
from engine.semantic.binding import binds_elsewhere, import_points_elsewhere, narrowed
from engine.semantic.indexer import git_blob_id, indexer_for
from engine.semantic.languages import language_for
from engine.semantic.names import rank_key
from engine.semantic.records import Definition, Role
from engine.semantic.tree import TreeIndex
from engine.state.sqlite import MAX_INTENT_PATHS, Intent
from engine.tools.context import CallContext, Session

__all__ = [
    "CODE_WINDOW_LINES",
    "CONVENTION_FILES",
    "IMPACT_DEPTH",
    "INTENT_MAX_BYTES",
    "INTENT_TTL_SECONDS",
    "RESULT_BYTE_BUDGET",
    "change_impact",
    "project_context",
    "search_symbols",
    "share_staged_paths",
    "staged_paths",
    "symbol_context",
    "symbol_relations",
]

RESULT_BYTE_BUDGET = 32_768
"""Bytes of UTF-8 JSON that a result's list items (or code window) may take."""
CODE_WINDOW_LINES = 60
IMPACT_DEPTH = 3
IMPACT_MAX_NODES = 2_000
AMBIGUOUS_NAME_DEFINITIONS = 8
CONVENTION_MAX_BYTES = 8_192
INTENT_TTL_SECONDS = 3_600
CONVENTION_FILES = (
    "AGENTS.md",
    "CONTRIBUTING.md",
    "CONVENTIONS.md",
    ".editorconfig",
    "pyproject.toml",
    "setup.cfg",
    "tox.ini",
    "ruff.toml",
    ".ruff.toml",
    ".flake8",
    ".pylintrc",
    "mypy.ini",
    ".eslintrc",
    ".eslintrc.js",
    ".eslintrc.cjs",
    ".eslintrc.json",
    ".eslintrc.yml",
    ".eslintrc.yaml",
    "eslint.config.js",
    "eslint.config.mjs",
    ".prettierrc",
    ".prettierrc.json",
    "biome.json",
    "tsconfig.json",
    ".golangci.yml",
    ".golangci.yaml",
    "rustfmt.toml",
    ".rustfmt.toml",
    "clippy.toml",
    "checkstyle.xml",
)
_TEST_PATH = re.compile(
    r"(^|/)(tests?|__tests__|spec)/|(^|/)test_[^/]*\.py$|_test\.(py|go)$|"
    r"\.(test|spec)\.[jt]sx?$|(^|/)src/test/|Tests?\.java$"
)

T = TypeVar("T", bound=BaseModel)
logger = logging.getLogger("chit.engine")


def _index(ctx: CallContext) -> TreeIndex:
    return indexer_for(ctx.repo).view(
        ctx.repo, ctx.token.agent, ctx.session.staged, ctx.token.path_scopes
    )


def _symbol(d: Definition, line: int | None = None, kind: str | None = None) -> s.Symbol:
    return s.Symbol(
        symbol=d.qualname,
        kind=kind or d.kind,
        path=d.path,
        line=(d.name_range.start_line if line is None else line) + 1,
    )


def _fit(items: Iterable[T], budget: int = RESULT_BYTE_BUDGET) -> tuple[list[T], bool]:
    """Take items while their JSON fits the byte budget; say whether any were cut."""
    out: list[T] = []
    used = 0
    for item in items:
        size = len(json.dumps(item.model_dump(mode="json"), ensure_ascii=False).encode()) + 1
        if used + size > budget:
            return out, True
        used += size
        out.append(item)
    return out, False


def _not_found() -> RepositoryError:
    return RepositoryError("not_found", "no such symbol in your view")


def _resolve(
    ctx: CallContext, index: TreeIndex, symbol: str, path: str | None = None
) -> list[Definition]:
    """The caller's visible definitions a symbol argument names (hidden ones never counted)."""
    return index.resolve(symbol, path, visible=ctx.visible)


def _visible_of(ctx: CallContext, defs: Iterable[Definition]) -> list[Definition]:
    """Those of ``defs`` the caller may see, in their order."""
    return [d for d in defs if ctx.visible(d.path)]


def _visible_names(ctx: CallContext, index: TreeIndex) -> Callable[[str], bool]:
    """A test of whether a name has a definition the caller may see (answers kept per call)."""
    known: dict[str, bool] = {}

    def test(name: str) -> bool:
        found = known.get(name)
        if found is None:
            found = known[name] = any(map(ctx.visible, index.defined_in(name)))
        return found

    return test


# --- search_symbols ----------------------------------------------------------------


def _score(query: str, lowered: str, name: str) -> tuple[float, ...] | None:
    low = name.lower()
    if name == query:
        return (0,)
    if low == lowered:
        return (1,)
    if name.startswith(query):
        return (2, len(name))
    if low.startswith(lowered):
        return (3, len(name))
    if lowered in low:
        return (4, low.index(lowered), len(name))
    return None


def search_symbols(ctx: CallContext, args: s.SearchSymbolsArgs) -> s.Symbols:
    """Find definitions by name: exact, then prefix, substring and fuzzy matches.

    The query is matched only against definitions the caller may see: a hidden
    definition is neither returned nor counted, and never takes a place among
    the fuzzy candidates (``pruned`` is 0; docs/semantic.md "What pruned counts").
    """
    index = _index(ctx)
    names = index.names()
    visible_name = _visible_names(ctx, index)
    query = args.query.strip()
    lowered = query.lower()
    scored: list[tuple[tuple[float, ...], Definition]] = []
    matched: set[str] = set()
    if "." in query:
        for d in _visible_of(ctx, index.by_qualname.get(query, ())):
            scored.append(((0,), d))
        matched.add(query.rsplit(".", 1)[1])
    # Every name scored by _score contains the lowered query: the substring
    # lookup finds them all (the exact and prefix ones among them).
    candidates: list[str] = []
    for low in names.containing(lowered) if lowered else names.sorted:
        candidates.extend(names.lower[low])
    for name in candidates:
        score = _score(query, lowered, name)
        if score is not None and name not in matched:
            scored.extend((score, d) for d in _visible_of(ctx, index.by_name[name]))
            matched.add(name)

    def has_visible(low: str) -> bool:
        return any(visible_name(name) for name in names.lower[low])

    for ratio, close in names.close_to(lowered, keep=has_visible):
        for name in names.lower[close]:
            if name not in matched:
                matched.add(name)
                scored.extend(((5, -ratio), d) for d in _visible_of(ctx, index.by_name[name]))
    scored.sort(key=lambda pair: (pair[0], rank_key(pair[1])))
    kept, cut = _fit(_symbol(d) for _score_value, d in scored[: args.limit])
    return s.Symbols(
        symbols=kept,
        pruned=0,
        truncated=cut or len(scored) > args.limit or index.truncated_for(ctx.visible),
    )


# --- symbol_context ----------------------------------------------------------------


def _read(ctx: CallContext, path: str) -> bytes | None:
    try:
        return ctx.repo.view_read(ctx.token.agent, ctx.session.staged, path)
    except RepositoryError:
        return None


def symbol_context(ctx: CallContext, args: s.SymbolContextArgs) -> s.SymbolContext:
    """A symbol's definition, signature, doc, enclosing scope and a window of its code."""
    index = _index(ctx)
    found = _resolve(ctx, index, args.symbol, args.path)
    if not found:
        raise _not_found()
    d = found[0]
    data = _read(ctx, d.path) or b""
    lines = data.decode("utf-8", "replace").splitlines()
    start = max(0, d.range.start_line - 2)
    end = min(len(lines), d.range.end_line + 1, start + CODE_WINDOW_LINES)
    truncated = end < d.range.end_line + 1
    code_lines: list[str] = []
    used = 0
    for line in lines[start:end]:
        used += len(line.encode()) + 1
        if used > RESULT_BYTE_BUDGET // 2:
            truncated = True
            break
        code_lines.append(line)
    return s.SymbolContext(
        symbol=_symbol(d),
        signature=d.signature or None,
        doc=d.doc,
        scope=d.scope,
        code="\n".join(code_lines),
        truncated=truncated,
    )


# --- symbol_relations --------------------------------------------------------------


_ALL_KINDS = ("callers", "callees", "references", "imports", "parents", "children")


def _module_of(path: str) -> str:
    stem = path.rsplit(".", 1)[0]
    parts = [p for p in stem.split("/") if p not in ("src", "lib")]
    if parts and parts[-1] in ("__init__", "index", "mod"):
        parts.pop()
    return ".".join(parts)


def _on_main(ctx: CallContext) -> Callable[[Definition], bool]:
    """A test of whether ``main`` holds a definition (same path and qualname).

    Hidden results are counted in ``pruned`` only for definitions main holds:
    a name that exists only in an agent's lane or staged change has no hidden
    users to warn about, and counting them would let an agent that may write
    define names of its choosing to probe the files it may not see
    (docs/semantic.md, "What pruned counts"). Main's view is indexed like any
    other (cached; the same view as the caller's when its lane is main).
    """
    try:
        head = ctx.repo.resolve("main")
        main = indexer_for(ctx.repo).view(
            ctx.repo, ctx.token.agent, git.StagedChange(base=head.id), ctx.token.path_scopes
        )
    except RepositoryError:
        return lambda _d: False
    return lambda d: (d.path, d.qualname) in main.by_place


def _bound_elsewhere(ctx: CallContext, index: TreeIndex, d: Definition) -> Callable[[str], bool]:
    """A test, kept per file for one call: does that file bind ``d``'s name elsewhere?"""
    known: dict[str, bool] = {}

    def test(path: str) -> bool:
        found = known.get(path)
        if found is None:
            found = known[path] = binds_elsewhere(index, path, d, ctx.visible)
        return found

    return test


def symbol_relations(ctx: CallContext, args: s.SymbolRelationsArgs) -> s.Relations:
    """Callers, callees, references, imports, parents and children of a symbol, by name.

    Callers, references, imports, children and Rust impls found in files the
    caller may not see are counted in ``pruned`` if main holds the definition
    (never named); callees and parents resolve only to visible definitions
    (``unresolved`` otherwise), as the symbol argument does.
    """
    index = _index(ctx)
    found = _resolve(ctx, index, args.symbol, args.path)
    if not found:
        raise _not_found()
    d = found[0]
    kinds: list[str] = list(dict.fromkeys(args.kinds or _ALL_KINDS))
    elsewhere = _bound_elsewhere(ctx, index, d)
    counted = _on_main(ctx)(d)
    relations: list[s.Relation] = []
    pruned = 0
    seen: set[tuple[str, str, str, int]] = set()

    def add(kind: str, sym: s.Symbol, path: str) -> None:
        nonlocal pruned
        key = (kind, sym.symbol, sym.path, sym.line)
        if key in seen:
            return
        seen.add(key)
        if ctx.visible(path):
            relations.append(s.Relation(kind=kind, symbol=sym))
        elif counted:
            pruned += 1

    for kind in kinds:
        if kind in ("callers", "references"):
            want_call = kind == "callers"
            for path, occ in index.uses_of(d.name):
                if bool(occ.roles & Role.CALL) != want_call or elsewhere(path):
                    continue
                enclosing = index.enclosing(path, occ)
                line = occ.range.start_line
                if enclosing is None:
                    sym = s.Symbol(symbol=_module_of(path), kind="module", path=path, line=line + 1)
                else:
                    sym = _symbol(enclosing, line=line)
                add(kind, sym, path)
        elif kind == "callees":
            for occ in index.calls_in(d):
                targets = sorted(_visible_of(ctx, index.by_name.get(occ.name, ())), key=rank_key)
                target = next((t for t in targets if t.path == d.path), None)
                target = target or next(
                    iter(narrowed(index, d.path, occ.name, targets, ctx.visible)), None
                )
                if target is None:
                    sym = s.Symbol(
                        symbol=occ.name,
                        kind="unresolved",
                        path=d.path,
                        line=occ.range.start_line + 1,
                    )
                    add(kind, sym, d.path)
                else:
                    add(kind, _symbol(target), target.path)
        elif kind == "imports":
            module = _module_of(d.path)
            for path, imp in index.imports:
                named = imp.name == d.name or (
                    imp.name is None and imp.module.rsplit(".", 1)[-1] == d.name
                )
                if named or (imp.name in ("*", None) and module and imp.module == module):
                    if import_points_elsewhere(index, path, imp, d.path, ctx.visible):
                        continue
                    label = f"{imp.module}.{imp.name}" if imp.name else imp.module
                    sym = s.Symbol(symbol=label, kind="import", path=path, line=imp.line + 1)
                    add(kind, sym, path)
        elif kind == "parents":
            # Rust: traits implemented for it, by impls the caller may see; an
            # impl in a hidden file is counted, never named.
            bases = list(d.bases)
            for p, typ, trait, _line in index.impls:
                if typ == d.name and not elsewhere(p):
                    if ctx.visible(p):
                        bases.append(trait)
                    elif counted and (kind, trait, p, -1) not in seen:
                        seen.add((kind, trait, p, -1))
                        pruned += 1
            for base in bases:
                targets = sorted(_visible_of(ctx, index.by_name.get(base, ())), key=rank_key)
                targets = narrowed(index, d.path, base, targets, ctx.visible)
                if targets:
                    add(kind, _symbol(targets[0]), targets[0].path)
                else:
                    sym = s.Symbol(
                        symbol=base, kind="unresolved", path=d.path, line=d.range.start_line + 1
                    )
                    add(kind, sym, d.path)
        elif kind == "children":
            # Definitions naming it as a base (the relation is in the child's
            # file), then types implementing it (Rust: in the impl's file).
            for child in index.children.get(d.name, ()):
                if d.name in child.bases and not elsewhere(child.path):
                    add(kind, _symbol(child), child.path)
            for p, typ, trait, _line in index.impls:
                if trait != d.name or elsewhere(p):
                    continue
                if not ctx.visible(p):
                    add(kind, s.Symbol(symbol=typ, kind="impl", path=p, line=1), p)
                    continue
                for child in index.by_name.get(typ, ()):
                    if child.path == p or child.kind in ("struct", "enum", "type"):
                        add(kind, _symbol(child), child.path)
    kept, cut = _fit(relations)
    return s.Relations(symbol=d.qualname, relations=kept, pruned=pruned, truncated=cut)


# --- change_impact -----------------------------------------------------------------


def _in_scope(ctx: CallContext, path: str) -> bool:
    """True iff ``path`` is in the token's scope, or is a folder with scope under it."""
    token = ctx.token
    below = bool(token.path_scopes) and all(
        any(glob_may_match_below(g, path) for g in globs) for globs in token.path_scopes
    )
    return token.allows_path(path) or below


def _check_paths(ctx: CallContext, paths: list[str]) -> list[str]:
    """Validate path arguments as a ``path`` filter is: scope, then policy.

    Each must be in scope, or a folder with something in scope under it
    (``path_outside_scope``), and the policy must let this tool read it, as
    for any read (``path_forbidden``, ``policy_denied``): a path the caller may
    not read is refused before anything is looked up, so no answer (not even
    a count) says whether it exists.
    """
    out = []
    for raw in paths:
        path = validate_path(raw)
        if not _in_scope(ctx, path):
            raise AccessDeniedError("path_outside_scope", f"{path!r} is outside this token's scope")
        request = policy.Request(
            agent=ctx.token.agent, tool=ctx.tool, operation="read", paths=(path,)
        )
        decision = policy.evaluate(ctx.policy, request)
        if not decision.allowed:
            raise denied(decision)
        out.append(path)
    return out


def _sorted_files(index: TreeIndex) -> list[str]:
    found = index.derived.get("sorted_files")
    if not isinstance(found, list):
        found = index.derived["sorted_files"] = sorted(index.files)
    return found


def _may_name(ctx: CallContext, index: TreeIndex, path: str, staged: bool) -> bool:
    """True iff the caller may be shown a peer's path.

    A path that is not a folder of the caller's view (a file, or a file to
    come) is shown only if the caller may see it. A declared folder is shown
    only if it holds a file the caller may see, so a folder is never named
    because a pattern scope could match below it, nor because a deny rule
    covers only what is inside it.
    """
    if path not in _folders(index):
        # A file of the view, or a path that names nothing yet (a file to come).
        return ctx.visible(path)
    if staged:
        return False
    files = _sorted_files(index)
    prefix = path.rstrip("/") + "/"
    at = bisect.bisect_left(files, prefix)
    while at < len(files) and files[at].startswith(prefix):
        if ctx.visible(files[at]):
            return True
        at += 1
    return False


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


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
    """A reader that returns ``data`` for any path (for :meth:`Indexer.file_index`)."""
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
        or len(_visible_of(ctx, index.by_name.get(name, ()))) > AMBIGUOUS_NAME_DEFINITIONS
    ):
        name = d.scope.rsplit(".", 1)[-1]
        via = index.by_place.get((d.path, d.scope), d)
    elsewhere = _bound_elsewhere(ctx, index, via) if via.name == name else lambda _path: False
    return [(path, occ) for path, occ in index.uses_of(name) if not elsewhere(path)]


def change_impact(ctx: CallContext, args: s.ChangeImpactArgs) -> s.Impact:
    """Symbols a change touches, their reverse-reference closure, and the tests that reach them.

    ``pruned`` counts hidden files under the given folders (one each) and uses,
    in files the caller may not see, of the walked definitions that main holds;
    a symbol argument defined only in hidden files touches nothing and is not
    counted.
    """
    index = _index(ctx)
    pruned = 0
    touched: list[Definition] = []
    if args.paths is None and args.symbols is None:
        touched = _changed_defs(ctx, index)
    if args.paths:
        folders = _check_paths(ctx, args.paths)
        for p, rec in index.indexed.items():
            if _under(p, folders):
                if ctx.visible(p):
                    touched.extend(rec.definitions)
                else:
                    pruned += 1  # one per hidden file, whatever it defines
    for symbol in args.symbols or ():
        touched.extend(_resolve(ctx, index, symbol))
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
    on_main = _on_main(ctx)
    frontier = list(visible_touched.values())
    truncated = index.truncated_for(ctx.visible)
    for depth in range(1, IMPACT_DEPTH + 1):
        following: list[Definition] = []
        for d in frontier:
            counted = on_main(d)
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
                    if len(depth_of) >= IMPACT_MAX_NODES:
                        truncated = True
                        continue
                    depth_of[key] = depth
                    places[key] = enclosing
                    following.append(enclosing)
        frontier = following
    pruned += len(hidden)
    affected_keys = sorted(depth_of, key=lambda k: (depth_of[k], -hits[k], rank_key(places[k])))
    touched_symbols, cut1 = _fit(
        (_symbol(d) for d in sorted(visible_touched.values(), key=rank_key)),
        RESULT_BYTE_BUDGET // 4,
    )
    affected, cut2 = _fit((_symbol(places[k]) for k in affected_keys), RESULT_BYTE_BUDGET // 2)
    for d in visible_touched.values():
        if _TEST_PATH.search(d.path):
            tests.setdefault(d.path, 0)
    test_paths = sorted(tests, key=lambda p: (tests[p], p))
    kept_tests: list[str] = []
    used = 0
    for path in test_paths:
        used += len(path.encode()) + 3
        if used > RESULT_BYTE_BUDGET // 4:
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


# --- project_context and intents ------------------------------------------------------


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def share_staged_paths(ctx: CallContext, before: tuple[str, ...]) -> None:
    """Publish the session's staged paths to its peers, if a write call changed them.

    Called by the engine after every successful call that is not read-only.
    The paths (never content; the first :data:`~engine.state.MAX_INTENT_PATHS`)
    go to the state store's ``staged_paths`` table, read by ``project_context``
    in every engine process of the chit home, until the token expires or an
    hour after the last change, whichever is first; an empty staged change
    (after a commit or a discard) removes the session's row. A store that
    cannot be written is logged and the call's answer stands: peers are a
    courtesy, the staged change itself is in the session.

    Args:
        ctx: The call's context (its session after the handler ran).
        before: The session's staged paths before the handler ran
            (:func:`staged_paths`).
    """
    after = staged_paths(ctx.session)
    if after == before:
        return
    expires = min(ctx.now + INTENT_TTL_SECONDS, int(ctx.token.expires_at))
    intent = Intent(
        repo=_repo_id(ctx.repo),
        session=ctx.session.session_id,
        token_id=ctx.session.token_id,
        agent=ctx.token.agent,
        paths=_bounded(after),
        expires_at=expires,
    )
    try:
        ctx.store.put_intent(intent, now=ctx.now, staged=True)
    except (sqlite3.Error, OSError):
        logger.warning("a session's staged paths could not be shared with its peers")


INTENT_MAX_BYTES = 16_384
"""UTF-8 bytes of paths one intent (or one session's shared staged paths) keeps."""


def _bounded(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The first paths that fit :data:`~engine.state.MAX_INTENT_PATHS` and :data:`INTENT_MAX_BYTES`.

    Every peer's ``project_context`` reads every live intent, so what one
    session leaves there is kept small whatever its paths' lengths.
    """
    out: list[str] = []
    used = 0
    for path in paths[:MAX_INTENT_PATHS]:
        used += len(path.encode())
        if used > INTENT_MAX_BYTES:
            break
        out.append(path)
    return tuple(out)


def staged_paths(session: Session) -> tuple[str, ...]:
    """The paths a session has staged (writes, deletions, both sides of a move), sorted."""
    return tuple(sorted(session.staged.changes))


def _repo_id(repo: git.Repository) -> str:
    """The repository's identity in the state store: the real path of its common git dir."""
    return os.path.realpath(os.path.dirname(repo.chit_dir))


def _peer_intents(
    ctx: CallContext, mine: list[str], names: set[str], index: TreeIndex
) -> tuple[list[s.PeerIntent], int]:
    repo = _repo_id(ctx.repo)
    declared = ctx.store.intents(repo, now=ctx.now)
    staged = ctx.store.intents(repo, now=ctx.now, staged=True)
    me = (ctx.session.session_id, ctx.session.token_id)
    wanted: dict[tuple[str, str], tuple[str, dict[str, bool]]] = {}
    for kind, intents in ((False, declared), (True, staged)):
        for intent in intents:
            sid = (intent.session, intent.token_id)
            if sid != me:
                paths = wanted.setdefault(sid, (intent.agent, {}))[1]
                for path in intent.paths:
                    paths[path] = paths.get(path, True) and kind  # declared wins
    out: list[s.PeerIntent] = []
    pruned = 0
    for _sid, (agent, paths) in sorted(wanted.items()):
        overlapping = set()
        hidden = 0
        for path, is_staged in paths.items():
            if any(_overlaps(path, m) for m in mine):
                if _may_name(ctx, index, path, is_staged):
                    overlapping.add(path)
                else:
                    hidden += 1
            elif names and ctx.visible(path) and not names.isdisjoint(_top_names(index, path)):
                # Touches a symbol the caller's paths define. Only visible paths
                # are compared by name, so a name the caller defines cannot
                # probe a hidden file's definitions.
                overlapping.add(path)
        pruned += hidden
        if not overlapping:
            continue
        shown = sorted(overlapping)
        if shown:
            out.append(s.PeerIntent(agent=agent, paths=shown))
    return out, pruned


def _top_names(index: TreeIndex, path: str) -> tuple[str, ...]:
    """The names a file defines at its top level (from its outline: nothing made)."""
    record = index.indexed.get(path)
    if record is None:
        return ()
    outline = record.outline
    return tuple(n for n, q in zip(outline.names, outline.qualnames, strict=True) if n == q)


def _folders(index: TreeIndex) -> frozenset[str]:
    """Every folder of the view (made once per index)."""
    found = index.derived.get("folders")
    if not isinstance(found, frozenset):
        folders: set[str] = set()
        for path in index.files:
            cut = path.rfind("/")
            while cut > 0 and path[:cut] not in folders:
                folders.add(path[:cut])
                cut = path.rfind("/", 0, cut)
        found = index.derived["folders"] = frozenset(folders)
    return found


def _convention_files(index: TreeIndex) -> dict[str, list[str]]:
    """Convention files of the view by folder (``""``: the root), in CONVENTION_FILES order."""
    found = index.derived.get("conventions")
    if not isinstance(found, dict):
        rank = {name: k for k, name in enumerate(CONVENTION_FILES)}
        by_folder: dict[str, list[str]] = {}
        for path in index.files:
            folder, _slash, name = path.rpartition("/")
            if name in rank:
                by_folder.setdefault(folder, []).append(path)
        for listed in by_folder.values():
            listed.sort(key=lambda p: rank[p.rpartition("/")[2]])
        found = index.derived["conventions"] = by_folder
    return found


def _conventions(
    ctx: CallContext, index: TreeIndex, paths: list[str]
) -> tuple[list[s.FileContent], int, bool]:
    by_folder = _convention_files(index)
    order: dict[str, None] = {}
    for path in paths:
        folder = path if path not in index.files else path.rpartition("/")[0]
        # The folders above it that the view has, root first: a walk that stops
        # at the first folder the view lacks (a deep made-up path costs nothing).
        chain = [""]
        at = 0
        while folder and at < len(folder):
            end = folder.find("/", at)
            end = len(folder) if end < 0 else end
            prefix = folder[:end]
            if prefix not in _folders(index):
                break
            chain.append(prefix)
            at = end + 1
        for prefix in reversed(chain):
            order.update(dict.fromkeys(by_folder.get(prefix, ())))
    found: list[s.FileContent] = []
    pruned = 0
    truncated = False
    used = 0
    for path in order:
        if not ctx.visible(path):
            pruned += 1
            continue
        data = _read(ctx, path)
        if data is None:
            continue
        size = len(data)
        if size > CONVENTION_MAX_BYTES:
            data = data[:CONVENTION_MAX_BYTES]
            truncated = True
        text = data.decode("utf-8", "replace")
        if used + len(text.encode()) > RESULT_BYTE_BUDGET // 2:
            truncated = True
            break
        used += len(text.encode())
        found.append(s.FileContent(path=path, ref=None, encoding="utf-8", content=text, size=size))
    return found, pruned, truncated


def project_context(ctx: CallContext, args: s.ProjectContextArgs) -> s.ProjectContext:
    """A pre-write briefing for some paths, recording the caller's intent for them."""
    paths = _check_paths(ctx, args.paths)
    index = _index(ctx)
    pruned = 0
    defs: list[Definition] = []
    for path, record in sorted(index.indexed.items()):
        if _under(path, paths):
            if ctx.visible(path):
                defs.extend(record.definitions)
            else:
                pruned += 1  # one per hidden file, whatever it defines
    defs.sort(key=lambda d: (d.scope is not None, d.path, d.range.start_line))
    symbols, cut_symbols = _fit((_symbol(d) for d in defs), RESULT_BYTE_BUDGET // 4)
    conventions, hidden, cut_conventions = _conventions(ctx, index, paths)
    names = {d.name for d in defs if d.scope is None}
    peers, hidden_peers = _peer_intents(ctx, paths, names, index)
    expires = min(ctx.now + INTENT_TTL_SECONDS, int(ctx.token.expires_at))
    ctx.store.put_intent(
        Intent(
            repo=_repo_id(ctx.repo),
            session=ctx.session.session_id,
            token_id=ctx.session.token_id,
            agent=ctx.token.agent,
            paths=_bounded(tuple(dict.fromkeys(paths))),
            expires_at=expires,
        ),
        now=ctx.now,
    )
    return s.ProjectContext(
        symbols=symbols,
        conventions=conventions,
        peers=peers,
        pruned=pruned + hidden + hidden_peers,
        truncated=cut_symbols or cut_conventions or index.truncated_for(ctx.visible),
    )
