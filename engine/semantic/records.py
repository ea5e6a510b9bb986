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
from collections.abc import Sequence
from enum import IntFlag
from typing import NamedTuple

__all__ = [
    "Definition",
    "FileIndex",
    "Import",
    "Occurrence",
    "PackedOccurrences",
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


class PackedOccurrences:
    """Occurrences kept as integers until first asked for (the persisted form).

    Seven integers per occurrence, as ``engine/semantic/codec.py`` lays them
    out: name (an index into ``strings``), the four range numbers, roles, and
    enclosing (an index into ``strings`` or -1). The codec has checked every
    number before making one; :meth:`unpack` only builds the tuples.

    Args:
        strings: The string table.
        ints: ``7 * count`` checked integers (any sequence of ints: an ``array``).
        roles: Each roles value that occurs, as a :class:`Role`.
    """

    __slots__ = ("_ints", "_roles", "_strings", "count")

    def __init__(self, strings: list[str], ints: Sequence[int], roles: dict[int, Role]) -> None:
        self._strings: list[str | None] = [*strings, None]  # index -1 is None
        self._ints = ints
        self._roles = roles
        self.count = len(ints) // 7

    def unpack(self) -> tuple[Occurrence, ...]:
        """The occurrences, in source order."""
        ints, texts, roles = self._ints, self._strings, self._roles
        columns = [ints[k::7] for k in range(7)]
        return tuple(
            Occurrence(texts[n], Range(a, b, c, d), roles[r], texts[e])
            for n, a, b, c, d, r, e in zip(*columns, strict=True)
        )


class FileIndex:
    """Everything indexed from one blob at one path (SCIP ``Document``).

    Immutable once made. Occurrences may come packed (a record read from the
    persisted index): they are then made into :class:`Occurrence` tuples the
    first time they are asked for, so a warm start builds only what queries
    touch.

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
        names: Every name an occurrence spells (without making the occurrences).
    """

    __slots__ = (
        "_by_name",
        "_inside",
        "_occurrences",
        "_packed",
        "blob",
        "definitions",
        "impls",
        "imports",
        "language",
        "names",
        "occurrence_count",
        "path",
        "truncated",
    )

    def __init__(
        self,
        path: str,
        blob: str,
        language: str,
        definitions: tuple[Definition, ...],
        occurrences: tuple[Occurrence, ...] | PackedOccurrences,
        imports: tuple[Import, ...],
        impls: tuple[tuple[str, str, int], ...] = (),
        truncated: bool = False,
        *,
        names: frozenset[str] | None = None,
    ) -> None:
        self.path = path
        self.blob = blob
        self.language = language
        self.definitions = definitions
        self.imports = imports
        self.impls = impls
        self.truncated = truncated
        self._by_name: dict[str, tuple[Occurrence, ...]] | None = None
        self._inside: dict[str, tuple[Occurrence, ...]] | None = None
        if isinstance(occurrences, PackedOccurrences):
            if names is None:
                raise ValueError("packed occurrences come with their names")
            self._packed: PackedOccurrences | None = occurrences
            self._occurrences: tuple[Occurrence, ...] | None = None
            self.occurrence_count = occurrences.count
            self.names = names
        else:
            self._packed = None
            self._occurrences = occurrences
            self.occurrence_count = len(occurrences)
            self.names = frozenset(o.name for o in occurrences) if names is None else names

    @property
    def occurrences(self) -> tuple[Occurrence, ...]:
        """References and calls, in source order (made from the packed form on first use)."""
        found = self._occurrences
        if found is None:
            packed = self._packed  # kept once set, never cleared
            if packed is None:  # pragma: no cover - __init__ sets one of the two
                raise RuntimeError("a FileIndex without occurrences")
            # Two threads may both unpack; they make equal tuples and one is kept.
            found = self._occurrences = packed.unpack()
        return found

    def named(self, name: str) -> tuple[Occurrence, ...]:
        """Occurrences spelling ``name``, in source order."""
        table = self._by_name
        if table is None:
            groups: dict[str, list[Occurrence]] = {}
            for occ in self.occurrences:
                groups.setdefault(occ.name, []).append(occ)
            table = self._by_name = {k: tuple(v) for k, v in groups.items()}
        return table.get(name, ())

    def inside(self, qualname: str) -> tuple[Occurrence, ...]:
        """Occurrences whose enclosing definition is ``qualname``, in source order."""
        table = self._inside
        if table is None:
            groups: dict[str, list[Occurrence]] = {}
            for occ in self.occurrences:
                if occ.enclosing is not None:
                    groups.setdefault(occ.enclosing, []).append(occ)
            table = self._inside = {k: tuple(v) for k, v in groups.items()}
        return table.get(qualname, ())

    def __setattr__(self, name: str, value: object) -> None:
        if name.startswith("_") or not hasattr(self, name):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"FileIndex.{name} is read-only")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileIndex):
            return NotImplemented
        return (
            self.path == other.path
            and self.blob == other.blob
            and self.language == other.language
            and self.definitions == other.definitions
            and self.imports == other.imports
            and self.impls == other.impls
            and self.truncated == other.truncated
            and self.names == other.names
            and self.occurrences == other.occurrences
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"FileIndex({self.path!r}, {self.blob!r}, {len(self.definitions)} definitions,"
            f" {self.occurrence_count} occurrences)"
        )


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
