"""The checks of encoded records: every field's type, range and count (untrusted input).

What the decoders read may be written by anyone who can write the git
directory: it is parsed with the standard library's ``json``, bounded in size,
and every field is checked before a record is made of it; anything off raises
:class:`CodecError`. Integers are checked column by column in C (``min`` and
``max`` over array slices), text fields by ``map`` over columns. The layout:
docs/semantic.md, "The records' byte form".
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from itertools import chain, repeat
from typing import Any, NamedTuple

from engine.limits import LIMITS
from engine.semantic.languages import LANGUAGES
from engine.semantic.records import (
    Definition,
    Import,
    Outline,
    Range,
    Role,
)

__all__ = [
    "FORMAT",
    "CodecError",
    "Head",
    "check_import_columns",
    "check_int",
    "check_list",
    "check_symbols",
    "check_text",
    "check_texts",
    "definitions_from",
    "fail",
    "impls_from",
    "imports_from",
    "outline_of_rows",
    "read_head",
    "reject_constant",
    "role_from",
]

FORMAT = "chit-semantic-file/1"
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


def fail(what: str) -> CodecError:
    """The error for encoded records found malformed (``what`` says which part)."""
    return CodecError(f"malformed encoded records: {what}")


def reject_constant(_name: str) -> Any:
    """Refuse ``NaN`` and the infinities, which RFC 8259 JSON has not (``json.loads`` hook)."""
    raise fail("non-finite number")


def check_text(value: object, limit: int = LIMITS.name_chars) -> str:
    """``value`` if it is text of at most ``limit`` characters."""
    if type(value) is not str or len(value) > limit:
        raise fail("text field")
    return value


def check_int(value: object) -> int:
    """``value`` if it is an integer from 0 to 2**31 - 1."""
    if type(value) is not int or not 0 <= value <= _MAX_INT:
        raise fail("integer field")
    return value


def check_list(value: object, limit: int) -> list[Any]:
    """``value`` if it is a list of at most ``limit`` items (not checked here)."""
    if type(value) is not list or len(value) > limit:
        raise fail("list field")
    return value


def check_texts(
    values: Sequence[Any], limit: int = LIMITS.name_chars, *, optional: bool = False
) -> None:
    """Check a column of text fields in C (``map``), ``None`` allowed if ``optional``."""
    if not values:
        return
    allowed = {str, type(None)} if optional else {str}
    if not set(map(type, values)) <= allowed:
        raise fail("text field")
    if max(map(len, filter(None, values) if optional else values), default=0) > limit:
        raise fail("text field too long")


def definitions_from(raw: list[Any], path: str, prefix: str) -> tuple[Definition, ...]:
    """Definitions from their rows, checked column by column (each check one pass in C)."""
    if not raw:
        return ()
    if set(map(type, raw)) != {list} or set(map(len, raw)) != {9}:
        raise fail("definition")
    names, quals, kinds, spans, sigs, docs, scopes, bases, symbols = zip(*raw, strict=True)
    check_texts(names)
    check_texts(quals)
    check_texts(sigs, LIMITS.signature_chars)
    check_texts(docs, LIMITS.doc_chars, optional=True)
    check_texts(scopes, optional=True)
    check_texts(symbols, 2 * LIMITS.name_chars + len(prefix))
    if not set(kinds) <= _KINDS:
        raise fail("definition kind")
    if set(map(type, spans)) != {list} or set(map(len, spans)) != {8}:
        raise fail("definition ranges")
    numbers = list(chain.from_iterable(spans))
    if set(map(type, numbers)) != {int} or min(numbers) < 0 or max(numbers) > _MAX_INT:
        raise fail("definition ranges")
    if set(map(type, bases)) != {list} or max(map(len, bases)) > LIMITS.bases_per_definition:
        raise fail("definition bases")
    check_texts(tuple(chain.from_iterable(bases)))
    # Every symbol names this path: a row cannot define anything elsewhere.
    if not all(map(str.startswith, symbols, repeat(prefix))) or min(map(len, symbols)) <= len(
        prefix
    ):
        raise fail("definition symbol")
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


def imports_from(raw: list[Any]) -> tuple[Import, ...]:
    """Imports from their rows, checked column by column (each check one pass in C)."""
    if not raw:
        return ()
    if set(map(type, raw)) != {list} or set(map(len, raw)) != {5}:
        raise fail("import")
    columns = list(zip(*raw, strict=True))
    check_import_columns(columns)
    return tuple(map(Import, *columns))


def check_import_columns(columns: list[Any]) -> None:
    """Check imports given column by column: modules, names, aliases, lines, enclosing."""
    if len(columns) != 5 or len(set(map(len, columns))) > 1:
        raise fail("import columns")
    modules, names, aliases, lines, enclosing = columns
    if not modules:
        return
    check_texts(modules)
    check_texts(names, optional=True)
    check_texts(aliases, optional=True)
    check_texts(enclosing, optional=True)
    if set(map(type, lines)) != {int} or min(lines) < 0 or max(lines) > _MAX_INT:
        raise fail("import line")


def role_from(value: int) -> Role:
    """The :class:`Role` of an occurrence's roles integer, if it sets only known bits."""
    if value < 0:
        raise fail("negative role")
    role = _ROLES.get(value)
    if role is None:
        if value & ~_ROLE_BITS:
            raise fail("unknown role bits")
        role = _ROLES[value] = Role(value)
    return role


