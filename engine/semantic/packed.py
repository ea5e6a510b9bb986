"""The packed form of one file's records, and packing a walk's identifiers into it.

:class:`Extracted` lays the occurrences out as the codec's byte form does, so
index workers encode it as is (engine/semantic/codec/). :func:`pack` turns the
identifiers the extractor's query captured into those integers, column by
column (docs/semantic.md, "Building and reuse").
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from functools import partial
from itertools import compress, repeat
from operator import add, attrgetter, eq, itemgetter
from typing import NamedTuple

from tree_sitter import Node

from engine.limits import LIMITS
from engine.semantic.records import Definition, Import, Role
from engine.semantic.walk import Walk

__all__ = ["Extracted", "pack"]


class Extracted(NamedTuple):
    """One file's records with the occurrences packed, as the codec lays them out.

    What :func:`~engine.semantic.extract.extract_packed` returns: the codec
    (:func:`~engine.semantic.codec.encode_extracted`) writes it as is, and
    :func:`~engine.semantic.extract.extract` makes a
    :class:`~engine.semantic.fileindex.FileIndex` of it.

    Attributes:
        language: The language name.
        definitions: In source order.
        strings: Every occurrence name (first use first), then every enclosing
            qualname that is not also a name (first use first).
        name_count: How many of ``strings`` are names.
        occurrences: Seven integers per occurrence, in source order: name (an
            index into ``strings``), start line, start column, end line, end
            column (zero-based, byte columns), roles, enclosing (an index into
            ``strings``, or -1 at file level).
        imports: In source order.
        impls: ``(type, trait, line)`` for Rust ``impl Trait for Type``.
        truncated: True if a bound cut something.
    """

    language: str
    definitions: tuple[Definition, ...]
    strings: list[str]
    name_count: int
    occurrences: array[int]
    imports: tuple[Import, ...]
    impls: tuple[tuple[str, str, int], ...]
    truncated: bool


_READ = int(Role.READ_ACCESS)
_CALLED = int(Role.READ_ACCESS | Role.CALL)
_START = attrgetter("start_byte")
_STOP = attrgetter("end_byte")
_START_POINT = attrgetter("start_point")
_END_POINT = attrgetter("end_point")
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)


def pack(walk: Walk, language: str, idents: list[Node]) -> Extracted:
    """The records of a walk, its identifiers packed as occurrences, in source order.

    Every identifier that is a reference or a call becomes one occurrence,
    with the innermost scope around it by byte range; left out are
    definitions' names, zero-width tokens and whatever lies in an import.
    Names over ``LIMITS.name_chars`` and occurrences
    past ``LIMITS.occurrences_per_file`` are left out and the
    result says ``truncated``.

    Args:
        walk: The walk of the file, its rules applied and callees found.
        language: The file's language.
        idents: The identifier nodes the query captured, in any order (sorted here).

    Returns:
        The file's :class:`Extracted` records.
    """
    data = walk.data
    idents.sort(key=_START)
    if walk.odd_callees:  # callees of another node type, as identifiers
        idents = sorted(idents + walk.odd_callees, key=_START)
    starts = list(map(_START, idents))
    ends = list(map(_STOP, idents))
    count = len(starts)
    # Left out: definitions' names (unless a call calls them too: error recovery
    # can make one node both), zero-width tokens, whatever lies in an import.
    keep = bytearray(b"\x01") * count
    for start in walk.defined - walk.calls:
        at = bisect_left(starts, start)
        if at < count and starts[at] == start:
            keep[at] = 0
    for start, end in walk.opaque:
        low, high = bisect_left(starts, start), bisect_left(starts, end)
        keep[low:high] = bytes(high - low)
    for at in compress(range(count), map(eq, starts, ends)):
        keep[at] = 0
    truncated = walk.truncated
    if keep.count(1) > LIMITS.occurrences_per_file:
        keep = keep[: [at for at, kept in enumerate(keep) if kept][LIMITS.occurrences_per_file]]
        truncated = True
    if keep.count(0) or len(keep) < count:
        idents = list(compress(idents, keep))
        starts = list(compress(starts, keep))
        ends = list(compress(ends, keep))
    scope_at = walk.scope_at
    scopes = list(map(scope_at.__getitem__, map(partial(bisect_right, walk.bounds), starts)))
    keys = list(map(data.__getitem__, map(slice, starts, ends)))
    table = dict.fromkeys(keys)  # name bytes, first use first
    if max(map(len, table), default=0) > LIMITS.name_chars:  # too long to record
        long = {k for k in table if len(k.decode("utf-8", "replace")) > LIMITS.name_chars}
        if long:
            short = bytes(map(long.__contains__, keys)).translate(_NOT)
            idents, starts, ends, scopes, keys = (
                list(compress(column, short)) for column in (idents, starts, ends, scopes, keys)
            )
            table = dict.fromkeys(keys)
            truncated = True
    strings = [key.decode("utf-8", "replace") for key in table]
    index = dict(zip(strings, range(len(strings)), strict=True))
    if len(index) == len(strings):
        ids = list(map(dict(zip(table, range(len(table)), strict=True)).__getitem__, keys))
    else:  # distinct bytes decoding alike (invalid UTF-8): one string, first use first
        index = {}
        for text in strings:
            index.setdefault(text, len(index))
        strings = list(index)
        ids = [index[key.decode("utf-8", "replace")] for key in keys]
    name_count = len(strings)
    # Enclosing qualnames join the table in the order occurrences first use them.
    qualnames = list(walk.scopes)
    remap = [0] * len(qualnames)
    for scope in dict.fromkeys(scopes):
        if scope >= 0:
            text = qualnames[scope]
            found = index.get(text)
            if found is None:
                found = index[text] = len(strings)
                strings.append(text)
            remap[scope] = found
    remap.append(-1)  # scope -1 (file level) reads the last entry: -1
    points = list(map(_START_POINT, idents))
    rows = array("i", map(_FIRST, points))
    columns = array("i", map(_SECOND, points))
    ints = array("i", bytes(28 * len(keys)))
    ints[0::7] = array("i", ids)
    ints[1::7] = rows
    ints[2::7] = columns
    if any(map(bytes.__contains__, table, repeat(b"\n"))):  # a name spanning lines
        points = list(map(_END_POINT, idents))
        ints[3::7] = array("i", map(_FIRST, points))
        ints[4::7] = array("i", map(_SECOND, points))
    else:
        ints[3::7] = rows
        ints[4::7] = array("i", map(add, columns, map(len, keys)))
    roles = array("i", _READS) * len(keys)
    for start in walk.calls:
        at = bisect_left(starts, start)
        if at < len(starts) and starts[at] == start:
            roles[at] = _CALLED
    ints[5::7] = roles
    ints[6::7] = array("i", map(remap.__getitem__, scopes))
    return Extracted(
        language,
        tuple(walk.definitions),
        strings,
        name_count,
        ints,
        tuple(walk.imports),
        tuple(walk.impls),
        truncated,
    )


_READS = (_READ,)
_NOT = bytes.maketrans(b"\x00\x01", b"\x01\x00")
