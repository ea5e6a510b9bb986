"""Extract SCIP-shaped records from one file with tree-sitter (pure: bytes in, records out).

Per language, it finds:

* definitions, with kind, range, signature (the header up to the body),
  docstring or leading comment, enclosing scope and parent classes;
* references (identifiers) and calls (an identifier a call calls gets the
  ``CALL`` role), in source order, each with the definition it occurs in;
* imports.

How (:func:`extract_packed`): one tree-sitter query, matched in C, captures the
identifiers, the calls and the nodes whose rules need a scope (definitions,
imports, Rust ``impl`` blocks). Python then applies the language's rules to
those nodes only, not to every syntax node, and turns the identifiers into
the codec's packed integers column by column (``map`` over C accessors).

Names are what the source spells; nothing is resolved across files here
(engine/semantic/index.py resolves by name at query time). Bounds, past which
the rest is left out and the record says ``truncated``: :data:`MAX_FILE_BYTES`
per file (larger files are not indexed), :data:`MAX_DEFINITIONS`,
:data:`MAX_OCCURRENCES` and :data:`MAX_IMPORTS` per file, :data:`MAX_BASES`
per definition, :data:`MAX_NAME_CHARS` per name. They match what
``engine/semantic/codec.py`` accepts, so every record made here decodes.
"""

from __future__ import annotations

import re
import textwrap
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from itertools import compress, repeat
from operator import add, attrgetter, eq, itemgetter
from typing import NamedTuple

from tree_sitter import Node, Query, QueryCursor

from engine.semantic.fileindex import FileIndex
from engine.semantic.languages import grammar_for, parser_for
from engine.semantic.records import (
    Definition,
    Import,
    Occurrence,
    Range,
    Role,
    scip_symbol,
)

__all__ = [
    "MAX_BASES",
    "MAX_DEFINITIONS",
    "MAX_DOC_CHARS",
    "MAX_FILE_BYTES",
    "MAX_IMPORTS",
    "MAX_NAME_CHARS",
    "MAX_OCCURRENCES",
    "MAX_SIGNATURE_CHARS",
    "Extracted",
    "extract",
    "extract_packed",
]

MAX_FILE_BYTES = 1_000_000
MAX_DEFINITIONS = 10_000
MAX_OCCURRENCES = 50_000
MAX_IMPORTS = 50_000
MAX_SIGNATURE_CHARS = 300
MAX_DOC_CHARS = 2_000
MAX_NAME_CHARS = 4_096
"""Longest name, qualname, module or base recorded (characters); longer ones are left out."""
MAX_BASES = 256

_WS = re.compile(r"\s+")
_CLASSLIKE = frozenset({"class", "interface", "struct", "enum", "trait", "type", "impl"})


def _text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


def _range(node: Node) -> Range:
    start, end = node.start_point, node.end_point
    return Range(start[0], start[1], end[0], end[1])


def _last_name(node: Node | None) -> Node | None:
    """The rightmost name of ``a``, ``a.b``, ``a::b``, ``a.b<T>``: the identifier that matters."""
    while node is not None:
        if node.type in _NAME_TYPES:
            return node
        nxt = None
        for name in ("name", "property", "field", "attribute", "function", "type", "value"):
            nxt = node.child_by_field_name(name)
            if nxt is not None:
                break
        if nxt is None:
            named = [c for c in node.named_children if c.type not in ("type_arguments", "comment")]
            nxt = named[-1] if named else None
        node = nxt
    return None


_NAME_TYPES = frozenset(
    {
        "identifier",
        "type_identifier",
        "property_identifier",
        "field_identifier",
        "constant",
        "shorthand_property_identifier",
    }
)


@dataclass
class _Found:
    """A definition found at a node."""

    name: Node
    kind: str
    bases: tuple[str, ...] = ()
    opens_scope: bool = True
    body: Node | None = None


@dataclass
class _Lang:
    """How one language spells definitions, calls, imports and names."""

    define: Callable[[Node, str | None], _Found | None]
    calls: dict[str, Callable[[Node], Node | None]]
    imports: dict[str, Callable[[Node, str | None], list[Import]]]
    identifiers: frozenset[str]
    comments: frozenset[str]
    wrappers: frozenset[str] = frozenset()
    skip_before: frozenset[str] = frozenset()
    scope_of: Callable[[Node], tuple[str, str] | None] | None = None
    docstring: Callable[[Node], str | None] | None = None
    impl_of: Callable[[Node], tuple[str, str] | None] | None = None
    def_types: frozenset[str] = frozenset()
    interesting: frozenset[str] = field(init=False)
    opaque: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        # The nodes whose rules need the enclosing scope (the query's ``node``).
        scopes = {"impl_item"} if self.scope_of is not None else set()
        self.interesting = self.def_types | set(self.imports) | scopes
        # What lies inside these is theirs: the names in an import are the import's.
        self.opaque = frozenset(self.imports)


