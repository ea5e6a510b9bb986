"""The walk over one file's captured nodes: scopes, definitions, imports and callees.

:func:`apply_rules` runs a language's rules (engine/semantic/rules/) on the
nodes the extractor's query captured, in source order, tracking the enclosing
scopes; :func:`find_callees` notes the name each call calls. What they gather
(a :class:`Walk`) becomes the packed records (engine/semantic/packed.py).
See docs/semantic.md, "Building and reuse".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from operator import attrgetter

from tree_sitter import Node

from engine.limits import LIMITS
from engine.semantic.records import (
    Definition,
    Import,
    Range,
    scip_symbol,
)
from engine.semantic.rules.base import (
    NAME_TYPES,
    WHITESPACE,
    Found,
    Lang,
    clean_doc,
    node_text,
)

__all__ = ["Walk", "apply_rules", "find_callees"]

_CLASSLIKE = frozenset({"class", "interface", "struct", "enum", "trait", "type", "impl"})


@dataclass
class Walk:
    """What the pass over one file's captured nodes gathers.

    Made per file by :func:`~engine.semantic.extract.extract_packed`, filled by
    :func:`apply_rules` and :func:`find_callees`, read by
    :func:`~engine.semantic.packed.pack`.
    """

    path: str
    lang: Lang
    data: bytes
    prefix: str  # the path's SCIP symbol prefix: scip_symbol(path, "", ())
    definitions: list[Definition] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    impls: list[tuple[str, str, int]] = field(default_factory=list)
    # Start bytes of definitions' names (not references) and of callees (calls).
    defined: set[int] = field(default_factory=set)
    calls: set[int] = field(default_factory=set)
    odd_callees: list[Node] = field(default_factory=list)  # callees of no identifier type
    scopes: dict[str, int] = field(default_factory=dict)  # enclosing qualname -> scope id
    # Where the innermost scope changes: bytes before bounds[i] (and from
    # bounds[i - 1] on) are in scope scope_at[i], a scope id or -1 (file level).
    bounds: list[int] = field(default_factory=list)
    scope_at: list[int] = field(default_factory=lambda: [-1])
    opaque: list[tuple[int, int]] = field(default_factory=list)  # imports' byte ranges
    truncated: bool = False

    def scope_id(self, qualname: str | None) -> int:
        """The id of an enclosing qualname (made on first use); -1 for the file level."""
        if qualname is None:
            return -1
        found = self.scopes.get(qualname)
        if found is None:
            found = self.scopes[qualname] = len(self.scopes)
        return found


_START = attrgetter("start_byte")
_STOP = attrgetter("end_byte")
_SPAN = attrgetter("start_byte", "end_byte")


def apply_rules(walk: Walk, nodes: list[Node]) -> None:
    """Run the language's rules on the captured nodes in source order, tracking scopes."""
    # By start, the longest first: a node before its descendants (captures come unordered).
    nodes.sort(key=_STOP, reverse=True)
    nodes.sort(key=_START)
    spans = list(map(_SPAN, nodes))
    if len(set(spans)) < len(spans):  # nodes of one range: the outer first
        nodes.sort(key=lambda node: (node.start_byte, -node.end_byte, _depth(node)))
        spans = list(map(_SPAN, nodes))
    opaque = walk.lang.opaque
    bounds, scope_at = walk.bounds, walk.scope_at
    # Open scopes, innermost last: (end byte, qualname, kinds, scope id, enclosing).
    # A qualname too long to record (LIMITS.name_chars) names nothing: what it
    # holds has the enclosing scope of the nearest one that fits.
    stack: list[_Scope] = [(_END, None, (), -1, None)]
    opaque_end = -1  # end byte of the last import: what lies inside is the import's
    for node, (start, end) in zip(nodes, spans, strict=True):
        if end <= opaque_end:
            continue
        while end > stack[-1][0]:
            closed = stack.pop()[0]
            bounds.append(closed)
            scope_at.append(stack[-1][3])
        _end, scope, kinds, scope_id, enclosing = stack[-1]
        child_scope, child_kinds = _visit(walk, node, scope, kinds, enclosing)
        if node.type in opaque:
            opaque_end = end
            walk.opaque.append((start, end))
        elif child_kinds is not kinds:
            if child_scope is not None and len(child_scope) <= LIMITS.name_chars:
                scope_id, enclosing = walk.scope_id(child_scope), child_scope
            stack.append((end, child_scope, child_kinds, scope_id, enclosing))
            bounds.append(start)
            scope_at.append(scope_id)
    while len(stack) > 1:
        bounds.append(stack.pop()[0])
        scope_at.append(stack[-1][3])


_Scope = tuple[int, str | None, tuple[str, ...], int, str | None]
_END = 1 << 62  # past any byte offset


def find_callees(walk: Walk, calls: list[Node]) -> None:
    """Note the name each call calls (its identifier becomes a ``CALL`` occurrence)."""
    rules, identifiers, found = walk.lang.calls, walk.lang.identifiers, walk.calls
    for node in calls:
        callee = rules[node.type](node)
        if callee is not None and callee.type in NAME_TYPES:
            start = callee.start_byte
            if callee.end_byte > start and start not in found:
                found.add(start)
                if callee.type not in identifiers:
                    walk.odd_callees.append(callee)


def _depth(node: Node) -> int:
    depth = 0
    parent = node.parent
    while parent is not None:
        depth += 1
        parent = parent.parent
    return depth


