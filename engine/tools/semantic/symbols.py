"""The symbol tools: ``search_symbols`` (find definitions by name) and ``symbol_context``.

See docs/tools.md and docs/semantic.md ("What pruned counts").
"""

from __future__ import annotations

from engine.catalog import schemas as s
from engine.limits import LIMITS
from engine.semantic.names import rank_key
from engine.semantic.records import Definition
from engine.tools.context import CallContext
from engine.tools.semantic._shared import (
    fit,
    not_found,
    read_view_file,
    resolve,
    to_symbol,
    view_index,
    visible_names,
    visible_of,
)

__all__ = ["search_symbols", "symbol_context"]


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
    index = view_index(ctx)
    names = index.names()
    visible_name = visible_names(ctx, index)
    query = args.query.strip()
    lowered = query.lower()
    scored: list[tuple[tuple[float, ...], Definition]] = []
    matched: set[str] = set()
    if "." in query:
        for d in visible_of(ctx, index.by_qualname.get(query, ())):
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
            scored.extend((score, d) for d in visible_of(ctx, index.by_name[name]))
            matched.add(name)

    def has_visible(low: str) -> bool:
        return any(visible_name(name) for name in names.lower[low])

    for ratio, close in names.close_to(lowered, keep=has_visible):
        for name in names.lower[close]:
            if name not in matched:
                matched.add(name)
                scored.extend(((5, -ratio), d) for d in visible_of(ctx, index.by_name[name]))
    scored.sort(key=lambda pair: (pair[0], rank_key(pair[1])))
    kept, cut = fit(to_symbol(d) for _score_value, d in scored[: args.limit])
    return s.Symbols(
        symbols=kept,
        pruned=0,
        truncated=cut or len(scored) > args.limit or index.truncated_for(ctx.visible),
    )


def symbol_context(ctx: CallContext, args: s.SymbolContextArgs) -> s.SymbolContext:
    """A symbol's definition, signature, doc, enclosing scope and a window of its code."""
    index = view_index(ctx)
    found = resolve(ctx, index, args.symbol, args.path)
    if not found:
        raise not_found()
    d = found[0]
    data = read_view_file(ctx, d.path) or b""
    lines = data.decode("utf-8", "replace").splitlines()
    start = max(0, d.range.start_line - 2)
    end = min(len(lines), d.range.end_line + 1, start + LIMITS.code_window_lines)
    truncated = end < d.range.end_line + 1
    code_lines: list[str] = []
    used = 0
    for line in lines[start:end]:
        used += len(line.encode()) + 1
        if used > LIMITS.result_budget_bytes // 2:
            truncated = True
            break
        code_lines.append(line)
    return s.SymbolContext(
        symbol=to_symbol(d),
        signature=d.signature or None,
        doc=d.doc,
        scope=d.scope,
        code="\n".join(code_lines),
        truncated=truncated,
    )