def _names_in(node: Node | None, types: frozenset[str] = _NAME_TYPES) -> tuple[str, ...]:
    """Names of the types in a heritage clause: each top-level type's last name.

    Iterative (an explicit stack, children in source order), so a deeply
    nested clause cannot exhaust Python's recursion limit.
    """
    if node is None:
        return ()
    out: list[str] = []
    stack = node.named_children[::-1]
    while stack:
        child = stack.pop()
        if child.type in ("type_arguments", "comment", "keyword_argument", "arguments"):
            continue
        if child.type in types:
            out.append(_text(child))
        elif child.type in (
            "attribute",
            "member_expression",
            "scoped_type_identifier",
            "generic_type",
            "scoped_identifier",
            "qualified_type",
            "nested_type_identifier",
        ):
            last = _last_name(child)
            if child.type == "generic_type":
                last = child.child_by_field_name("name") or _first_named(child)
                last = _last_name(last) if last is not None else None
            if last is not None:
                out.append(_text(last))
        else:
            stack.extend(child.named_children[::-1])
    return tuple(out)


def _first_named(node: Node) -> Node | None:
    return node.named_children[0] if node.named_children else None


# --- Python ------------------------------------------------------------------


def _py_define(node: Node, scope_kind: str | None) -> _Found | None:
    t = node.type
    if t == "function_definition":
        name = node.child_by_field_name("name")
        if name is None:
            return None
        kind = "method" if scope_kind == "class" else "function"
        return _Found(name, kind, body=node.child_by_field_name("body"))
    if t == "class_definition":
        name = node.child_by_field_name("name")
        if name is None:
            return None
        bases = _names_in(node.child_by_field_name("superclasses"))
        return _Found(name, "class", bases, body=node.child_by_field_name("body"))
    if t == "assignment" and scope_kind in (None, "class"):
        parent = node.parent
        if parent is None or parent.type != "expression_statement":
            return None
        left = node.child_by_field_name("left")
        if left is None or left.type != "identifier":
            return None
        name_text = _text(left)
        kind = "constant" if name_text.isupper() and scope_kind is None else "variable"
        if scope_kind == "class":
            kind = "field"
        return _Found(left, kind, opens_scope=False)
    return None


def _py_docstring(node: Node) -> str | None:
    body = node.child_by_field_name("body")
    if body is None or not body.named_child_count:
        return None
    first = body.named_child(0)
    if first is None or first.type != "expression_statement" or not first.named_child_count:
        return None
    string = first.named_child(0)
    if string is None or string.type != "string":
        return None
    content = "".join(_text(c) for c in string.named_children if c.type == "string_content")
    return _clean_doc(content)


def _py_import(node: Node, enclosing: str | None) -> list[Import]:
    line = node.start_point[0]
    out: list[Import] = []
    if node.type == "import_statement":
        for child in node.children_by_field_name("name"):
            if child.type == "aliased_import":
                out.append(
                    Import(
                        _text(child.child_by_field_name("name")),
                        None,
                        _text(child.child_by_field_name("alias")) or None,
                        line,
                        enclosing,
                    )
                )
            else:
                out.append(Import(_text(child), None, None, line, enclosing))
        return out
    module = _text(node.child_by_field_name("module_name"))
    names = node.children_by_field_name("name")
    if not names:
        return [Import(module, "*", None, line, enclosing)]
    for child in names:
        if child.type == "aliased_import":
            out.append(
                Import(
                    module,
                    _text(child.child_by_field_name("name")),
                    _text(child.child_by_field_name("alias")) or None,
                    line,
                    enclosing,
                )
            )
        else:
            out.append(Import(module, _text(child), None, line, enclosing))
    return out


def _py_callee(node: Node) -> Node | None:
    return _last_name(node.child_by_field_name("function"))


# --- JavaScript and TypeScript ----------------------------------------------------


