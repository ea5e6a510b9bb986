"""The JavaScript and TypeScript rules: definitions, callees and imports.

What they find: docs/semantic.md, "Languages".
"""

from __future__ import annotations

from tree_sitter import Node

from engine.semantic.records import Import
from engine.semantic.rules.base import Found, Lang, first_named, last_name, names_in, node_text

__all__ = ["JAVASCRIPT", "TYPESCRIPT"]


def _define(node: Node, scope_kind: str | None) -> Found | None:
    t = node.type
    name = node.child_by_field_name("name")
    if t in ("function_declaration", "generator_function_declaration", "function_signature"):
        return None if name is None else Found(name, "function")
    if t in ("class_declaration", "abstract_class_declaration", "class"):
        if name is None:
            return None
        heritage = next((c for c in node.named_children if c.type == "class_heritage"), None)
        return Found(name, "class", names_in(heritage))
    if t in ("method_definition", "method_signature", "abstract_method_signature"):
        if name is None:
            return None
        kind = "constructor" if node_text(name) == "constructor" else "method"
        return Found(name, kind)
    if t == "interface_declaration":
        if name is None:
            return None
        ext = next((c for c in node.named_children if c.type == "extends_type_clause"), None)
        return Found(name, "interface", names_in(ext))
    if t == "type_alias_declaration":
        return None if name is None else Found(name, "type", opens_scope=False)
    if t == "enum_declaration":
        return None if name is None else Found(name, "enum")
    if t in ("internal_module", "module") and name is not None:
        return Found(last_name(name) or name, "module")
    if t in ("public_field_definition", "field_definition") and scope_kind == "class":
        prop = name or node.child_by_field_name("property")
        return None if prop is None else Found(prop, "field", opens_scope=False)
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
            return Found(name, "function", body=value.child_by_field_name("body"))
        if value is not None and value.type == "class":
            return Found(name, "class")
        if scope_kind is None:
            decl = node.parent
            is_const = decl is not None and decl.children and node_text(decl.children[0]) == "const"
            return Found(name, "constant" if is_const else "variable", opens_scope=False)
    return None


def _callee(node: Node) -> Node | None:
    target = node.child_by_field_name("function") or node.child_by_field_name("constructor")
    return last_name(target)


def _import(node: Node, enclosing: str | None) -> list[Import]:
    line = node.start_point[0]
    source = node.child_by_field_name("source")
    module = "".join(node_text(c) for c in source.named_children) if source is not None else ""
    clause = next((c for c in node.named_children if c.type == "import_clause"), None)
    if clause is None:
        return [Import(module, None, None, line, enclosing)]
    out: list[Import] = []
    for child in clause.named_children:
        if child.type == "identifier":
            out.append(Import(module, "default", node_text(child), line, enclosing))
        elif child.type == "namespace_import":
            out.append(Import(module, "*", node_text(first_named(child)) or None, line, enclosing))
        elif child.type == "named_imports":
            for spec in child.named_children:
                if spec.type != "import_specifier":
                    continue
                alias = spec.child_by_field_name("alias")
                out.append(
                    Import(
                        module,
                        node_text(spec.child_by_field_name("name")),
                        node_text(alias) or None,
                        line,
                        enclosing,
                    )
                )
    return out


_DEFINITIONS = frozenset(
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


JAVASCRIPT = Lang(
    def_types=_DEFINITIONS,
    define=_define,
    calls={"call_expression": _callee, "new_expression": _callee},
    imports={"import_statement": _import},
    identifiers=frozenset({"identifier", "property_identifier"}),
    comments=frozenset({"comment"}),
    wrappers=frozenset({"export_statement", "lexical_declaration", "variable_declaration"}),
    skip_before=frozenset({"decorator"}),
)

TYPESCRIPT = Lang(
    def_types=_DEFINITIONS,
    define=_define,
    calls=JAVASCRIPT.calls,
    imports=JAVASCRIPT.imports,
    identifiers=frozenset({"identifier", "property_identifier", "type_identifier"}),
    comments=frozenset({"comment"}),
    wrappers=JAVASCRIPT.wrappers | {"ambient_declaration"},
    skip_before=frozenset({"decorator"}),
)
