"""The records' byte form (engine/semantic/codec/): untrusted bytes.

Threat: bytes anyone who can write the git directory could have written (a
persisted row) or that a worker sent are decoded into records an agent is
shown: anything malformed, oversized or naming another path must raise
``CodecError``, never make records.
"""

from __future__ import annotations

import json
from array import array
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.limits import LIMITS
from engine.semantic.codec import CodecError, decode, encode
from engine.semantic.extract import extract
from engine.semantic.languages import language_for
from tests.engine.semantic.test_persist import CODE

_SOURCE = CODE["src/app.py"] + b"import os\n"
_SAMPLE = extract("src/app.py", "b" * 40, _SOURCE, "python")
_ENCODED = encode(_SAMPLE)


def test_codec_round_trip_for_every_language() -> None:
    from tests.engine.semantic.test_languages import FIXTURES

    for path, data in FIXTURES.items():
        language = language_for(path)
        assert language is not None
        record = extract(path, "c" * 40, data, language)
        assert record.definitions and record.occurrences
        assert decode(encode(record), path, "c" * 40, language) == record
    assert _SAMPLE.occurrences and _SAMPLE.imports and _SAMPLE.definitions[0].doc


def _edit(change: Any) -> bytes:
    """The sample with its JSON header changed."""
    head, _, packed = _ENCODED.partition(b"\n")
    doc = json.loads(head)
    change(doc)
    return json.dumps(doc).encode() + b"\n" + packed


def _set(doc: Any, where: tuple[int, ...], value: Any) -> None:
    for k in where[:-1]:
        doc = doc[k]
    doc[where[-1]] = value


def _occ(at: int, value: int) -> bytes:
    """The sample with one packed occurrence integer changed."""
    head, _, packed = _ENCODED.partition(b"\n")
    ints = array("i")
    ints.frombytes(packed)
    ints[at] = value
    return head + b"\n" + ints.tobytes()


@pytest.mark.parametrize("forged", [
    _ENCODED.replace(b"chit-semantic-file/1", b"chit-semantic-file/2"),  # other format
    _ENCODED.replace(b'"python"', b'"go"'),  # other language
    _ENCODED.replace(b"src/`app.py`/main", b"src/`other.py`/main"),  # other path
    _ENCODED.replace(b'"function"', b'"sorcery"'),  # unknown kind
    _ENCODED[:-5],  # truncated occurrences
    _ENCODED.partition(b"\n")[0],  # no occurrence part at all
    _ENCODED + b" " * (LIMITS.semantic_payload_bytes + 1),  # oversized
    b"\xff" + _ENCODED,  # not UTF-8
    _edit(lambda d: _set(d, (8,), 1.5)),  # a float as the count
    _edit(lambda d: _set(d, (8,), True)),  # a bool is not an integer
    _edit(lambda d: _set(d, (8,), 10**9)),  # a count past the bound
    _edit(lambda d: _set(d, (4,), 10_000)),  # more names than strings
    _edit(lambda d: _set(d, (5, 0, 3, 2), -1)),  # a definition range
    _edit(lambda d: _set(d, (5, 0, 4), "x" * 400)),  # signature over its bound
    _edit(lambda d: _set(d, (6, 0, 3), "3")),  # an import line as text
    _edit(lambda d: _set(d, (2,), 0)),  # truncated flag not a bool
    _edit(lambda d: _set(d, (3, 0), 7)),  # a string that is not text
    _occ(1, -7),  # a negative line
    _occ(0, 99),  # a name index past the string table
    _occ(0, -1),  # no name
    _occ(6, 99),  # an enclosing index past the string table
    _occ(5, 0x10000),  # unknown role bits
    _occ(5, -3),  # negative roles
])
def test_codec_rejects_malformed_rows(forged: bytes) -> None:
    assert forged != _ENCODED
    with pytest.raises(CodecError):
        decode(forged, "src/app.py", "b" * 40, "python")


def test_codec_rejects_a_definition_of_another_path() -> None:
    with pytest.raises(CodecError):
        decode(_ENCODED, "src/other.py", "b" * 40, "python")


@given(st.integers(0, len(_ENCODED) - 1), st.binary(min_size=1, max_size=8))
def test_codec_fails_only_with_its_own_error(at: int, junk: bytes) -> None:
    """Any splice into valid bytes decodes to records of that path, or raises CodecError."""
    forged = _ENCODED[:at] + junk + _ENCODED[at + len(junk):]
    try:
        record = decode(forged, "src/app.py", "b" * 40, "python")
    except CodecError:
        return
    assert all(d.path == "src/app.py" for d in record.definitions)