def _js_define(node: Node, scope_kind: str | None) -> _Found | None:
    t = node.type
    name = node.child_by_field_name("name")
    if t in ("function_declaration", "generator_function_declaration", "function_signature"):
        return None if name is None else _Found(name, "function")
    if t in ("class_declaration", "abstract_class_declaration", "class"):
        if name is None:
            return None
        heritage = next((c for c in node.named_children if c.type == "class_heritage"), None)
        return _Found(name, "class", _names_in(heritage))
    if t in ("method_definition", "method_signature", "abstract_method_signature"):
        if name is None:
            return None
        kind = "constructor" if _text(name) == "constructor" else "method"
        return _Found(name, kind)
    if t == "interface_declaration":
        if name is None:
            return None
        ext = next((c for c in node.named_children if c.type == "extends_type_clause"), None)
        return _Found(name, "interface", _names_in(ext))
    if t == "type_alias_declaration":
        return None if name is None else _Found(name, "type", opens_scope=False)
    if t == "enum_declaration":
        return None if name is None else _Found(name, "enum")
    if t in ("internal_module", "module") and name is not None:
        return _Found(_last_name(name) or name, "module")
    if t in ("public_field_definition", "field_definition") and scope_kind == "class":
        prop = name or node.child_by_field_name("property")
        return None if prop is None else _Found(prop, "field", opens_scope=False)
    if t == "variable_declarator":
        if name is None or name.type != "identifier":
            return None
        value = node.child_by_field_name("value")
        if value is not None and value.type in (
            "arrow_function",
            "function_expression",
            "function",
            "generator_function",
        ):
            return _Found(name, "function", body=value.child_by_field_name("body"))
        if value is not None and value.type == "class":
            return _Found(name, "class")
        if scope_kind is None:
            decl = node.parent
            is_const = decl is not None and decl.children and _text(decl.children[0]) == "const"
            return _Found(name, "constant" if is_const else "variable", opens_scope=False)
    return None


def _js_callee(node: Node) -> Node | None:
    target = node.child_by_field_name("function") or node.child_by_field_name("constructor")
    return _last_name(target)


def _js_import(node: Node, enclosing: str | None) -> list[Import]:
    line = node.start_point[0]
    source = node.child_by_field_name("source")
    module = "".join(_text(c) for c in source.named_children) if source is not None else ""
    clause = next((c for c in node.named_children if c.type == "import_clause"), None)
    if clause is None:
        return [Import(module, None, None, line, enclosing)]
    out: list[Import] = []
    for child in clause.named_children:
        if child.type == "identifier":
            out.append(Import(module, "default", _text(child), line, enclosing))
        elif child.type == "namespace_import":
            out.append(Import(module, "*", _text(_first_named(child)) or None, line, enclosing))
        elif child.type == "named_imports":
            for spec in child.named_children:
                if spec.type != "import_specifier":
                    continue
                alias = spec.child_by_field_name("alias")
                out.append(
                    Import(
                        module,
                        _text(spec.child_by_field_name("name")),
                        _text(alias) or None,
                        line,
                        enclosing,
                    )
                )
    return out


# --- Go ------------------------------------------------------------------------


def _go_receiver(node: Node) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    for param in receiver.named_children:
        typ = param.child_by_field_name("type")
        while typ is not None and typ.type in ("pointer_type", "generic_type"):
            typ = typ.child_by_field_name("type") or _first_named(typ)
        if typ is not None:
            return _text(typ)
    return None


def _go_define(node: Node, scope_kind: str | None) -> _Found | None:
    t = node.type
    name = node.child_by_field_name("name")
    if t == "function_declaration":
        return None if name is None else _Found(name, "function")
    if t == "method_declaration":
        return None if name is None else _Found(name, "method")
    if t == "type_spec" or t == "type_alias":
        if name is None:
            return None
        typ = node.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(
            typ.type if typ is not None else "", "type"
        )
        bases: tuple[str, ...] = ()
        if typ is not None and typ.type == "struct_type":
            fields = _first_named(typ)
            embedded = []
            for f in fields.named_children if fields is not None else []:
                if f.type == "field_declaration" and f.child_by_field_name("name") is None:
                    last = _last_name(f.child_by_field_name("type"))
                    if last is not None:
                        embedded.append(_text(last))
            bases = tuple(embedded)
        elif typ is not None and typ.type == "interface_type":
            bases = tuple(_text(_last_name(e)) for e in typ.named_children if e.type == "type_elem")
        return _Found(name, kind, bases)
    if t in ("const_spec", "var_spec") and scope_kind is None:
        return (
            None
            if name is None
            else _Found(name, "constant" if t == "const_spec" else "variable", opens_scope=False)
        )
    if t == "method_elem" or t == "method_spec":
        return None if name is None else _Found(name, "method", opens_scope=False)
    return None


def _go_callee(node: Node) -> Node | None:
    return _last_name(node.child_by_field_name("function"))


