"""The Java rules: definitions, callees and imports.

What they find: docs/semantic.md, "Languages".
"""

from __future__ import annotations

from tree_sitter import Node

from engine.semantic.records import Import
from engine.semantic.rules.base import Found, Lang, last_name, names_in, node_text

__all__ = ["JAVA"]


def _define(node: Node, scope_kind: str | None) -> Found | None:
    t = node.type
    if t == "field_declaration" or t == "constant_declaration":
        declarator = node.child_by_field_name("declarator")
        name = declarator.child_by_field_name("name") if declarator is not None else None
        return None if name is None else Found(name, "field", opens_scope=False)
    name = node.child_by_field_name("name")
    if name is None:
        return None
    if t in ("class_declaration", "record_declaration"):
        bases = names_in(node.child_by_field_name("superclass")) + names_in(
            node.child_by_field_name("interfaces")
        )
        return Found(name, "class", bases)
    if t in ("interface_declaration", "annotation_type_declaration"):
        ext = next((c for c in node.named_children if c.type == "extends_interfaces"), None)
        return Found(name, "interface", names_in(ext))
    if t == "enum_declaration":
        return Found(name, "enum", names_in(node.child_by_field_name("interfaces")))
    if t == "method_declaration":
        return Found(name, "method")
    if t == "constructor_declaration":
        return Found(name, "constructor")
    return None


def _callee(node: Node) -> Node | None:
    if node.type == "object_creation_expression":
        return last_name(node.child_by_field_name("type"))
    return node.child_by_field_name("name")


def _import(node: Node, enclosing: str | None) -> list[Import]:
    parts = [c for c in node.named_children if c.type in ("scoped_identifier", "identifier")]
    text = node_text(parts[0]) if parts else ""
    if any(c.type == "asterisk" for c in node.named_children):
        return [Import(text, "*", None, node.start_point[0], enclosing)]
    module, _, name = text.rpartition(".")
    return [Import(module, name, None, node.start_point[0], enclosing)]


_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})


JAVA = Lang(
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
    define=_define,
    calls={"method_invocation": _callee, "object_creation_expression": _callee},
    imports={"import_declaration": _import},
    identifiers=frozenset({"identifier", "type_identifier"}),
    comments=_COMMENTS,
)
