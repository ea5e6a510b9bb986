"""The Rust rules: definitions, ``impl`` scopes and traits, callees and ``use`` imports.

What they find: docs/semantic.md, "Languages".
"""

from __future__ import annotations

from tree_sitter import Node

from engine.semantic.records import Import
from engine.semantic.rules.base import WHITESPACE, Found, Lang, last_name, names_in, node_text

__all__ = ["RUST"]


def _type_name(node: Node | None) -> str | None:
    while node is not None and node.type in (
        "generic_type",
        "reference_type",
        "scoped_type_identifier",
        "pointer_type",
    ):
        nxt = node.child_by_field_name("type") or node.child_by_field_name("name")
        node = nxt
    return node_text(node) if node is not None else None


def _define(node: Node, scope_kind: str | None) -> Found | None:
    t = node.type
    name = node.child_by_field_name("name")
    if name is None:
        return None
    if t in ("function_item", "function_signature_item"):
        kind = "method" if scope_kind in ("impl", "trait") else "function"
        return Found(name, kind, opens_scope=t == "function_item")
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
    bases = names_in(node.child_by_field_name("bounds")) if t == "trait_item" else ()
    opens = item_kind in ("struct", "enum", "trait", "module")
    return Found(name, item_kind, bases, opens_scope=opens)


def _scope(node: Node) -> tuple[str, str] | None:
    if node.type != "impl_item":
        return None
    name = _type_name(node.child_by_field_name("type"))
    return (name, "impl") if name else None


def _impl(node: Node) -> tuple[str, str] | None:
    if node.type != "impl_item":
        return None
    trait = node.child_by_field_name("trait")
    typ = _type_name(node.child_by_field_name("type"))
    if trait is None or not typ:
        return None
    last = last_name(trait)
    return (typ, node_text(last)) if last is not None else None


def _callee(node: Node) -> Node | None:
    if node.type == "macro_invocation":
        return last_name(node.child_by_field_name("macro"))
    target = node.child_by_field_name("function")
    if target is not None and target.type == "generic_function":
        target = target.child_by_field_name("function")
    return last_name(target)


def _import(node: Node, enclosing: str | None) -> list[Import]:
    argument = node.child_by_field_name("argument")
    text = WHITESPACE.sub("", node_text(argument))
    line = node.start_point[0]
    head, sep, tail = text.partition("::{")
    if sep:
        names = [n.strip() for n in tail.rstrip("}").split(",") if n.strip()]
        return [Import(head, n, None, line, enclosing) for n in names]
    module, _, last = text.rpartition("::")
    if " as " in node_text(argument):
        last_text, _, alias = node_text(argument).rpartition(" as ")
        module, _, last = WHITESPACE.sub("", last_text).rpartition("::")
        return [Import(module, last, alias.strip(), line, enclosing)]
    return [Import(module or last, last if module else None, None, line, enclosing)]


RUST = Lang(
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
    define=_define,
    calls={"call_expression": _callee, "macro_invocation": _callee},
    imports={"use_declaration": _import},
    identifiers=frozenset({"identifier", "type_identifier", "field_identifier"}),
    comments=frozenset({"line_comment", "block_comment"}),
    skip_before=frozenset({"attribute_item"}),
    scope_of=_scope,
    impl_of=_impl,
)