def impls_from(raw: object) -> tuple[tuple[str, str, int], ...]:
    """Rust ``impl`` rows (``[type, trait, line]``), checked."""
    impls: list[tuple[str, str, int]] = []
    for item in check_list(raw, LIMITS.definitions_per_file):
        fields = check_list(item, 3)
        if len(fields) != 3:
            raise fail("impl")
        impls.append((check_text(fields[0]), check_text(fields[1]), check_int(fields[2])))
    return tuple(impls)


def check_symbols(symbols: Sequence[Any], prefix: str) -> None:
    """Check that every symbol is text naming the path (``prefix``) and something in it."""
    check_texts(symbols, 2 * LIMITS.name_chars + len(prefix))
    if symbols and (
        not all(map(str.startswith, symbols, repeat(prefix)))
        or min(map(len, symbols)) <= len(prefix)
    ):
        raise fail("definition symbol")


def outline_of_rows(raw: list[Any], prefix: str) -> Outline:
    """The outline of the definitions' rows of a record's header, checked in C.

    The same checks :func:`definitions_from` makes of these columns (names,
    qualnames, symbols naming the path, bases), and of the rows' shape.
    """
    if not raw:
        return Outline()
    if set(map(type, raw)) != {list} or set(map(len, raw)) != {9}:
        raise fail("definition")
    names, quals, _kinds, _spans, _sigs, _docs, _scopes, bases, symbols = zip(*raw, strict=True)
    check_texts(names)
    check_texts(quals)
    check_symbols(symbols, prefix)
    if set(map(type, bases)) != {list} or max(map(len, bases)) > LIMITS.bases_per_definition:
        raise fail("definition bases")
    every_base = tuple(chain.from_iterable(bases))
    check_texts(every_base)
    return Outline(names, quals, symbols, tuple(dict.fromkeys(every_base)))


class Head(NamedTuple):
    """A record's header, its common fields checked."""

    doc: list[Any]
    strings: list[str]
    names: int  # how many of ``strings`` are names
    occurrences: int
    at: int  # where the header's newline is


def read_head(untrusted: bytes, language: str) -> Head:
    """Parse and check the header of encoded records: size, format, counts, string table."""
    if len(untrusted) > LIMITS.semantic_payload_bytes:
        raise fail("too large")
    at = untrusted.find(b"\n")
    if at < 0:
        raise fail("no header")
    try:
        doc = json.loads(untrusted[:at].decode("utf-8"), parse_constant=reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise fail("not JSON") from None
    if type(doc) is not list or len(doc) != 9 or doc[0] != FORMAT:
        raise fail("format")
    _, lang, truncated, strings, name_count, _defs, _imps, _impls, count = doc
    if lang != language or lang not in LANGUAGES or type(truncated) is not bool:
        raise fail("header")
    names = check_list(strings, 2 * LIMITS.occurrences_per_file + LIMITS.definitions_per_file)
    if names and (set(map(type, names)) != {str} or max(map(len, names)) > LIMITS.name_chars):
        raise fail("string table")
    if check_int(name_count) > len(names) or check_int(count) > LIMITS.occurrences_per_file:
        raise fail("counts")
    if len(untrusted) - at - 1 != 28 * count:
        raise fail("occurrence bytes")
    return Head(doc, names, name_count, count, at)

