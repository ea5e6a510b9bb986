"""What the semantic tool handlers share: the caller's view, pruning, the result budget.

Every handler reads the index of the caller's session view and keeps only what
``ctx.visible`` accepts; a symbol argument resolves among visible definitions
only, and results fit ``LIMITS.result_budget_bytes`` (docs/semantic.md, "Scope
pruning and budgets").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TypeVar

from pydantic import BaseModel

import policy
from engine import git
from engine.catalog import schemas as s
from engine.errors import AccessDeniedError, RepositoryError, denied
from engine.limits import LIMITS
from engine.paths import glob_may_match_below, validate_path
from engine.semantic.binding import binds_elsewhere
from engine.semantic.indexer import indexer_for
from engine.semantic.records import Definition
from engine.semantic.tree import TreeIndex
from engine.tools.context import CallContext

__all__ = [
    "base_holds",
    "bound_elsewhere",
    "check_paths",
    "fit",
    "not_found",
    "read_view_file",
    "resolve",
    "to_symbol",
    "under",
    "view_index",
    "visible_names",
    "visible_of",
]


T = TypeVar("T", bound=BaseModel)


def view_index(ctx: CallContext) -> TreeIndex:
    """The index of the caller's session view (its staged edits over its lane)."""
    return indexer_for(ctx.repo).view(
        ctx.repo, ctx.token.agent, ctx.session.staged, ctx.token.path_scopes
    )


def to_symbol(d: Definition, line: int | None = None, kind: str | None = None) -> s.Symbol:
    """A definition as a result's symbol, at its name's line (or ``line``, zero-based)."""
    return s.Symbol(
        symbol=d.qualname,
        kind=kind or d.kind,
        path=d.path,
        line=(d.name_range.start_line if line is None else line) + 1,
    )


def fit(items: Iterable[T], budget: int = LIMITS.result_budget_bytes) -> tuple[list[T], bool]:
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


def not_found() -> RepositoryError:
    """The answer for a symbol argument no visible definition has (hidden or none)."""
    return RepositoryError("not_found", "no such symbol in your view")


def resolve(
    ctx: CallContext, index: TreeIndex, symbol: str, path: str | None = None
) -> list[Definition]:
    """The caller's visible definitions a symbol argument names (hidden ones never counted)."""
    return index.resolve(symbol, path, visible=ctx.visible)


def visible_of(ctx: CallContext, defs: Iterable[Definition]) -> list[Definition]:
    """Those of ``defs`` the caller may see, in their order."""
    return [d for d in defs if ctx.visible(d.path)]


def visible_names(ctx: CallContext, index: TreeIndex) -> Callable[[str], bool]:
    """A test of whether a name has a definition the caller may see (answers kept per call)."""
    known: dict[str, bool] = {}

    def test(name: str) -> bool:
        found = known.get(name)
        if found is None:
            found = known[name] = any(map(ctx.visible, index.defined_in(name)))
        return found

    return test


def read_view_file(ctx: CallContext, path: str) -> bytes | None:
    """A file of the caller's view, or ``None`` if it cannot be read."""
    try:
        return ctx.repo.view_read(ctx.token.agent, ctx.session.staged, path)
    except RepositoryError:
        return None


def base_holds(ctx: CallContext) -> Callable[[Definition], bool]:
    """A test of whether the base branch holds a definition (same path and qualname).

    Hidden results are counted in ``pruned`` only for definitions the base holds:
    a name that exists only in an agent's lane or staged change has no hidden
    users to warn about, and counting them would let an agent that may write
    define names of its choosing to probe the files it may not see
    (docs/semantic.md, "What pruned counts"). The base's view is indexed like
    any other (cached; the same view as the caller's when it has no lane yet).
    """
    try:
        head = ctx.repo.base_head()
        base = indexer_for(ctx.repo).view(
            ctx.repo, ctx.token.agent, git.StagedChange(base=head.id), ctx.token.path_scopes
        )
    except RepositoryError:
        return lambda _d: False
    return lambda d: (d.path, d.qualname) in base.by_place


def bound_elsewhere(ctx: CallContext, index: TreeIndex, d: Definition) -> Callable[[str], bool]:
    """A test, kept per file for one call: does that file bind ``d``'s name elsewhere?"""
    known: dict[str, bool] = {}

    def test(path: str) -> bool:
        found = known.get(path)
        if found is None:
            found = known[path] = binds_elsewhere(index, path, d, ctx.visible)
        return found

    return test


def _in_scope(ctx: CallContext, path: str) -> bool:
    """True iff ``path`` is in the token's scope, or is a folder with scope under it."""
    token = ctx.token
    below = bool(token.path_scopes) and all(
        any(glob_may_match_below(g, path) for g in globs) for globs in token.path_scopes
    )
    return token.allows_path(path) or below


def check_paths(ctx: CallContext, paths: list[str]) -> list[str]:
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


def under(path: str, prefixes: Iterable[str]) -> bool:
    """True iff ``path`` is one of ``prefixes`` or lies in a folder of them."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)

