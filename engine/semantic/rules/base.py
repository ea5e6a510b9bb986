"""What the language rules share: the rule table's shape and helpers over syntax nodes.

A :class:`Lang` says how one language spells definitions, calls, imports and
names; the walk (engine/semantic/walk.py) applies it to the nodes one
tree-sitter query captured (docs/semantic.md, "Languages").
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

from tree_sitter import Node

from engine.limits import LIMITS
from engine.semantic.records import Import

__all__ = [
    "NAME_TYPES",
    "WHITESPACE",
    "Found",
    "Lang",
    "clean_doc",
    "first_named",
    "last_name",
    "names_in",
    "node_text",
]

WHITESPACE = re.compile(r"\s+")


def node_text(node: Node | None) -> str:
    """The source text of a node (UTF-8, invalid bytes replaced); ``""`` for none."""
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


def last_name(node: Node | None) -> Node | None:
    """The rightmost name of ``a``, ``a.b``, ``a::b``, ``a.b<T>``: the identifier that matters."""
    while node is not None:
        if node.type in NAME_TYPES:
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


NAME_TYPES = frozenset(
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
class Found:
    """A definition found at a node."""

    name: Node
    kind: str
    bases: tuple[str, ...] = ()
    opens_scope: bool = True
    body: Node | None = None


@dataclass
class Lang:
    """How one language spells definitions, calls, imports and names.

    ``define`` says what a node of ``def_types`` defines, given the kind of the
    enclosing scope; ``calls`` and ``imports`` map node types to the name a
    call calls and to the imports a statement makes; ``scope_of`` opens a scope
    that defines nothing (Rust ``impl``), ``impl_of`` reads ``impl Trait for
    Type``, ``receiver`` names the type a method is declared on (Go); a
    definition's leading comment is read past ``wrappers`` and ``skip_before``
    nodes.
    """

    define: Callable[[Node, str | None], Found | None]
    calls: dict[str, Callable[[Node], Node | None]]
    imports: dict[str, Callable[[Node, str | None], list[Import]]]
    identifiers: frozenset[str]
    comments: frozenset[str]
    wrappers: frozenset[str] = frozenset()
    skip_before: frozenset[str] = frozenset()
    scope_of: Callable[[Node], tuple[str, str] | None] | None = None
    docstring: Callable[[Node], str | None] | None = None
    impl_of: Callable[[Node], tuple[str, str] | None] | None = None
    receiver: Callable[[Node], str | None] | None = None
    def_types: frozenset[str] = frozenset()
    interesting: frozenset[str] = field(init=False)
    opaque: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        # The nodes whose rules need the enclosing scope (the query's ``node``).
        scopes = {"impl_item"} if self.scope_of is not None else set()
        self.interesting = self.def_types | set(self.imports) | scopes
        # What lies inside these is theirs: the names in an import are the import's.
        self.opaque = frozenset(self.imports)


def names_in(node: Node | None, types: frozenset[str] = NAME_TYPES) -> tuple[str, ...]:
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
            out.append(node_text(child))
        elif child.type in (
            "attribute",
            "member_expression",
            "scoped_type_identifier",
            "generic_type",
            "scoped_identifier",
            "qualified_type",
            "nested_type_identifier",
        ):
            last = last_name(child)
            if child.type == "generic_type":
                last = child.child_by_field_name("name") or first_named(child)
                last = last_name(last) if last is not None else None
            if last is not None:
                out.append(node_text(last))
        else:
            stack.extend(child.named_children[::-1])
    return tuple(out)


def first_named(node: Node) -> Node | None:
    """The first named child of a node, if any."""
    return node.named_children[0] if node.named_children else None


def clean_doc(raw: str) -> str | None:
    """A docstring or comment block as shown: dedented, stripped, bounded.

    The whole is dedented and stripped, then its first line stripped and the
    lines after it dedented again; the result is cut at
    ``LIMITS.doc_chars`` characters.

    Args:
        raw: The text between the quotes, or the comment lines without their marks.

    Returns:
        The cleaned text, or ``None`` if nothing is left.
    """
    # When the first line starts unindented, dedent(raw) only empties the lines of
    # spaces and tabs, which the dedent below does as well: it is skipped then.
    doc = (textwrap.dedent(raw) if raw[:1] in (" ", "\t", "\n") else raw).strip()
    if not doc:
        return None
    lines = doc.splitlines()
    doc = (lines[0].strip() + "\n" + textwrap.dedent("\n".join(lines[1:]))).strip()
    return doc[: LIMITS.doc_chars]

