r"""The byte form of one file's records: how they cross processes and sit on disk.

Index workers (``engine/semantic/pool.py``) hand records to the engine in this
form, and the persisted index (``engine/semantic/persist.py``) stores it, with
an outline of it. What the decoders read is untrusted input (a file anyone who
can write the git directory can change): it is parsed with the standard
library's ``json``, bounded in size, and every field is checked for type, range
and count before a record is made of it. Anything off raises
:class:`CodecError` (or, found at a record's first use, makes it parsed again);
the bytes are then never used.

Layout: a header of UTF-8 JSON (RFC 8259, one line), a newline, then the
occurrences as little-endian 32-bit signed integers::

    [FORMAT, language, truncated, strings, names, definitions, imports, impls, count]
    \n
    7 * count integers

* ``strings``: every occurrence name, then every enclosing qualname that is not
  also a name, once each; the first ``names`` of them are the names;
* ``definitions``: ``[name, qualname, kind, [8 ints: range then name range],
  signature, doc|null, scope|null, [bases], symbol]``;
* ``imports``: ``[module, name|null, alias|null, line, enclosing|null]``;
* ``impls``: ``[type, trait, line]``;
* occurrences, seven integers each: name (an index into ``strings``), start
  line, start column, end line, end column, roles, enclosing (an index into
  ``strings``, or -1).

Integers are checked column by column in C (``min``/``max`` over array
slices), text fields by ``map`` over columns.

Two ways to encode, to the same bytes: :func:`encode` (a :class:`FileIndex`)
and :func:`encode_extracted` (the extractor's packed form, as index workers
do: the string table and the occurrence integers are already laid out).

Three ways to decode, with the same checks of every field they use:

* :func:`decode` checks every field at once;
* :func:`decode_lazily` (the engine, for a worker's bytes) checks at once what
  a view's merged tables need (the header, the string table, the counts, the
  definitions' names, qualnames, symbols and bases, the imports), and the
  definitions' other fields and the occurrence integers the first time a query
  asks for them (``_Row``);
* :func:`decode_stored` (the engine, for a stored row) checks the row's
  *outline* at once (:func:`encode_outline`: the same fields :func:`decode_lazily`
  checks at once, in a smaller form) and reads and checks the records only when
  a query first asks for their definitions or occurrences.

A part that fails its check at first use makes the record count as missing:
the file is parsed again (see :class:`~engine.semantic.records.FileIndex`).

The path and blob id are not in the bytes: they are the key the bytes are found
under, so a record can never name another path than the one it is looked up for.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable, Sequence
from itertools import chain, repeat
from typing import Any, NamedTuple

from engine.semantic.fileindex import FileIndex, Repair
from engine.semantic.languages import LANGUAGES
from engine.semantic.packed import Extracted
from engine.semantic.records import (
    MAX_DEFINITIONS,
    MAX_DOC_CHARS,
    MAX_IMPORTS,
    MAX_NAME_CHARS,
    MAX_OCCURRENCES,
    MAX_SIGNATURE_CHARS,
    Definition,
    Import,
    Occurrence,
    Outline,
    Range,
    Role,
    scip_symbol,
)

__all__ = [
    "FORMAT",
    "MAX_PAYLOAD_BYTES",
    "OUTLINE_FORMAT",
    "CodecError",
    "decode",
    "decode_lazily",
    "decode_stored",
    "encode",
    "encode_extracted",
    "encode_outline",
]

FORMAT = "chit-semantic-file/1"
MAX_PAYLOAD_BYTES = 16_000_000
"""Largest encoded record accepted (a 1 MB source file encodes well below this)."""
_MAX_INT = 2**31 - 1
_KINDS = frozenset(
    {
        "class",
        "function",
        "method",
        "variable",
        "constant",
        "interface",
        "struct",
        "enum",
        "trait",
        "type",
        "module",
        "field",
        "constructor",
        "macro",
    }
)
_ROLE_BITS = int(Role.DEFINITION | Role.IMPORT | Role.WRITE_ACCESS | Role.READ_ACCESS | Role.CALL)
_ROLES: dict[int, Role] = {}


if array("i").itemsize != 4:  # pragma: no cover - every platform CPython supports today
    raise ImportError("engine.semantic.codec needs 4-byte C ints")


class CodecError(ValueError):
    """Encoded records that are malformed, oversized or of another format."""


def encode(record: FileIndex) -> bytes:
    """Encode a file's records (the inverse of :func:`decode`).

    Args:
        record: Records as :func:`engine.semantic.extract.extract` made them.

    Returns:
        The header and the packed occurrences, without the record's path and blob id.
    """
    strings: dict[str, int] = {}
    occurrences = record.occurrences
    for occ in occurrences:
        if occ.name not in strings:
            strings[occ.name] = len(strings)
    names = len(strings)
    for occ in occurrences:
        if occ.enclosing is not None and occ.enclosing not in strings:
            strings[occ.enclosing] = len(strings)
    flat = array("i")
    for occ in occurrences:
        r = occ.range
        flat.extend(
            (
                strings[occ.name],
                r.start_line,
                r.start_col,
                r.end_line,
                r.end_col,
                int(occ.roles),
                -1 if occ.enclosing is None else strings[occ.enclosing],
            )
        )
    header = _header(
        record.language,
        record.truncated,
        list(strings),
        names,
        record.definitions,
        record.imports,
        record.impls,
        len(occurrences),
    )
    return header + b"\n" + _little_endian(flat)


def encode_extracted(found: Extracted) -> bytes:
    """Encode records in the extractor's packed form, as they are (what index workers send).

    The same bytes as :func:`encode` of the :class:`FileIndex` that
    :func:`engine.semantic.extract.extract` makes of them: the extractor lays
    out the string table and the occurrence integers as this format does.

    Args:
        found: What :func:`engine.semantic.extract.extract_packed` returned.

    Returns:
        The header and the packed occurrences, without the path and blob id.
    """
    ints = found.occurrences
    header = _header(
        found.language,
        found.truncated,
        found.strings,
        found.name_count,
        found.definitions,
        found.imports,
        found.impls,
        len(ints) // 7,
    )
    return header + b"\n" + _little_endian(ints)


def _little_endian(ints: array[int]) -> bytes:
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        ints = array("i", ints)
        ints.byteswap()
    return ints.tobytes()


def _header(
    language: str,
    truncated: bool,
    strings: list[str],
    names: int,
    definitions: tuple[Definition, ...],
    imports: tuple[Import, ...],
    impls: tuple[tuple[str, str, int], ...],
    count: int,
) -> bytes:
    rows = [
        [
            d.name,
            d.qualname,
            d.kind,
            [*d.range, *d.name_range],
            d.signature,
            d.doc,
            d.scope,
            list(d.bases),
            d.symbol,
        ]
        for d in definitions
    ]
    doc = [
        FORMAT,
        language,
        truncated,
        strings,
        names,
        rows,
        [list(i) for i in imports],
        [list(i) for i in impls],
        count,
    ]
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _fail(what: str) -> CodecError:
    return CodecError(f"malformed encoded records: {what}")


def _reject_constant(_name: str) -> Any:
    raise _fail("non-finite number")


def _text(value: object, limit: int = MAX_NAME_CHARS) -> str:
    if type(value) is not str or len(value) > limit:
        raise _fail("text field")
    return value


def _int(value: object) -> int:
    if type(value) is not int or not 0 <= value <= _MAX_INT:
        raise _fail("integer field")
    return value


def _list(value: object, limit: int) -> list[Any]:
    if type(value) is not list or len(value) > limit:
        raise _fail("list field")
    return value


def _texts(values: Sequence[Any], limit: int = MAX_NAME_CHARS, *, optional: bool = False) -> None:
    """Check a column of text fields in C (``map``), ``None`` allowed if ``optional``."""
    if not values:
        return
    allowed = {str, type(None)} if optional else {str}
    if not set(map(type, values)) <= allowed:
        raise _fail("text field")
    if max(map(len, filter(None, values) if optional else values), default=0) > limit:
        raise _fail("text field too long")


def _definitions(raw: list[Any], path: str, prefix: str) -> tuple[Definition, ...]:
    """Definitions from their rows, checked column by column (each check one pass in C)."""
    if not raw:
        return ()
    if set(map(type, raw)) != {list} or set(map(len, raw)) != {9}:
        raise _fail("definition")
    names, quals, kinds, spans, sigs, docs, scopes, bases, symbols = zip(*raw, strict=True)
    _texts(names)
    _texts(quals)
    _texts(sigs, MAX_SIGNATURE_CHARS)
    _texts(docs, MAX_DOC_CHARS, optional=True)
    _texts(scopes, optional=True)
    _texts(symbols, 2 * MAX_NAME_CHARS + len(prefix))
    if not set(kinds) <= _KINDS:
        raise _fail("definition kind")
    if set(map(type, spans)) != {list} or set(map(len, spans)) != {8}:
        raise _fail("definition ranges")
    numbers = list(chain.from_iterable(spans))
    if set(map(type, numbers)) != {int} or min(numbers) < 0 or max(numbers) > _MAX_INT:
        raise _fail("definition ranges")
    if set(map(type, bases)) != {list} or max(map(len, bases)) > 256:
        raise _fail("definition bases")
    _texts(tuple(chain.from_iterable(bases)))
    # Every symbol names this path: a row cannot define anything elsewhere.
    if not all(map(str.startswith, symbols, repeat(prefix))) or min(map(len, symbols)) <= len(
        prefix
    ):
        raise _fail("definition symbol")
    return tuple(
        Definition(
            symbol=symbol,
            name=name,
            qualname=qual,
            kind=kind,
            path=path,
            range=Range(*span[:4]),
            name_range=Range(*span[4:]),
            signature=sig,
            doc=doc,
            scope=scope,
            bases=tuple(base),
        )
        for name, qual, kind, span, sig, doc, scope, base, symbol in raw
    )


def _imports(raw: list[Any]) -> tuple[Import, ...]:
    """Imports from their rows, checked column by column (each check one pass in C)."""
    if not raw:
        return ()
    if set(map(type, raw)) != {list} or set(map(len, raw)) != {5}:
        raise _fail("import")
    columns = list(zip(*raw, strict=True))
    _import_columns(columns)
    return tuple(map(Import, *columns))


def _import_columns(columns: list[Any]) -> None:
    """Check imports given column by column: modules, names, aliases, lines, enclosing."""
    if len(columns) != 5 or len(set(map(len, columns))) > 1:
        raise _fail("import columns")
    modules, names, aliases, lines, enclosing = columns
    if not modules:
        return
    _texts(modules)
    _texts(names, optional=True)
    _texts(aliases, optional=True)
    _texts(enclosing, optional=True)
    if set(map(type, lines)) != {int} or min(lines) < 0 or max(lines) > _MAX_INT:
        raise _fail("import line")


def _role(value: int) -> Role:
    if value < 0:
        raise _fail("negative role")
    role = _ROLES.get(value)
    if role is None:
        if value & ~_ROLE_BITS:
            raise _fail("unknown role bits")
        role = _ROLES[value] = Role(value)
    return role


def _impls(raw: object) -> tuple[tuple[str, str, int], ...]:
    impls: list[tuple[str, str, int]] = []
    for item in _list(raw, MAX_DEFINITIONS):
        fields = _list(item, 3)
        if len(fields) != 3:
            raise _fail("impl")
        impls.append((_text(fields[0]), _text(fields[1]), _int(fields[2])))
    return tuple(impls)


def _symbols(symbols: Sequence[Any], prefix: str) -> None:
    """Check that every symbol is text naming the path (``prefix``) and something in it."""
    _texts(symbols, 2 * MAX_NAME_CHARS + len(prefix))
    if symbols and (
        not all(map(str.startswith, symbols, repeat(prefix)))
        or min(map(len, symbols)) <= len(prefix)
    ):
        raise _fail("definition symbol")


def _outline_of_rows(raw: list[Any], prefix: str) -> Outline:
    """The outline of the definitions' rows of a record's header, checked in C.

    The same checks :func:`_definitions` makes of these columns (names,
    qualnames, symbols naming the path, bases), and of the rows' shape.
    """
    if not raw:
        return Outline()
    if set(map(type, raw)) != {list} or set(map(len, raw)) != {9}:
        raise _fail("definition")
    names, quals, _kinds, _spans, _sigs, _docs, _scopes, bases, symbols = zip(*raw, strict=True)
    _texts(names)
    _texts(quals)
    _symbols(symbols, prefix)
    if set(map(type, bases)) != {list} or max(map(len, bases)) > 256:
        raise _fail("definition bases")
    every_base = tuple(chain.from_iterable(bases))
    _texts(every_base)
    return Outline(names, quals, symbols, tuple(dict.fromkeys(every_base)))


class _Head(NamedTuple):
    """A record's header, its common fields checked."""

    doc: list[Any]
    strings: list[str]
    names: int  # how many of ``strings`` are names
    occurrences: int
    at: int  # where the header's newline is


