"""The index's records, shaped like SCIP: ranges, definitions, occurrences, imports.

Plain frozen data (named tuples), shared by every session whose view holds the
same blob; :class:`~engine.semantic.fileindex.FileIndex` holds one file's. The
per-file bounds (``LIMITS.definitions_per_file`` and the others of docs/limits.md)
are what the extractor keeps and the codec accepts, so every record made
decodes. How the records map to SCIP (https://github.com/sourcegraph/scip,
scip.proto): docs/semantic.md, "Records".
"""

from __future__ import annotations

import re
from enum import IntFlag
from typing import NamedTuple

__all__ = [
    "Definition",
    "Import",
    "Occurrence",
    "Outline",
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


class Definition(NamedTuple):
    """One defined symbol (SCIP ``SymbolInformation`` plus its definition range).

    A named tuple, as :class:`Range`: a warm start makes one per definition.

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


class Import(NamedTuple):
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


class Outline(NamedTuple):
    """What the merged tables of a view need of a file's definitions.

    The first three are columns, one entry per definition in source order. A
    record read from the persisted index has its outline checked when it is
    read, before any definition is made (:class:`~engine.semantic.fileindex.FileIndex`).

    Attributes:
        names: Each definition's ``name``.
        qualnames: Each definition's ``qualname``.
        symbols: Each definition's ``symbol``.
        bases: Every base the file's definitions name, once each, in order.
    """

    names: tuple[str, ...] = ()
    qualnames: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    bases: tuple[str, ...] = ()


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
