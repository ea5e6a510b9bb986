"""One file's records (:class:`FileIndex`, SCIP's ``Document``), made whole or lazily.

A record is made by the extractor with every part built, or by the codec from
encoded bytes, its parts then checked and made on first use and, if one fails
its check, parsed again (docs/semantic.md, "The records' byte form").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from engine.semantic.records import Definition, Import, Occurrence, Outline

__all__ = ["FileIndex", "Parts", "Repair"]


class Parts(Protocol):
    """The parts of a file's records still encoded (``engine/semantic/codec/``).

    Each method checks its part and makes its records on the call; it raises
    :class:`ValueError` (the codec's ``CodecError``) if the part is malformed.
    """

    def definitions(self) -> tuple[Definition, ...]:
        """The definitions, checked, in source order."""
        ...

    def imports(self) -> tuple[Import, ...]:
        """The imports, checked, in source order."""
        ...

    def occurrences(self) -> tuple[Occurrence, ...]:
        """The occurrences, checked, in source order."""
        ...


Repair = Callable[[], "FileIndex | None"]
"""Parses a file again when its encoded records fail a check at first use;
returns the new records, or ``None`` if the file can no longer be read."""

# A record's parts are set, or replaced by a repair's, one thread at a time; repairs
# (a parse, perhaps a write to the persisted index) run one at a time, outside it.
_ADOPT = threading.RLock()
_REPAIRING = threading.Lock()


class FileIndex:
    """Everything indexed from one blob at one path (SCIP ``Document``).

    Made by the extractor with every record built, or by the codec from an
    encoded row (:meth:`from_parts`): such a record holds at first only what
    the merged tables of a view need (its :class:`Outline`, the names its
    occurrences spell, its ``impls``, counts), checked when the row was opened;
    its definitions, imports and occurrences are each checked and made the
    first time they are asked for, so a warm start builds only what queries
    touch. A part that fails its check then makes the whole record count as
    missing: ``repair`` parses the file again and this record takes the new
    records in place of every part (see :meth:`from_parts`).

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
        outline: The definitions' names, qualnames, symbols and bases
            (without making the definitions).
        occurrence_count: How many occurrences (without making them).
    """

    __slots__ = (
        "_by_name",
        "_defined",
        "_definitions",
        "_imports",
        "_inside",
        "_occurrences",
        "_outline",
        "_parts",
        "_repair",
        "blob",
        "impls",
        "language",
        "names",
        "occurrence_count",
        "path",
        "truncated",
    )

    path: str
    blob: str
    language: str
    impls: tuple[tuple[str, str, int], ...]
    truncated: bool
    names: frozenset[str]
    occurrence_count: int
    _by_name: dict[str, tuple[Occurrence, ...]] | None
    _inside: dict[str, tuple[Occurrence, ...]] | None
    _defined: _Defined | None

    def __init__(
        self,
        path: str,
        blob: str,
        language: str,
        definitions: tuple[Definition, ...],
        occurrences: tuple[Occurrence, ...],
        imports: tuple[Import, ...],
        impls: tuple[tuple[str, str, int], ...] = (),
        truncated: bool = False,
        *,
        names: frozenset[str] | None = None,
    ) -> None:
        self._set(
            path,
            blob,
            language,
            impls,
            truncated,
            frozenset(o.name for o in occurrences) if names is None else names,
            len(occurrences),
        )
        self._definitions: tuple[Definition, ...] | None = definitions
        self._imports: tuple[Import, ...] | None = imports
        self._occurrences: tuple[Occurrence, ...] | None = occurrences
        self._outline: Outline | None = None
        self._parts: Parts | None = None
        self._repair: Repair | None = None

    def _set(
        self,
        path: str,
        blob: str,
        language: str,
        impls: tuple[tuple[str, str, int], ...],
        truncated: bool,
        names: frozenset[str],
        occurrence_count: int,
    ) -> None:
        """Set the public attributes (read-only afterwards) and clear the lookups."""
        setter = object.__setattr__
        setter(self, "path", path)
        setter(self, "blob", blob)
        setter(self, "language", language)
        setter(self, "impls", impls)
        setter(self, "truncated", truncated)
        setter(self, "names", names)
        setter(self, "occurrence_count", occurrence_count)
        setter(self, "_by_name", None)
        setter(self, "_inside", None)
        setter(self, "_defined", None)

    @classmethod
    def from_parts(
        cls,
        path: str,
        blob: str,
        language: str,
        parts: Parts,
        *,
        outline: Outline,
        names: frozenset[str],
        occurrence_count: int,
        impls: tuple[tuple[str, str, int], ...] = (),
        truncated: bool = False,
        repair: Repair | None = None,
        definitions: tuple[Definition, ...] | None = None,
        imports: tuple[Import, ...] | None = None,
    ) -> FileIndex:
        """A record whose parts are checked and made on first use (a decoded row).

        Args:
            path: Repository path.
            blob: Blob id (hex).
            language: The path's language.
            parts: The encoded parts.
            outline: The definitions' outline, already checked; it must be the
                one ``parts.definitions()`` would give.
            names: The names the occurrences spell, already checked.
            occurrence_count: How many occurrences ``parts`` holds.
            impls: Rust ``impl`` blocks, already checked.
            truncated: Whether the per-file bounds cut something.
            repair: Called (once) if a part fails its check: its answer replaces
                every part of this record (``None``: no records at all).
            definitions: The definitions if already made (else made on first use).
            imports: The imports if already made (else made on first use).

        Returns:
            The record.
        """
        record = cls.__new__(cls)
        record._set(path, blob, language, impls, truncated, names, occurrence_count)
        setter = object.__setattr__
        setter(record, "_outline", outline)
        setter(record, "_parts", parts)
        setter(record, "_repair", repair)
        setter(record, "_definitions", definitions)
        setter(record, "_imports", imports)
        setter(record, "_occurrences", None)
        return record

    def _part(self, attr: str) -> tuple[Any, ...]:
        """A part, made from the encoded parts on first use (or from a repair)."""
        found: tuple[Any, ...] | None = getattr(self, attr)
        if found is not None:
            return found
        parts = self._parts
        if parts is None:  # every part was made meanwhile (parts are dropped only then)
            found = getattr(self, attr)
            if found is None:  # pragma: no cover - parts are dropped once all are set
                raise RuntimeError("a FileIndex without its records")
            return found
        try:
            made: tuple[Any, ...] = getattr(parts, attr[1:])()
        except ValueError:
            self._repaired(parts)
            return self._part(attr)
        with _ADOPT:
            if self._parts is parts and getattr(self, attr) is None:
                setattr(self, attr, made)
                if self._definitions is not None and self._occurrences is not None:
                    self._let_go(parts)
            # Else another thread made it (equal) or a repair replaced it: keep that.
            kept: tuple[Any, ...] = getattr(self, attr)
        return kept

    def _let_go(self, parts: Parts) -> None:
        """Drop the encoded parts once definitions and occurrences are made (under ``_ADOPT``)."""
        if self._imports is None:
            try:
                self._imports = parts.imports()  # made from what was checked when opened
            except ValueError:
                return  # keep the parts: the imports are made (or repaired) on first use
        self._parts = self._repair = None

    def _repaired(self, parts: Parts) -> None:
        """Count these records as missing: take a new parse's records for every part."""
        with _REPAIRING:  # one repair at a time, so each record is parsed again once
            if self._parts is not parts:
                return  # another thread repaired it meanwhile
            repair = self._repair
            fresh = repair() if repair is not None else None
            if fresh is None:
                fresh = FileIndex(self.path, self.blob, self.language, (), (), ())
            with _ADOPT:
                self._adopt(fresh)

    def _adopt(self, fresh: FileIndex) -> None:
        """Take every part of ``fresh`` (an extracted record) in place of the encoded ones."""
        self._definitions = fresh.definitions
        self._imports = fresh.imports
        self._occurrences = fresh.occurrences
        self._outline = fresh.outline
        self._set(
            self.path,
            self.blob,
            self.language,
            fresh.impls,
            fresh.truncated,
            fresh.names,
            fresh.occurrence_count,
        )
        self._parts = None
        self._repair = None

    @property
    def definitions(self) -> tuple[Definition, ...]:
        """In source order (checked and made from the encoded parts on first use)."""
        return self._part("_definitions")

    @property
    def imports(self) -> tuple[Import, ...]:
        """In source order (checked and made from the encoded parts on first use)."""
        return self._part("_imports")

    @property
    def occurrences(self) -> tuple[Occurrence, ...]:
        """References and calls, in source order (checked and made on first use)."""
        return self._part("_occurrences")

    @property
    def outline(self) -> Outline:
        """The definitions' names, qualnames, symbols and bases, column by column."""
        found = self._outline
        if found is None:
            defs = self.definitions
            found = self._outline = Outline(
                tuple(d.name for d in defs),
                tuple(d.qualname for d in defs),
                tuple(d.symbol for d in defs),
                tuple(dict.fromkeys(b for d in defs for b in d.bases)),
            )
        return found

    def _lookups(self) -> _Defined:
        found = self._defined
        if found is None:
            by_name: dict[str, list[Definition]] = {}
            by_qualname: dict[str, list[Definition]] = {}
            by_symbol: dict[str, Definition] = {}
            for d in self.definitions:
                by_name.setdefault(d.name, []).append(d)
                by_qualname.setdefault(d.qualname, []).append(d)
                by_symbol[d.symbol] = d  # the last of a repeated symbol, as a view keeps it
            found = self._defined = _Defined(by_name, by_qualname, by_symbol)
        return found

    def defined(self, name: str) -> list[Definition]:
        """Definitions named ``name``, in source order (do not change the list)."""
        return self._lookups().by_name.get(name, _NONE)

    def qualified(self, qualname: str) -> list[Definition]:
        """Definitions whose qualname is ``qualname``, in source order (do not change the list)."""
        return self._lookups().by_qualname.get(qualname, _NONE)

    def symbol(self, symbol: str) -> Definition | None:
        """The (last) definition whose SCIP symbol is ``symbol``, if any."""
        return self._lookups().by_symbol.get(symbol)

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
            f"FileIndex({self.path!r}, {self.blob!r}, {len(self.outline.names)} definitions,"
            f" {self.occurrence_count} occurrences)"
        )


class _Defined(NamedTuple):
    by_name: dict[str, list[Definition]]
    by_qualname: dict[str, list[Definition]]
    by_symbol: dict[str, Definition]


_NONE: list[Definition] = []
