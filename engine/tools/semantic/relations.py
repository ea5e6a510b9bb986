"""The ``symbol_relations`` tool: callers, callees, references, imports, parents, children.

Resolved by name, narrowed by what each file's imports prove
(engine/semantic/binding.py); see docs/semantic.md, "Relations and impact".
"""

from __future__ import annotations

from engine.catalog import schemas as s
from engine.semantic.binding import import_points_elsewhere, narrowed
from engine.semantic.names import rank_key
from engine.semantic.records import Role
from engine.tools.context import CallContext
from engine.tools.semantic._shared import (
    base_holds,
    bound_elsewhere,
    fit,
    not_found,
    resolve,
    to_symbol,
    view_index,
    visible_of,
)

__all__ = ["symbol_relations"]

_ALL_KINDS = ("callers", "callees", "references", "imports", "parents", "children")


def _module_of(path: str) -> str:
    stem = path.rsplit(".", 1)[0]
    parts = [p for p in stem.split("/") if p not in ("src", "lib")]
    if parts and parts[-1] in ("__init__", "index", "mod"):
        parts.pop()
    return ".".join(parts)


def symbol_relations(ctx: CallContext, args: s.SymbolRelationsArgs) -> s.Relations:
    """Callers, callees, references, imports, parents and children of a symbol, by name.

    Callers, references, imports, children and Rust impls found in files the
    caller may not see are counted in ``pruned`` if the base holds the definition
    (never named); callees and parents resolve only to visible definitions
    (``unresolved`` otherwise), as the symbol argument does.
    """
    index = view_index(ctx)
    found = resolve(ctx, index, args.symbol, args.path)
    if not found:
        raise not_found()
    d = found[0]
    kinds: list[str] = list(dict.fromkeys(args.kinds or _ALL_KINDS))
    elsewhere = bound_elsewhere(ctx, index, d)
    counted = base_holds(ctx)(d)
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
                    sym = to_symbol(enclosing, line=line)
                add(kind, sym, path)
        elif kind == "callees":
            for occ in index.calls_in(d):
                targets = sorted(visible_of(ctx, index.by_name.get(occ.name, ())), key=rank_key)
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
                    add(kind, to_symbol(target), target.path)
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
                targets = sorted(visible_of(ctx, index.by_name.get(base, ())), key=rank_key)
                targets = narrowed(index, d.path, base, targets, ctx.visible)
                if targets:
                    add(kind, to_symbol(targets[0]), targets[0].path)
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
                    add(kind, to_symbol(child), child.path)
            for p, typ, trait, _line in index.impls:
                if trait != d.name or elsewhere(p):
                    continue
                if not ctx.visible(p):
                    add(kind, s.Symbol(symbol=typ, kind="impl", path=p, line=1), p)
                    continue
                for child in index.by_name.get(typ, ()):
                    if child.path == p or child.kind in ("struct", "enum", "type"):
                        add(kind, to_symbol(child), child.path)
    kept, cut = fit(relations)
    return s.Relations(symbol=d.qualname, relations=kept, pruned=pruned, truncated=cut)

