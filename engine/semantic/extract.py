"""Extract SCIP-shaped records from one file with tree-sitter (pure: bytes in, records out).

One tree-sitter query per grammar, matched in C, captures the identifiers, the
calls and the nodes the language's rules need (engine/semantic/rules/); the
walk applies the rules to those nodes only (engine/semantic/walk.py) and the
identifiers are packed column by column (engine/semantic/packed.py). Names are
what the source spells: nothing is resolved across files here. Bounds: the
per-file fields of :data:`engine.limits.LIMITS` (docs/limits.md).
See docs/semantic.md, "Building and reuse".
"""

from __future__ import annotations

from array import array
from functools import cache

from tree_sitter import Query, QueryCursor

from engine.limits import LIMITS
from engine.semantic.fileindex import FileIndex
from engine.semantic.languages import grammar_for, parser_for
from engine.semantic.packed import Extracted, pack
from engine.semantic.records import Occurrence, Range, Role, scip_symbol
from engine.semantic.rules.base import Lang
from engine.semantic.rules.ecmascript import JAVASCRIPT, TYPESCRIPT
from engine.semantic.rules.go import GO
from engine.semantic.rules.java import JAVA
from engine.semantic.rules.python import PYTHON
from engine.semantic.rules.rust import RUST
from engine.semantic.walk import Walk, apply_rules, find_callees

__all__ = ["extract", "extract_packed"]


_LANGS: dict[str, Lang] = {
    "python": PYTHON,
    "javascript": JAVASCRIPT,
    "typescript": TYPESCRIPT,
    "tsx": TYPESCRIPT,
    "go": GO,
    "rust": RUST,
    "java": JAVA,
}
"""The rules of each language of ``engine.semantic.languages.LANGUAGES``."""


def extract(path: str, blob: str, data: bytes, language: str) -> FileIndex:
    """Index one file.

    Args:
        path: The file's repository path (it names the records' symbols).
        blob: The git blob id the content came from (hex), recorded as is.
        data: The file's plaintext, at most ``LIMITS.semantic_file_bytes`` bytes.
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
    bounded so the codec accepts the result (engine/semantic/records.py).

    Args:
        path: The file's repository path.
        data: The file's plaintext.
        language: A name from ``engine.semantic.languages.LANGUAGES``.

    Returns:
        The records; empty and ``truncated`` for input over ``LIMITS.semantic_file_bytes``.
    """
    if len(data) > LIMITS.semantic_file_bytes:
        return Extracted(language, (), [], 0, array("i"), (), (), True)
    tree = parser_for(language).parse(data)
    captures = QueryCursor(_query(language)).captures(tree.root_node)
    walk = Walk(path, _LANGS[language], data, scip_symbol(path, "", ()))
    apply_rules(walk, captures.get("node", []))
    find_callees(walk, captures.get("call", []))
    return pack(walk, language, captures.get("name", []))


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

