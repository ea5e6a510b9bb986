"""The outline of a file's records: what a view's tables need, stored beside them.

A warm start reads outlines, not records (docs/semantic.md, "The records' byte
form"); :func:`decode_stored` opens a stored row from its outline and reads
the records only when a query first needs them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from engine.limits import LIMITS
from engine.semantic.codec._checks import (
    check_import_columns,
    check_int,
    check_list,
    check_symbols,
    check_texts,
    fail,
    impls_from,
    reject_constant,
)
from engine.semantic.codec._row import Row
from engine.semantic.fileindex import FileIndex, Repair
from engine.semantic.languages import LANGUAGES
from engine.semantic.records import (
    Outline,
    scip_symbol,
)

__all__ = ["OUTLINE_FORMAT", "decode_stored", "encode_outline"]

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
    :meth:`~engine.semantic.fileindex.FileIndex.from_parts`).

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
    if len(outline) > LIMITS.semantic_payload_bytes:
        raise fail("too large")
    try:
        doc = json.loads(outline.decode("utf-8"), parse_constant=reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise fail("not JSON") from None
    if type(doc) is not list or len(doc) != 11 or doc[0] != OUTLINE_FORMAT:
        raise fail("outline format")
    _, lang, truncated, raw_names, raw_defs, raw_quals, raw_symbols, raw_bases, impls, count = doc[
        :10
    ]
    if lang != language or lang not in LANGUAGES or type(truncated) is not bool:
        raise fail("outline header")
    names = check_list(raw_names, LIMITS.occurrences_per_file)
    defs = check_list(raw_defs, LIMITS.definitions_per_file)
    quals = check_list(raw_quals, LIMITS.definitions_per_file)
    symbols = check_list(raw_symbols, LIMITS.definitions_per_file)
    bases = check_list(raw_bases, LIMITS.bases_per_definition * LIMITS.definitions_per_file)
    if not len(defs) == len(quals) == len(symbols):
        raise fail("outline columns")
    for column in (names, defs, quals, bases):
        check_texts(column)
    prefix = scip_symbol(path, "", ())
    check_symbols(symbols, prefix)
    if check_int(count) > LIMITS.occurrences_per_file:
        raise fail("counts")
    imports = [check_list(column, LIMITS.imports_per_file) for column in check_list(doc[10], 5)]
    check_import_columns(imports)
    return FileIndex.from_parts(
        path,
        blob,
        language,
        Row(None, path, prefix, language, fetch, imports),
        outline=Outline(tuple(defs), tuple(quals), tuple(symbols), tuple(bases)),
        names=frozenset(names),
        occurrence_count=count,
        impls=impls_from(impls),
        truncated=truncated,
        repair=repair,
    )