def _go_import(node: Node, enclosing: str | None) -> list[Import]:
    path = node.child_by_field_name("path")
    alias = node.child_by_field_name("name")
    module = _text(path).strip('"`')
    return [Import(module, None, _text(alias) or None, node.start_point[0], enclosing)]


# --- Rust ----------------------------------------------------------------------


def _rust_type_name(node: Node | None) -> str | None:
    while node is not None and node.type in (
        "generic_type",
        "reference_type",
        "scoped_type_identifier",
        "pointer_type",
    ):
        nxt = node.child_by_field_name("type") or node.child_by_field_name("name")
        node = nxt
    return _text(node) if node is not None else None


def _rust_define(node: Node, scope_kind: str | None) -> _Found | None:
    t = node.type
    name = node.child_by_field_name("name")
    if name is None:
        return None
    if t in ("function_item", "function_signature_item"):
        kind = "method" if scope_kind in ("impl", "trait") else "function"
        return _Found(name, kind, opens_scope=t == "function_item")
    kinds = {
        "struct_item": "struct",
        "enum_item": "enum",
        "union_item": "struct",
        "trait_item": "trait",
        "type_item": "type",
        "mod_item": "module",
        "const_item": "constant",
        "static_item": "variable",
        "macro_definition": "macro",
    }
    item_kind = kinds.get(t)
    if item_kind is None:
        return None
    bases = _names_in(node.child_by_field_name("bounds")) if t == "trait_item" else ()
    opens = item_kind in ("struct", "enum", "trait", "module")
    return _Found(name, item_kind, bases, opens_scope=opens)


def _rust_scope(node: Node) -> tuple[str, str] | None:
    if node.type != "impl_item":
        return None
    name = _rust_type_name(node.child_by_field_name("type"))
    return (name, "impl") if name else None


def _rust_impl(node: Node) -> tuple[str, str] | None:
    if node.type != "impl_item":
        return None
    trait = node.child_by_field_name("trait")
    typ = _rust_type_name(node.child_by_field_name("type"))
    if trait is None or not typ:
        return None
    last = _last_name(trait)
    return (typ, _text(last)) if last is not None else None


def _rust_callee(node: Node) -> Node | None:
    if node.type == "macro_invocation":
        return _last_name(node.child_by_field_name("macro"))
    target = node.child_by_field_name("function")
    if target is not None and target.type == "generic_function":
        target = target.child_by_field_name("function")
    return _last_name(target)


def _rust_import(node: Node, enclosing: str | None) -> list[Import]:
    argument = node.child_by_field_name("argument")
    text = _WS.sub("", _text(argument))
    line = node.start_point[0]
    head, sep, tail = text.partition("::{")
    if sep:
        names = [n.strip() for n in tail.rstrip("}").split(",") if n.strip()]
        return [Import(head, n, None, line, enclosing) for n in names]
    module, _, last = text.rpartition("::")
    if " as " in _text(argument):
        last_text, _, alias = _text(argument).rpartition(" as ")
        module, _, last = _WS.sub("", last_text).rpartition("::")
        return [Import(module, last, alias.strip(), line, enclosing)]
    return [Import(module or last, last if module else None, None, line, enclosing)]


# --- Java ------------------------------------------------------------------------


def _java_define(node: Node, scope_kind: str | None) -> _Found | None:
    t = node.type
    if t == "field_declaration" or t == "constant_declaration":
        declarator = node.child_by_field_name("declarator")
        name = declarator.child_by_field_name("name") if declarator is not None else None
        return None if name is None else _Found(name, "field", opens_scope=False)
    name = node.child_by_field_name("name")
    if name is None:
        return None
    if t in ("class_declaration", "record_declaration"):
        bases = _names_in(node.child_by_field_name("superclass")) + _names_in(
            node.child_by_field_name("interfaces")
        )
        return _Found(name, "class", bases)
    if t in ("interface_declaration", "annotation_type_declaration"):
        ext = next((c for c in node.named_children if c.type == "extends_interfaces"), None)
        return _Found(name, "interface", _names_in(ext))
    if t == "enum_declaration":
        return _Found(name, "enum", _names_in(node.child_by_field_name("interfaces")))
    if t == "method_declaration":
        return _Found(name, "method")
    if t == "constructor_declaration":
        return _Found(name, "constructor")
    return None


def _java_callee(node: Node) -> Node | None:
    if node.type == "object_creation_expression":
        return _last_name(node.child_by_field_name("type"))
    return node.child_by_field_name("name")


