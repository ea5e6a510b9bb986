"""Index records shaped like SCIP (https://github.com/sourcegraph/scip, scip.proto).

One :class:`FileIndex` per indexed blob plays SCIP's ``Document``: its
:class:`Definition` records are SCIP ``SymbolInformation`` (symbol, kind,
display name, documentation, signature, enclosing symbol, relationships) with the
definition's range, and its :class:`Occurrence` records are SCIP ``Occurrence``
(range, symbol roles). Two differences, both documented in docs/semantic.md:

* references are kept by the *name* they spell (``Occurrence.name``) and are
  resolved to definitions at query time, by name, since no type checker runs;
  a SCIP indexer that resolves them would fill ``Occurrence.symbol`` instead;
* a call is an occurrence with the extra role :data:`Role.CALL` (SCIP has no
  call role; the bit sits above SCIP's defined roles).

Ranges are zero-based ``(start line, start column, end line, end column)`` in
bytes, as SCIP's. Everything here is frozen data: records are shared by every
session whose view holds the same blob.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntFlag
from typing import NamedTuple

__all__ = [
    "Definition",
    "FileIndex",
    "Import",
    "Occurrence",
    "Range",
    "Role",
    "scip_symbol",
]


class Role(IntFlag):
    """Occurrence roles: SCIP ``SymbolRole`` values, plus :attr:`CALL`."""

    DEFINITION = 0x1
    IMPORT = 0x2
    WRITE_ACCESS = 0x4
    READ_ACCESS = 0x8
    CALL = 0x100  # chit's extension: the occurrence is the callee of a call


class Range(NamedTuple):
    """A zero-based source range: lines and byte columns, end exclusive.

    A named tuple rather than a frozen dataclass: an index holds one per
    occurrence (hundreds of thousands), and a tuple is made three times faster.
    """

    start_line: int
    start_col: int
    end_line: int
    end_col: int


@dataclass(frozen=True, slots=True)
class Definition:
    """One defined symbol (SCIP ``SymbolInformation`` plus its definition range).

    Attributes:
        symbol: The SCIP symbol string (:func:`scip_symbol`).
        name: The display name as written (``add_route``).
        qualname: Dotted name within its file (``Router.add_route``).
        kind: ``class``, ``function``, ``method``, ``variable``, ``constant``,
            ``interface``, ``struct``, ``enum``, ``trait``, ``type``, ``module``,
            ``field``, ``constructor`` or ``macro``.
        path: Repository path of the file.
        range: The whole definition.
        name_range: The name token (SCIP's definition occurrence).
        signature: The header up to the body, whitespace collapsed, bounded.
        doc: The docstring or leading comment, bounded; ``None`` if none.
        scope: ``qualname`` of the enclosing definition; ``None`` at file level.
        bases: Parent classes, interfaces or traits as written (SCIP
            relationships ``is_implementation``), resolved by name at query time.
    """

    symbol: str
    name: str
    qualname: str
    kind: str
    path: str
    range: Range
    name_range: Range
    signature: str
    doc: str | None
    scope: str | None
    bases: tuple[str, ...] = ()


class Occurrence(NamedTuple):
    """A use of a name (SCIP ``Occurrence`` without a resolved symbol).

    A named tuple, as :class:`Range`, because there are many.

    Attributes:
        name: The identifier as written (the last component of ``a.b.c``).
        range: Where it occurs.
        roles: :class:`Role` bits (``READ_ACCESS``, with ``CALL`` for a callee).
        enclosing: ``qualname`` of the definition it occurs in; ``None`` at file level.
    """

    name: str
    range: Range
    roles: Role
    enclosing: str | None


@dataclass(frozen=True, slots=True)
class Import:
    """One imported module or name (an occurrence with SCIP's ``Import`` role).

    Attributes:
        module: The module, package or path as written (``starlette.routing``,
            ``./m.js``, ``std::collections``, ``java.util.List``).
        name: The imported name, or ``None`` when the module itself is imported.
        alias: The local alias, if any.
        line: Zero-based line.
        enclosing: ``qualname`` of the definition it occurs in, if any.
    """

    module: str
    name: str | None
    alias: str | None
    line: int
    enclosing: str | None


@dataclass(frozen=True, slots=True)
class FileIndex:
    """Everything indexed from one blob at one path (SCIP ``Document``).

    Attributes:
        path: Repository path.
        blob: The git blob id the records were built from (hex).
        language: ``python``, ``javascript``, ``typescript``, ``tsx``, ``go``,
            ``rust`` or ``java``.
        definitions: In source order.
        occurrences: References and calls, in source order, bounded.
        imports: In source order.
        impls: ``(type, trait, line)`` for Rust ``impl Trait for Type`` blocks.
        truncated: True if the per-file bounds cut occurrences or definitions.
    """

    path: str
    blob: str
    language: str
    definitions: tuple[Definition, ...]
    occurrences: tuple[Occurrence, ...]
    imports: tuple[Import, ...]
    impls: tuple[tuple[str, str, int], ...] = ()
    truncated: bool = False


_SIMPLE = re.compile(r"[A-Za-z0-9_+$-]+")
_SUFFIX = {
    "class": "#",
    "interface": "#",
    "struct": "#",
    "enum": "#",
    "trait": "#",
    "type": "#",
    "function": "().",
    "method": "().",
    "constructor": "().",
    "macro": "!",
    "module": "/",
}


def _escape(name: str) -> str:
    if _SIMPLE.fullmatch(name):
        return name
    return "`" + name.replace("`", "``") + "`"


def scip_symbol(path: str, qualname: str, kinds: tuple[str, ...]) -> str:
    """Return the SCIP symbol string of a definition.

    The scheme is ``chit`` with the package fields left as ``.`` (SCIP's empty
    value); the file's path segments are namespace descriptors (``/``), then
    one descriptor per component of ``qualname``, suffixed by its kind (``#``
    type, ``().`` method or function, ``.`` term, ``!`` macro, ``/`` module).

    Args:
        path: The file's repository path.
        qualname: Dotted name within the file.
        kinds: The kind of each ``qualname`` component, outermost first.

    Returns:
        For example ``chit . . . starlette/`routing.py`/Router#add_route().``.
    """
    parts = [_escape(segment) + "/" for segment in path.split("/")]
    for name, kind in zip(qualname.split("."), kinds, strict=False):
        parts.append(_escape(name) + _SUFFIX.get(kind, "."))
    return "chit . . . " + "".join(parts)
