"""The Python rules: definitions, docstrings, imports and callees.

What they find: docs/semantic.md, "Languages".
"""

from __future__ import annotations

from tree_sitter import Node

from engine.semantic.records import Import
from engine.semantic.rules.base import Found, Lang, clean_doc, last_name, names_in, node_text

__all__ = ["PYTHON"]


def _define(node: Node, scope_kind: str | None) -> Found | None:
    t = node.type
    if t == "function_definition":
        name = node.child_by_field_name("name")
        if name is None:
            return None
        kind = "method" if scope_kind == "class" else "function"
        return Found(name, kind, body=node.child_by_field_name("body"))
    if t == "class_definition":
        name = node.child_by_field_name("name")
        if name is None:
            return None
        bases = names_in(node.child_by_field_name("superclasses"))
        return Found(name, "class", bases, body=node.child_by_field_name("body"))
    if t == "assignment" and scope_kind in (None, "class"):
        parent = node.parent
        if parent is None or parent.type != "expression_statement":
            return None
        left = node.child_by_field_name("left")
        if left is None or left.type != "identifier":
            return None
        name_text = node_text(left)
        kind = "constant" if name_text.isupper() and scope_kind is None else "variable"
        if scope_kind == "class":
            kind = "field"
        return Found(left, kind, opens_scope=False)
    return None


def _docstring(node: Node) -> str | None:
    body = node.child_by_field_name("body")
    if body is None or not body.named_child_count:
        return None
    first = body.named_child(0)
    if first is None or first.type != "expression_statement" or not first.named_child_count:
        return None
    string = first.named_child(0)
    if string is None or string.type != "string":
        return None
    content = "".join(node_text(c) for c in string.named_children if c.type == "string_content")
    return clean_doc(content)


def _import(node: Node, enclosing: str | None) -> list[Import]:
    line = node.start_point[0]
    out: list[Import] = []
    if node.type == "import_statement":
        for child in node.children_by_field_name("name"):
            if child.type == "aliased_import":
                out.append(
                    Import(
                        node_text(child.child_by_field_name("name")),
                        None,
                        node_text(child.child_by_field_name("alias")) or None,
                        line,
                        enclosing,
                    )
                )
            else:
                out.append(Import(node_text(child), None, None, line, enclosing))
        return out
    module = node_text(node.child_by_field_name("module_name"))
    names = node.children_by_field_name("name")
    if not names:
        return [Import(module, "*", None, line, enclosing)]
    for child in names:
        if child.type == "aliased_import":
            out.append(
                Import(
                    module,
                    node_text(child.child_by_field_name("name")),
                    node_text(child.child_by_field_name("alias")) or None,
                    line,
                    enclosing,
                )
            )
        else:
            out.append(Import(module, node_text(child), None, line, enclosing))
    return out


def _callee(node: Node) -> Node | None:
    return last_name(node.child_by_field_name("function"))


PYTHON = Lang(
    def_types=frozenset({"function_definition", "class_definition", "assignment"}),
    define=_define,
    calls={"call": _callee},
    imports={"import_statement": _import, "import_from_statement": _import},
    identifiers=frozenset({"identifier"}),
    comments=frozenset({"comment"}),
    wrappers=frozenset({"decorated_definition"}),
    docstring=_docstring,
)