def _java_import(node: Node, enclosing: str | None) -> list[Import]:
    parts = [c for c in node.named_children if c.type in ("scoped_identifier", "identifier")]
    text = _text(parts[0]) if parts else ""
    if any(c.type == "asterisk" for c in node.named_children):
        return [Import(text, "*", None, node.start_point[0], enclosing)]
    module, _, name = text.rpartition(".")
    return [Import(module, name, None, node.start_point[0], enclosing)]


_JS_DEFS = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "function_signature",
        "class_declaration",
        "abstract_class_declaration",
        "class",
        "method_definition",
        "method_signature",
        "abstract_method_signature",
        "interface_declaration",
        "type_alias_declaration",
        "enum_declaration",
        "internal_module",
        "module",
        "public_field_definition",
        "field_definition",
        "variable_declarator",
    }
)
_C_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})

_LANGS: dict[str, _Lang] = {
    "python": _Lang(
        def_types=frozenset({"function_definition", "class_definition", "assignment"}),
        define=_py_define,
        calls={"call": _py_callee},
        imports={"import_statement": _py_import, "import_from_statement": _py_import},
        identifiers=frozenset({"identifier"}),
        comments=frozenset({"comment"}),
        wrappers=frozenset({"decorated_definition"}),
        docstring=_py_docstring,
    ),
    "javascript": _Lang(
        def_types=_JS_DEFS,
        define=_js_define,
        calls={"call_expression": _js_callee, "new_expression": _js_callee},
        imports={"import_statement": _js_import},
        identifiers=frozenset({"identifier", "property_identifier"}),
        comments=frozenset({"comment"}),
        wrappers=frozenset({"export_statement", "lexical_declaration", "variable_declaration"}),
        skip_before=frozenset({"decorator"}),
    ),
    "go": _Lang(
        def_types=frozenset(
            {
                "function_declaration",
                "method_declaration",
                "type_spec",
                "type_alias",
                "const_spec",
                "var_spec",
                "method_elem",
                "method_spec",
            }
        ),
        define=_go_define,
        calls={"call_expression": _go_callee},
        imports={"import_spec": _go_import},
        identifiers=frozenset({"identifier", "type_identifier", "field_identifier"}),
        comments=frozenset({"comment"}),
        wrappers=frozenset({"type_declaration", "const_declaration", "var_declaration"}),
    ),
    "rust": _Lang(
        def_types=frozenset(
            {
                "function_item",
                "function_signature_item",
                "struct_item",
                "enum_item",
                "union_item",
                "trait_item",
                "type_item",
                "mod_item",
                "const_item",
                "static_item",
                "macro_definition",
                "impl_item",
            }
        ),
        define=_rust_define,
        calls={"call_expression": _rust_callee, "macro_invocation": _rust_callee},
        imports={"use_declaration": _rust_import},
        identifiers=frozenset({"identifier", "type_identifier", "field_identifier"}),
        comments=frozenset({"line_comment", "block_comment"}),
        skip_before=frozenset({"attribute_item"}),
        scope_of=_rust_scope,
        impl_of=_rust_impl,
    ),
    "java": _Lang(
        def_types=frozenset(
            {
                "field_declaration",
                "constant_declaration",
                "class_declaration",
                "record_declaration",
                "interface_declaration",
                "annotation_type_declaration",
                "enum_declaration",
                "method_declaration",
                "constructor_declaration",
            }
        ),
        define=_java_define,
        calls={"method_invocation": _java_callee, "object_creation_expression": _java_callee},
        imports={"import_declaration": _java_import},
        identifiers=frozenset({"identifier", "type_identifier"}),
        comments=_C_COMMENTS,
    ),
}
_LANGS["typescript"] = _Lang(
    def_types=_JS_DEFS,
    define=_js_define,
    calls=_LANGS["javascript"].calls,
    imports=_LANGS["javascript"].imports,
    identifiers=frozenset({"identifier", "property_identifier", "type_identifier"}),
    comments=frozenset({"comment"}),
    wrappers=_LANGS["javascript"].wrappers | {"ambient_declaration"},
    skip_before=frozenset({"decorator"}),
)
_LANGS["tsx"] = _LANGS["typescript"]


def _clean_doc(raw: str) -> str | None:
    # When the first line starts unindented, dedent(raw) only empties the lines of
    # spaces and tabs, which the dedent below does as well: it is skipped then.
    doc = (textwrap.dedent(raw) if raw[:1] in (" ", "\t", "\n") else raw).strip()
    if not doc:
        return None
    lines = doc.splitlines()
    doc = (lines[0].strip() + "\n" + textwrap.dedent("\n".join(lines[1:]))).strip()
    return doc[:MAX_DOC_CHARS]


