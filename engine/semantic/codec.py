r"""The byte form of one file's records: how they cross processes and sit on disk.

Index workers (``engine/semantic/pool.py``) hand records to the engine in this
form, and the persisted index (``engine/semantic/persist.py``) stores it. What
:func:`decode` reads is untrusted input (a file anyone who can write the git
directory can change): it is parsed with the standard library's ``json``,
bounded in size, and every field is checked for type, range and count before a
record is made. Anything off raises :class:`CodecError`; the caller then parses
the file again and never uses the bytes.

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

Every integer is checked when the bytes are decoded, column by column in C
(``min``/``max`` over array slices); the :class:`Occurrence` tuples themselves
are made only when a query first asks for that file's occurrences
(:class:`~engine.semantic.records.PackedOccurrences`).

The path and blob id are not in the bytes: they are the key the bytes are found
under, so a record can never name another path than the one it is looked up for.
"""

from __future__ import annotations

import json
import sys
from array import array
from itertools import chain, repeat
from typing import Any

from engine.semantic.extract import (
    MAX_DEFINITIONS,
    MAX_DOC_CHARS,
    MAX_IMPORTS,
    MAX_NAME_CHARS,
    MAX_OCCURRENCES,
    MAX_SIGNATURE_CHARS,
    Extracted,
)
from engine.semantic.languages import LANGUAGES
from engine.semantic.records import (
    Definition,
    FileIndex,
    Import,
    PackedOccurrences,
    Range,
    Role,
    scip_symbol,
)

__all__ = ["FORMAT", "MAX_PAYLOAD_BYTES", "CodecError", "decode", "encode", "encode_extracted"]

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


def _texts(values: tuple[Any, ...], limit: int = MAX_NAME_CHARS, *, optional: bool = False) -> None:
    """Check a column of text fields in C (``map``), ``None`` allowed if ``optional``."""
    allowed = {str, type(None)} if optional else {str}
    if not set(map(type, values)) <= allowed:
        raise _fail("text field")
    if max(map(len, filter(None, values)), default=0) > limit:
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
    modules, names, aliases, lines, enclosing = zip(*raw, strict=True)
    _texts(modules)
    _texts(names, optional=True)
    _texts(aliases, optional=True)
    _texts(enclosing, optional=True)
    if set(map(type, lines)) != {int} or min(lines) < 0 or max(lines) > _MAX_INT:
        raise _fail("import line")
    return tuple(map(Import, modules, names, aliases, lines, enclosing))


def _role(value: int) -> Role:
    if value < 0:
        raise _fail("negative role")
    role = _ROLES.get(value)
    if role is None:
        if value & ~_ROLE_BITS:
            raise _fail("unknown role bits")
        role = _ROLES[value] = Role(value)
    return role


def decode(payload: bytes, path: str, blob: str, language: str) -> FileIndex:
    """Decode records found under ``(path, blob)``, checking everything (untrusted input).

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
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise _fail("too large")
    head, newline, packed = payload.partition(b"\n")
    if not newline:
        raise _fail("no header")
    try:
        doc = json.loads(head.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _fail("not JSON") from None
    if type(doc) is not list or len(doc) != 9 or doc[0] != FORMAT:
        raise _fail("format")
    _, lang, truncated, strings, name_count, raw_defs, raw_imps, raw_impls, count = doc
    if lang != language or lang not in LANGUAGES or type(truncated) is not bool:
        raise _fail("header")
    names = _list(strings, 2 * MAX_OCCURRENCES + MAX_DEFINITIONS)
    if names and (set(map(type, names)) != {str} or max(map(len, names)) > MAX_NAME_CHARS):
        raise _fail("string table")
    if _int(name_count) > len(names) or _int(count) > MAX_OCCURRENCES:
        raise _fail("counts")
    if len(packed) != 28 * count:
        raise _fail("occurrence bytes")
    prefix = scip_symbol(path, "", ())
    definitions = _definitions(_list(raw_defs, MAX_DEFINITIONS), path, prefix)
    flat = array("i")
    flat.frombytes(packed)
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        flat.byteswap()
    roles: dict[int, Role] = {}
    if count:
        # Checked column by column, each in one pass in C.
        columns = [flat[k::7] for k in range(7)]
        if min(columns[0]) < 0 or max(columns[0]) >= name_count:
            raise _fail("occurrence name")
        if min(min(columns[k]) for k in range(1, 5)) < 0:
            raise _fail("occurrence range")
        if min(columns[6]) < -1 or max(columns[6]) >= len(names):
            raise _fail("occurrence enclosing")
        roles = {value: _role(value) for value in set(columns[5])}
    occurrences = PackedOccurrences(names, flat, roles)
    imports = _imports(_list(raw_imps, MAX_IMPORTS))
    impls: list[tuple[str, str, int]] = []
    for item in _list(raw_impls, MAX_DEFINITIONS):
        fields = _list(item, 3)
        if len(fields) != 3:
            raise _fail("impl")
        impls.append((_text(fields[0]), _text(fields[1]), _int(fields[2])))
    return FileIndex(
        path,
        blob,
        language,
        definitions,
        occurrences,
        imports,
        tuple(impls),
        truncated,
        names=frozenset(names[:name_count]),
    )