def _visit(
    walk: Walk, node: Node, scope: str | None, kinds: tuple[str, ...], enclosing: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """Apply the language's rules to a captured node; returns the scope of its descendants.

    ``scope`` names the definitions inside; ``enclosing`` is the nearest
    scope short enough to record (the same but for pathological names).
    Imports first: no language defines anything at a node of those types.
    """
    lang = walk.lang
    t = node.type
    importer = lang.imports.get(t)
    if importer is not None:
        for imp in importer(node, enclosing):
            full = len(walk.imports) >= LIMITS.imports_per_file
            if full or not _short(imp.module, imp.name, imp.alias):
                walk.truncated = True
            else:
                walk.imports.append(imp)
        return scope, kinds
    if lang.impl_of is not None:
        impl = lang.impl_of(node)
        if impl is not None:
            if len(walk.impls) >= LIMITS.definitions_per_file or not _short(impl[0], impl[1]):
                walk.truncated = True
            else:
                walk.impls.append((impl[0], impl[1], node.start_point[0]))
    if lang.scope_of is not None:
        opened = lang.scope_of(node)
        if opened is not None:
            return opened[0], (opened[1],)
    scope_kind = kinds[-1] if kinds else None
    if scope_kind not in _OUTER_KINDS:
        scope_kind = "function"
    found = lang.define(node, scope_kind)
    if found is not None:
        return _define(walk, node, found, scope, kinds)
    return scope, kinds


_ANY_PATH = len(scip_symbol("_", "", ()))
_OUTER_KINDS = frozenset({None, *_CLASSLIKE, "module"})
"""Kinds of scope a definition is told as they are; any other is ``function``."""


def _short(first: str, second: str | None = None, third: str | None = None) -> bool:
    """True if every text fits the codec's bound on names (``LIMITS.name_chars``)."""
    return (
        len(first) <= LIMITS.name_chars
        and (second is None or len(second) <= LIMITS.name_chars)
        and (third is None or len(third) <= LIMITS.name_chars)
    )


def _define(
    walk: Walk, node: Node, found: Found, scope: str | None, kinds: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    name = node_text(found.name)
    outer, outer_kinds = scope, kinds
    receiver = walk.lang.receiver(node) if walk.lang.receiver is not None else None
    if receiver:
        outer, outer_kinds = receiver, ("type",)
    qualname = f"{outer}.{name}" if outer else name
    all_kinds = (*outer_kinds, found.kind)
    if found.name.end_byte > found.name.start_byte:
        walk.defined.add(found.name.start_byte)
    if len(walk.definitions) >= LIMITS.definitions_per_file:
        walk.truncated = True
    else:
        # scip_symbol(path, qualname, kinds), the path's part made once per file.
        symbol = walk.prefix + scip_symbol("_", qualname, all_kinds)[_ANY_PATH:]
        bases = found.bases
        if bases:
            bases = tuple(b for b in bases if _short(b))[: LIMITS.bases_per_definition]
            if len(bases) < len(found.bases):
                walk.truncated = True
        if not _short(name, qualname) or len(symbol) - len(walk.prefix) > 2 * LIMITS.name_chars:
            # Too long to record (and so is all it holds: their names are longer).
            walk.truncated = True
            return (qualname, all_kinds) if found.opens_scope else (scope, kinds)
        lang = walk.lang
        body = found.body or node.child_by_field_name("body")
        doc = lang.docstring(node) if lang.docstring is not None else None
        if doc is None:
            doc = _leading_comment(lang, node)
        walk.definitions.append(
            Definition(
                symbol=symbol,
                name=name,
                qualname=qualname,
                kind=found.kind,
                path=walk.path,
                range=_range(node),
                name_range=_range(found.name),
                signature=_signature(node, body, walk.data),
                doc=doc,
                scope=outer,
                bases=bases,
            )
        )
    if found.opens_scope:
        return qualname, all_kinds
    return scope, kinds


def _range(node: Node) -> Range:
    start, end = node.start_point, node.end_point
    return Range(start[0], start[1], end[0], end[1])


_COMMENT_MARKS = re.compile(r"^\s*(?:/\*\*?|\*/|\*(?!/)|///?!?|#!?|//)?\s?")


def _leading_comment(lang: Lang, node: Node) -> str | None:
    anchor = node
    while anchor.parent is not None and anchor.parent.type in lang.wrappers:
        anchor = anchor.parent
    prev = anchor.prev_sibling
    expected = anchor.start_point[0]
    while prev is not None and prev.type in lang.skip_before:
        expected = prev.start_point[0]
        prev = prev.prev_sibling
    lines: list[str] = []
    while prev is not None and prev.type in lang.comments and prev.end_point[0] >= expected - 1:
        text = node_text(prev)
        if text.endswith("*/"):
            text = text[:-2]
        block = [_COMMENT_MARKS.sub("", line, count=1).rstrip() for line in text.splitlines()]
        lines[:0] = block
        expected = prev.start_point[0]
        prev = prev.prev_sibling
    return clean_doc("\n".join(lines)) if lines else None


def _signature(node: Node, body: Node | None, data: bytes) -> str:
    anchor = node
    if node.type == "variable_declarator" and node.parent is not None:
        anchor = node.parent
    end = body.start_byte if body is not None and body.start_byte > anchor.start_byte else None
    if end is None:
        start, stop = anchor.start_byte, anchor.end_byte
        newline = data.find(b"\n", start, stop)
        raw = data[start : stop if newline < 0 else newline]
        if node.type in ("type_spec", "type_alias"):
            raw = b"type " + raw.split(b"{", 1)[0]
    else:
        raw = data[anchor.start_byte : end]
    text = WHITESPACE.sub(" ", raw.decode("utf-8", "replace")).strip()
    text = text.removesuffix("{").removesuffix(":").rstrip()
    if len(text) > LIMITS.signature_chars:
        text = text[: LIMITS.signature_chars - 1] + "…"
    return text