_COMMENT_MARKS = re.compile(r"^\s*(?:/\*\*?|\*/|\*(?!/)|///?!?|#!?|//)?\s?")


def _leading_comment(lang: _Lang, node: Node) -> str | None:
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
        text = _text(prev)
        if text.endswith("*/"):
            text = text[:-2]
        block = [_COMMENT_MARKS.sub("", line, count=1).rstrip() for line in text.splitlines()]
        lines[:0] = block
        expected = prev.start_point[0]
        prev = prev.prev_sibling
    return _clean_doc("\n".join(lines)) if lines else None


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
    text = _WS.sub(" ", raw.decode("utf-8", "replace")).strip()
    text = text.removesuffix("{").removesuffix(":").rstrip()
    if len(text) > MAX_SIGNATURE_CHARS:
        text = text[: MAX_SIGNATURE_CHARS - 1] + "…"
    return text


class Extracted(NamedTuple):
    """One file's records with the occurrences packed, as the codec lays them out.

    What :func:`extract_packed` returns: ``engine/semantic/codec.py``
    (:func:`~engine.semantic.codec.encode_extracted`) writes it as is, and
    :func:`extract` wraps it in a :class:`FileIndex` whose occurrences are made
    on first use.

    Attributes:
        language: The language name.
        definitions: In source order.
        strings: Every occurrence name (first use first), then every enclosing
            qualname that is not also a name (first use first).
        name_count: How many of ``strings`` are names.
        occurrences: Seven integers per occurrence, in source order: name (an
            index into ``strings``), start line, start column, end line, end
            column (zero-based, byte columns), roles, enclosing (an index into
            ``strings``, or -1 at file level).
        imports: In source order.
        impls: ``(type, trait, line)`` for Rust ``impl Trait for Type``.
        truncated: True if a bound cut something.
    """

    language: str
    definitions: tuple[Definition, ...]
    strings: list[str]
    name_count: int
    occurrences: array[int]
    imports: tuple[Import, ...]
    impls: tuple[tuple[str, str, int], ...]
    truncated: bool


@cache
def _query(language: str) -> Query:
    """The capture query of a grammar: ``name`` identifiers, ``call`` calls, ``node`` the rest.

    ``node`` captures the node types whose rules need the enclosing scope
    (definitions, imports, scopes); types the grammar lacks are left out (a
    query naming an unknown type does not compile).
    """
    lang = _LANGS[language]
    grammar = grammar_for(language)

    def alternatives(types: frozenset[str]) -> str:
        known = sorted(t for t in types if grammar.id_for_node_kind(t, True))
        return "[" + " ".join(f"({t})" for t in known) + "]"

    source = (
        f"{alternatives(lang.interesting)} @node {alternatives(frozenset(lang.calls))} @call"
        f" {alternatives(lang.identifiers)} @name"
    )
    return Query(grammar, source)


@dataclass
class _Walk:
    """What the pass over the captured nodes gathers (see :func:`extract_packed`)."""

    path: str
    lang: _Lang
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
        if qualname is None:
            return -1
        found = self.scopes.get(qualname)
        if found is None:
            found = self.scopes[qualname] = len(self.scopes)
        return found


_READ = int(Role.READ_ACCESS)
_CALLED = int(Role.READ_ACCESS | Role.CALL)
_START = attrgetter("start_byte")
_STOP = attrgetter("end_byte")
_SPAN = attrgetter("start_byte", "end_byte")
_START_POINT = attrgetter("start_point")
_END_POINT = attrgetter("end_point")
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


def extract(path: str, blob: str, data: bytes, language: str) -> FileIndex:
    """Index one file.

    Args:
        path: The file's repository path (it names the records' symbols).
        blob: The git blob id the content came from (hex), recorded as is.
        data: The file's plaintext, at most :data:`MAX_FILE_BYTES` bytes.
        language: A name from ``engine.semantic.languages.LANGUAGES``.

    Returns:
        The file's :class:`FileIndex`; an empty one for oversized input.
    """
    found = extract_packed(path, data, language)
    strings, ints = found.strings, found.occurrences
    texts: list[str | None] = [*strings, None]  # enclosing -1 reads None
    roles = {value: Role(value) for value in set(ints[5::7])}
    occurrences = tuple(
        Occurrence(texts[n], Range(a, b, c, d), roles[r], texts[e])
        for n, a, b, c, d, r, e in zip(*(ints[k::7] for k in range(7)), strict=True)
    )
    return FileIndex(
        path,
        blob,
        language,
        found.definitions,
        occurrences,
        found.imports,
        found.impls,
        found.truncated,
        names=frozenset(strings[: found.name_count]),
    )


