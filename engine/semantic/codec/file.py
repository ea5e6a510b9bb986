"""The byte form of one file's records: encoding, and decoding at once or lazily.

Index workers hand records to the engine in this form and the persisted index
stores it (docs/semantic.md, "The records' byte form"). The path and blob id
are not in the bytes: they are the key the bytes are found under, so a record
can never name another path than the one it is looked up for.
"""

from __future__ import annotations

import json
import sys
from array import array

from engine.limits import LIMITS
from engine.semantic.codec._checks import (
    FORMAT,
    check_list,
    impls_from,
    imports_from,
    outline_of_rows,
    read_head,
)
from engine.semantic.codec._row import Row
from engine.semantic.fileindex import FileIndex, Repair
from engine.semantic.packed import Extracted
from engine.semantic.records import Definition, Import, scip_symbol

__all__ = ["decode", "decode_lazily", "encode", "encode_extracted"]


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
    :meth:`~engine.semantic.fileindex.FileIndex.from_parts`).

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
    head = read_head(payload, language)
    prefix = scip_symbol(path, "", ())
    return FileIndex.from_parts(
        path,
        blob,
        language,
        Row(payload, path, prefix, language),
        outline=outline_of_rows(check_list(head.doc[5], LIMITS.definitions_per_file), prefix),
        names=frozenset(head.strings[: head.names]),
        occurrence_count=head.occurrences,
        impls=impls_from(head.doc[7]),
        truncated=head.doc[2],
        repair=repair,
        imports=imports_from(check_list(head.doc[6], LIMITS.imports_per_file)),
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
        CodecError: For bytes over ``LIMITS.semantic_payload_bytes``,
            invalid UTF-8 or JSON, another format or language, a field of the
            wrong type or out of range, occurrence bytes that do not match the
            header's count, more records than the extractor's bounds allow, or
            a definition whose symbol names another path.
    """
    opened = decode_lazily(payload, path, blob, language)
    row = Row(payload, path, scip_symbol(path, "", ()), language)
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