def _head(untrusted: bytes, language: str) -> _Head:
    """Parse and check the header of encoded records: size, format, counts, string table."""
    if len(untrusted) > MAX_PAYLOAD_BYTES:
        raise _fail("too large")
    at = untrusted.find(b"\n")
    if at < 0:
        raise _fail("no header")
    try:
        doc = json.loads(untrusted[:at].decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _fail("not JSON") from None
    if type(doc) is not list or len(doc) != 9 or doc[0] != FORMAT:
        raise _fail("format")
    _, lang, truncated, strings, name_count, _defs, _imps, _impls, count = doc
    if lang != language or lang not in LANGUAGES or type(truncated) is not bool:
        raise _fail("header")
    names = _list(strings, 2 * MAX_OCCURRENCES + MAX_DEFINITIONS)
    if names and (set(map(type, names)) != {str} or max(map(len, names)) > MAX_NAME_CHARS):
        raise _fail("string table")
    if _int(name_count) > len(names) or _int(count) > MAX_OCCURRENCES:
        raise _fail("counts")
    if len(untrusted) - at - 1 != 28 * count:
        raise _fail("occurrence bytes")
    return _Head(doc, names, name_count, count, at)


class _Row:
    """The parts of encoded records checked and made only when first asked for.

    Implements :class:`~engine.semantic.records.Parts`. Holds the bytes, or a
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
        self._strings: _Head | None = None  # a checked header, for the occurrences
        self._raw_definitions: list[Any] | None = None  # unchecked, for the definitions

    def _bytes(self) -> bytes:
        found = self._untrusted
        if found is None:
            fetch = self._fetch
            found = fetch() if fetch is not None else None
            if found is None:
                raise _fail("no records")
            self._untrusted = found
        return found

    def _parse(self) -> _Head:
        """The header, checked; what the other part needs of it is kept."""
        head = _head(self._bytes(), self._language)
        self._strings = head._replace(doc=[])
        self._raw_definitions = head.doc[5]
        return head

    def definitions(self) -> tuple[Definition, ...]:
        """Every definition, each field checked."""
        raw = self._raw_definitions
        if raw is None:
            raw = self._parse().doc[5]
        made = _definitions(_list(raw, MAX_DEFINITIONS), self._path, self._prefix)
        self._raw_definitions = None  # kept only until made (another call parses again)
        return made

    def imports(self) -> tuple[Import, ...]:
        """Every import, each field checked."""
        columns = self._imports
        if columns is not None:
            return tuple(map(Import, *columns)) if columns[0] else ()
        return _imports(_list(self._parse().doc[6], MAX_IMPORTS))

    def _columns(self) -> tuple[_Head, list[array[int]], dict[int, Role]]:
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
            raise _fail("occurrence name")
        if min(min(columns[k]) for k in range(1, 5)) < 0:
            raise _fail("occurrence range")
        if min(columns[6]) < -1 or max(columns[6]) >= len(head.strings):
            raise _fail("occurrence enclosing")
        return head, columns, {value: _role(value) for value in set(columns[5])}

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


def decode_lazily(
    payload: bytes, path: str, blob: str, language: str, repair: Repair | None = None
) -> FileIndex:
    """Open encoded records: check now what a view's tables need, the rest on first use.

    Checked now, as :func:`decode` checks them: the size, the header's format,
    language, flags and counts, the string table (every name the occurrences
    spell), the definitions' names, qualnames, symbols (each naming ``path``)
    and bases, the imports and the ``impls``. Checked the first time each is
    asked for: the definitions' other fields and the occurrence integers; if
    one fails then, ``repair`` gives the file's records instead (see
    :meth:`~engine.semantic.records.FileIndex.from_parts`).

    Args:
        payload: Bytes made by :func:`encode`, or anything else (untrusted).
        path: The repository path they were looked up for; every record gets it.
        blob: The blob id (hex) they were looked up for.
        language: The path's language (``engine.semantic.languages.language_for``).
        repair: Parses the file again, for a part that fails its later check.

    Returns:
        The file's :class:`FileIndex`.

    Raises:
        CodecError: If what is checked now fails (as for :func:`decode`).
    """
    head = _head(payload, language)
    prefix = scip_symbol(path, "", ())
    return FileIndex.from_parts(
        path,
        blob,
        language,
        _Row(payload, path, prefix, language),
        outline=_outline_of_rows(_list(head.doc[5], MAX_DEFINITIONS), prefix),
        names=frozenset(head.strings[: head.names]),
        occurrence_count=head.occurrences,
        impls=_impls(head.doc[7]),
        truncated=head.doc[2],
        repair=repair,
        imports=_imports(_list(head.doc[6], MAX_IMPORTS)),
    )


def decode(payload: bytes, path: str, blob: str, language: str) -> FileIndex:
    """Decode records found under ``(path, blob)``, checking everything now (untrusted input).

    The occurrence tuples are still made on first use (their integers are checked now).

    Args:
        payload: Bytes made by :func:`encode`, or anything else.
        path: The repository path they were looked up for; every record gets it.
        blob: The blob id (hex) they were looked up for.
        language: The path's language (``engine.semantic.languages.language_for``).

    Returns:
        The file's :class:`FileIndex`.

    Raises:
        CodecError: For bytes over :data:`MAX_PAYLOAD_BYTES`, invalid UTF-8 or
            JSON, another format or language, a field of the wrong type or out of
            range, occurrence bytes that do not match the header's count, more
            records than the extractor's bounds allow, or a definition whose
            symbol names another path.
    """
    opened = decode_lazily(payload, path, blob, language)
    row = _Row(payload, path, scip_symbol(path, "", ()), language)
    definitions, imports = row.definitions(), row.imports()
    row.check_occurrences()
    return FileIndex.from_parts(
        path,
        blob,
        language,
        row,
        outline=opened.outline,
        names=opened.names,
        occurrence_count=opened.occurrence_count,
        impls=opened.impls,
        truncated=opened.truncated,
        definitions=definitions,
        imports=imports,
    )


# --- the outline: what a view's tables need of a file, stored beside its records ---

OUTLINE_FORMAT = "chit-semantic-outline/1"


def encode_outline(record: FileIndex) -> bytes:
    """The outline of a file's records, stored beside them (engine/semantic/persist.py).

    What a view's tables need, so a warm start reads this instead of the
    records' header: UTF-8 JSON, one line::

        [OUTLINE_FORMAT, language, truncated, names, definition names,
         definition qualnames, definition symbols, bases, impls, count,
         [import modules, names, aliases, lines, enclosing]]

    ``names`` are the names the occurrences spell, ``bases`` every base the
    definitions name (once each), ``count`` the number of occurrences; the
    imports are given column by column.

    Args:
        record: Records of one file (made by the extractor or decoded).

    Returns:
        The bytes :func:`decode_stored` reads beside the records' bytes.
    """
    outline = record.outline
    doc = [
        OUTLINE_FORMAT,
        record.language,
        record.truncated,
        list(record.names),
        list(outline.names),
        list(outline.qualnames),
        list(outline.symbols),
        list(outline.bases),
        [list(i) for i in record.impls],
        record.occurrence_count,
        [list(column) for column in zip(*record.imports, strict=True)] or [[]] * 5,
    ]
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def decode_stored(
    outline: bytes,
    fetch: Callable[[], bytes | None],
    path: str,
    blob: str,
    language: str,
    repair: Repair | None = None,
) -> FileIndex:
    """Open stored records from their outline; the records are read and checked on first use.

    The outline (untrusted) is checked now, every field, as :func:`decode`
    checks the same fields (types, lengths, counts within the extractor's
    bounds, every symbol naming ``path``); imports come from it. The records
    are not read now: the first time a part (definitions, occurrences) is asked for,
    ``fetch`` reads them and that part is checked; if they are missing or the
    part fails then, ``repair`` gives the file's records instead (see
    :meth:`~engine.semantic.records.FileIndex.from_parts`).

    Args:
        outline: Bytes made by :func:`encode_outline`, or anything else.
        fetch: Returns the bytes :func:`encode` made of the same records (or
            anything else), ``None`` if there are none.
        path: The repository path they were looked up for; every record gets it.
        blob: The blob id (hex) they were looked up for.
        language: The path's language.
        repair: Parses the file again, for a part that fails its later check.

    Returns:
        The file's :class:`FileIndex`.

    Raises:
        CodecError: If the outline is malformed, over its bounds, of another
            format or language, or names a symbol outside ``path``.
    """
    if len(outline) > MAX_PAYLOAD_BYTES:
        raise _fail("too large")
    try:
        doc = json.loads(outline.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _fail("not JSON") from None
    if type(doc) is not list or len(doc) != 11 or doc[0] != OUTLINE_FORMAT:
        raise _fail("outline format")
    _, lang, truncated, raw_names, raw_defs, raw_quals, raw_symbols, raw_bases, impls, count = doc[
        :10
    ]
    if lang != language or lang not in LANGUAGES or type(truncated) is not bool:
        raise _fail("outline header")
    names = _list(raw_names, MAX_OCCURRENCES)
    defs = _list(raw_defs, MAX_DEFINITIONS)
    quals = _list(raw_quals, MAX_DEFINITIONS)
    symbols = _list(raw_symbols, MAX_DEFINITIONS)
    bases = _list(raw_bases, 256 * MAX_DEFINITIONS)
    if not len(defs) == len(quals) == len(symbols):
        raise _fail("outline columns")
    for column in (names, defs, quals, bases):
        _texts(column)
    prefix = scip_symbol(path, "", ())
    _symbols(symbols, prefix)
    if _int(count) > MAX_OCCURRENCES:
        raise _fail("counts")
    imports = [_list(column, MAX_IMPORTS) for column in _list(doc[10], 5)]
    _import_columns(imports)
    return FileIndex.from_parts(
        path,
        blob,
        language,
        _Row(None, path, prefix, language, fetch, imports),
        outline=Outline(tuple(defs), tuple(quals), tuple(symbols), tuple(bases)),
        names=frozenset(names),
        occurrence_count=count,
        impls=_impls(impls),
        truncated=truncated,
        repair=repair,
    )