def extract_packed(path: str, data: bytes, language: str) -> Extracted:
    """Index one file into the packed form (what :func:`extract` and the codec use).

    One tree-sitter query, matched in C, captures the identifiers, the calls
    and the nodes whose rules need the enclosing scope (definitions, imports,
    Rust ``impl`` blocks). Those rules run on those nodes in source order; each
    call's rule finds the name it calls; then the identifiers become packed
    occurrences column by column (``map`` over C accessors, no Python loop per
    identifier), each with the innermost definition around it by byte range
    (siblings never overlap, so a range inside a definition's is a
    descendant). A definition's own name is no reference; a name a call calls
    is one occurrence with the ``CALL`` role; names inside an import are the
    import's. Zero-width identifiers (tokens tree-sitter's error recovery
    inserts; they spell nothing) are not occurrences. Every text field is
    bounded so the codec accepts the result (see the module's bounds).

    Args:
        path: The file's repository path.
        data: The file's plaintext.
        language: A name from ``engine.semantic.languages.LANGUAGES``.

    Returns:
        The records; empty and ``truncated`` for input over :data:`MAX_FILE_BYTES`.
    """
    if len(data) > MAX_FILE_BYTES:
        return Extracted(language, (), [], 0, array("i"), (), (), True)
    tree = parser_for(language).parse(data)
    captures = QueryCursor(_query(language)).captures(tree.root_node)
    walk = _Walk(path, _LANGS[language], data, scip_symbol(path, "", ()))
    _apply_rules(walk, captures.get("node", []))
    _callees(walk, captures.get("call", []))
    return _occurrences(walk, language, captures.get("name", []))


def _apply_rules(walk: _Walk, nodes: list[Node]) -> None:
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
    # A qualname too long to record (MAX_NAME_CHARS) names nothing: what it
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
            if child_scope is not None and len(child_scope) <= MAX_NAME_CHARS:
                scope_id, enclosing = walk.scope_id(child_scope), child_scope
            stack.append((end, child_scope, child_kinds, scope_id, enclosing))
            bounds.append(start)
            scope_at.append(scope_id)
    while len(stack) > 1:
        bounds.append(stack.pop()[0])
        scope_at.append(stack[-1][3])


_Scope = tuple[int, str | None, tuple[str, ...], int, str | None]
_END = 1 << 62  # past any byte offset


def _callees(walk: _Walk, calls: list[Node]) -> None:
    """Note the name each call calls (its identifier becomes a ``CALL`` occurrence)."""
    rules, identifiers, found = walk.lang.calls, walk.lang.identifiers, walk.calls
    for node in calls:
        callee = rules[node.type](node)
        if callee is not None and callee.type in _NAME_TYPES:
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


