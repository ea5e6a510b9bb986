"""Encoded records whose parts are checked and made only when first asked for.

A :class:`Row` is the :class:`~engine.semantic.fileindex.Parts` of a record the
codec opened lazily: it holds the bytes (or a way to read them) and checks
each part the first time it is made (docs/semantic.md, "The records' byte form").
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable
from typing import Any

from engine.limits import LIMITS
from engine.semantic.codec._checks import (
    Head,
    check_list,
    definitions_from,
    fail,
    imports_from,
    read_head,
    role_from,
)
from engine.semantic.records import (
    Definition,
    Import,
    Occurrence,
    Range,
    Role,
)

__all__ = ["Row"]


class Row:
    """The parts of encoded records checked and made only when first asked for.

    Implements :class:`~engine.semantic.fileindex.Parts`. Holds the bytes, or a
    way to read them (``fetch``, called on first use, once its answer is
    kept), untrusted: the first part asked for parses and checks the header
    and keeps what the other part needs of it (the checked string table, or
    the definitions' rows still to check), so a file's header is parsed once.
    """

    __slots__ = (
        "_fetch",
        "_imports",
        "_language",
        "_path",
        "_prefix",
        "_raw_definitions",
        "_strings",
        "_untrusted",
    )

    def __init__(
        self,
        untrusted: bytes | None,
        path: str,
        prefix: str,
        language: str,
        fetch: Callable[[], bytes | None] | None = None,
        imports: list[Any] | None = None,
    ) -> None:
        self._untrusted = untrusted
        self._fetch = fetch
        self._path = path
        self._prefix = prefix
        self._language = language
        self._imports = imports  # checked columns (from an outline), else from the bytes
        self._strings: Head | None = None  # a checked header, for the occurrences
        self._raw_definitions: list[Any] | None = None  # unchecked, for the definitions

    def _bytes(self) -> bytes:
        found = self._untrusted
        if found is None:
            fetch = self._fetch
            found = fetch() if fetch is not None else None
            if found is None:
                raise fail("no records")
            self._untrusted = found
        return found

    def _parse(self) -> Head:
        """The header, checked; what the other part needs of it is kept."""
        head = read_head(self._bytes(), self._language)
        self._strings = head._replace(doc=[])
        self._raw_definitions = head.doc[5]
        return head

    def definitions(self) -> tuple[Definition, ...]:
        """Every definition, each field checked."""
        raw = self._raw_definitions
        if raw is None:
            raw = self._parse().doc[5]
        rows = check_list(raw, LIMITS.definitions_per_file)
        made = definitions_from(rows, self._path, self._prefix)
        self._raw_definitions = None  # kept only until made (another call parses again)
        return made

    def imports(self) -> tuple[Import, ...]:
        """Every import, each field checked."""
        columns = self._imports
        if columns is not None:
            return tuple(map(Import, *columns)) if columns[0] else ()
        return imports_from(check_list(self._parse().doc[6], LIMITS.imports_per_file))

    def _columns(self) -> tuple[Head, list[array[int]], dict[int, Role]]:
        """The occurrence integers by column, each column checked in one pass in C."""
        head = self._strings or self._parse()
        flat = array("i")
        flat.frombytes(memoryview(self._bytes())[head.at + 1 :])
        if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
            flat.byteswap()
        if not flat:
            return head, [], {}
        columns = [flat[k::7] for k in range(7)]
        if min(columns[0]) < 0 or max(columns[0]) >= head.names:
            raise fail("occurrence name")
        if min(min(columns[k]) for k in range(1, 5)) < 0:
            raise fail("occurrence range")
        if min(columns[6]) < -1 or max(columns[6]) >= len(head.strings):
            raise fail("occurrence enclosing")
        return head, columns, {value: role_from(value) for value in set(columns[5])}

    def check_occurrences(self) -> None:
        """Check every occurrence integer without making the occurrences."""
        self._columns()

    def occurrences(self) -> tuple[Occurrence, ...]:
        """Every occurrence, its integers checked, in source order."""
        head, columns, roles = self._columns()
        self._strings = None  # kept only until made (another call parses again)
        if not columns:
            return ()
        texts: list[str | None] = [*head.strings, None]  # index -1 is None
        return tuple(
            Occurrence(texts[n], Range(a, b, c, d), roles[r], texts[e])
            for n, a, b, c, d, r, e in zip(*columns, strict=True)
        )
