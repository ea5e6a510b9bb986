"""The Go rules: definitions (methods scoped by their receiver), callees and imports.

What they find: docs/semantic.md, "Languages".
"""

from __future__ import annotations

from tree_sitter import Node

from engine.semantic.records import Import
from engine.semantic.rules.base import Found, Lang, first_named, last_name, node_text

__all__ = ["GO"]


def _receiver(node: Node) -> str | None:
    """The type a method is declared on (``func (s *Server) Close()``: ``Server``)."""
    if node.type != "method_declaration":
        return None
    return _receiver_type(node)


def _receiver_type(node: Node) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    for param in receiver.named_children:
        typ = param.child_by_field_name("type")
        while typ is not None and typ.type in ("pointer_type", "generic_type"):
            typ = typ.child_by_field_name("type") or first_named(typ)
        if typ is not None:
            return node_text(typ)
    return None


def _define(node: Node, scope_kind: str | None) -> Found | None:
    t = node.type
    name = node.child_by_field_name("name")
    if t == "function_declaration":
        return None if name is None else Found(name, "function")
    if t == "method_declaration":
        return None if name is None else Found(name, "method")
    if t == "type_spec" or t == "type_alias":
        if name is None:
            return None
        typ = node.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(
            typ.type if typ is not None else "", "type"
        )
        bases: tuple[str, ...] = ()
        if typ is not None and typ.type == "struct_type":
            fields = first_named(typ)
            embedded = []
            for f in fields.named_children if fields is not None else []:
                if f.type == "field_declaration" and f.child_by_field_name("name") is None:
                    last = last_name(f.child_by_field_name("type"))
                    if last is not None:
                        embedded.append(node_text(last))
            bases = tuple(embedded)
        elif typ is not None and typ.type == "interface_type":
            bases = tuple(
                node_text(last_name(e)) for e in typ.named_children if e.type == "type_elem"
            )
        return Found(name, kind, bases)
    if t in ("const_spec", "var_spec") and scope_kind is None:
        return (
            None
            if name is None
            else Found(name, "constant" if t == "const_spec" else "variable", opens_scope=False)
        )
    if t == "method_elem" or t == "method_spec":
        return None if name is None else Found(name, "method", opens_scope=False)
    return None


def _callee(node: Node) -> Node | None:
    return last_name(node.child_by_field_name("function"))


def _import(node: Node, enclosing: str | None) -> list[Import]:
    path = node.child_by_field_name("path")
    alias = node.child_by_field_name("name")
    module = node_text(path).strip('"`')
    return [Import(module, None, node_text(alias) or None, node.start_point[0], enclosing)]


GO = Lang(
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
    define=_define,
    calls={"call_expression": _callee},
    imports={"import_spec": _import},
    identifiers=frozenset({"identifier", "type_identifier", "field_identifier"}),
    comments=frozenset({"comment"}),
    wrappers=frozenset({"type_declaration", "const_declaration", "var_declaration"}),
    receiver=_receiver,
)