def _occurrences(walk: _Walk, language: str, idents: list[Node]) -> Extracted:
    """The occurrences, packed: every identifier that is a reference or a call, in source order."""
    data = walk.data
    idents.sort(key=_START)
    if walk.odd_callees:  # callees of another node type, as identifiers
        idents = sorted(idents + walk.odd_callees, key=_START)
    starts = list(map(_START, idents))
    ends = list(map(_STOP, idents))
    count = len(starts)
    # Left out: definitions' names (unless a call calls them too: error recovery
    # can make one node both), zero-width tokens, whatever lies in an import.
    keep = bytearray(b"\x01") * count
    for start in walk.defined - walk.calls:
        at = bisect_left(starts, start)
        if at < count and starts[at] == start:
            keep[at] = 0
    for start, end in walk.opaque:
        low, high = bisect_left(starts, start), bisect_left(starts, end)
        keep[low:high] = bytes(high - low)
    for at in compress(range(count), map(eq, starts, ends)):
        keep[at] = 0
    truncated = walk.truncated
    if keep.count(1) > MAX_OCCURRENCES:
        keep = keep[: [at for at, kept in enumerate(keep) if kept][MAX_OCCURRENCES]]
        truncated = True
    if keep.count(0) or len(keep) < count:
        idents = list(compress(idents, keep))
        starts = list(compress(starts, keep))
        ends = list(compress(ends, keep))
    scope_at = walk.scope_at
    scopes = list(map(scope_at.__getitem__, map(partial(bisect_right, walk.bounds), starts)))
    keys = list(map(data.__getitem__, map(slice, starts, ends)))
    table = dict.fromkeys(keys)  # name bytes, first use first
    if max(map(len, table), default=0) > MAX_NAME_CHARS:  # too long to record
        long = {k for k in table if len(k.decode("utf-8", "replace")) > MAX_NAME_CHARS}
        if long:
            short = bytes(map(long.__contains__, keys)).translate(_NOT)
            idents, starts, ends, scopes, keys = (
                list(compress(column, short)) for column in (idents, starts, ends, scopes, keys)
            )
            table = dict.fromkeys(keys)
            truncated = True
    strings = [key.decode("utf-8", "replace") for key in table]
    index = dict(zip(strings, range(len(strings)), strict=True))
    if len(index) == len(strings):
        ids = list(map(dict(zip(table, range(len(table)), strict=True)).__getitem__, keys))
    else:  # distinct bytes decoding alike (invalid UTF-8): one string, first use first
        index = {}
        for text in strings:
            index.setdefault(text, len(index))
        strings = list(index)
        ids = [index[key.decode("utf-8", "replace")] for key in keys]
    name_count = len(strings)
    # Enclosing qualnames join the table in the order occurrences first use them.
    qualnames = list(walk.scopes)
    remap = [0] * len(qualnames)
    for scope in dict.fromkeys(scopes):
        if scope >= 0:
            text = qualnames[scope]
            found = index.get(text)
            if found is None:
                found = index[text] = len(strings)
                strings.append(text)
            remap[scope] = found
    remap.append(-1)  # scope -1 (file level) reads the last entry: -1
    points = list(map(_START_POINT, idents))
    rows = array("i", map(_FIRST, points))
    columns = array("i", map(_SECOND, points))
    ints = array("i", bytes(28 * len(keys)))
    ints[0::7] = array("i", ids)
    ints[1::7] = rows
    ints[2::7] = columns
    if any(map(bytes.__contains__, table, repeat(b"\n"))):  # a name spanning lines
        points = list(map(_END_POINT, idents))
        ints[3::7] = array("i", map(_FIRST, points))
        ints[4::7] = array("i", map(_SECOND, points))
    else:
        ints[3::7] = rows
        ints[4::7] = array("i", map(add, columns, map(len, keys)))
    roles = array("i", _READS) * len(keys)
    for start in walk.calls:
        at = bisect_left(starts, start)
        if at < len(starts) and starts[at] == start:
            roles[at] = _CALLED
    ints[5::7] = roles
    ints[6::7] = array("i", map(remap.__getitem__, scopes))
    return Extracted(
        language,
        tuple(walk.definitions),
        strings,
        name_count,
        ints,
        tuple(walk.imports),
        tuple(walk.impls),
        truncated,
    )


_READS = (_READ,)
_NOT = bytes.maketrans(b"\x00\x01", b"\x01\x00")


def _visit(
    walk: _Walk, node: Node, scope: str | None, kinds: tuple[str, ...], enclosing: str | None
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
            if len(walk.imports) >= MAX_IMPORTS or not _short(imp.module, imp.name, imp.alias):
                walk.truncated = True
            else:
                walk.imports.append(imp)
        return scope, kinds
    if lang.impl_of is not None:
        impl = lang.impl_of(node)
        if impl is not None:
            if len(walk.impls) >= MAX_DEFINITIONS or not _short(impl[0], impl[1]):
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
    """True if every text fits the codec's bound on names (:data:`MAX_NAME_CHARS`)."""
    return (
        len(first) <= MAX_NAME_CHARS
        and (second is None or len(second) <= MAX_NAME_CHARS)
        and (third is None or len(third) <= MAX_NAME_CHARS)
    )


def _define(
    walk: _Walk, node: Node, found: _Found, scope: str | None, kinds: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    name = _text(found.name)
    outer, outer_kinds = scope, kinds
    if node.type == "method_declaration" and walk.lang is _LANGS["go"]:
        receiver = _go_receiver(node)
        if receiver:
            outer, outer_kinds = receiver, ("type",)
    qualname = f"{outer}.{name}" if outer else name
    all_kinds = (*outer_kinds, found.kind)
    if found.name.end_byte > found.name.start_byte:
        walk.defined.add(found.name.start_byte)
    if len(walk.definitions) >= MAX_DEFINITIONS:
        walk.truncated = True
    else:
        # scip_symbol(path, qualname, kinds), the path's part made once per file.
        symbol = walk.prefix + scip_symbol("_", qualname, all_kinds)[_ANY_PATH:]
        bases = found.bases
        if bases:
            bases = tuple(b for b in bases if _short(b))[:MAX_BASES]
            if len(bases) < len(found.bases):
                walk.truncated = True
        if not _short(name, qualname) or len(symbol) - len(walk.prefix) > 2 * MAX_NAME_CHARS:
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
