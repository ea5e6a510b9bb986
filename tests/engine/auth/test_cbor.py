"""Tests of engine.auth.cbor, the chit-det/1 deterministic CBOR profile.

Threat model: chit-det/1 bytes are hashed, MAC'd and signed. If two byte strings
decoded to the same value (non-canonical forms, duplicate keys, key order,
Unicode normalisation), an attacker could make a verifier and a signer disagree
about what was signed, or make a hash ambiguous. If the decoder trusted a
header's length, a few bytes could make it allocate gigabytes or recurse until
it crashes. Every refusal test below names the threat it covers.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import json
import time
import tracemalloc
import unicodedata
from collections import OrderedDict
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.auth import cbor
from engine.auth.cbor import PROFILE, decode, encode
from engine.errors import ProfileError
from engine.limits import LIMITS

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "cbor_det1.json"
DEEP = 256  # max_depth for property tests, whose values may nest beyond the default


def same(a: Any, b: Any) -> bool:
    """Equality that also compares types: in Python True == 1 and [1] == [True]."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def listify(value: Any) -> Any:
    """What decode returns for a value given to encode (tuples become lists)."""
    if isinstance(value, list | tuple):
        return [listify(v) for v in value]
    if isinstance(value, dict):
        return {k: listify(v) for k, v in value.items()}
    return value


# ----------------------------------------------------------------- strategies

BOUNDARIES = [0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**53, 2**64 - 1]
edge_ints = st.sampled_from(BOUNDARIES + [-1 - b for b in BOUNDARIES])
ints = st.one_of(edge_ints, st.integers(min_value=-(2**64), max_value=2**64 - 1))

nfc_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40).map(
    lambda s: unicodedata.normalize("NFC", s)
)
# Keys whose UTF-8 length crosses the 23/24 and 255/256 header boundaries.
boundary_keys = st.builds(
    lambda n, c: c * n,
    st.sampled_from([0, 1, 2, 22, 23, 24, 25, 254, 255, 256, 257]),
    st.sampled_from(["a", "b", "\u00e9", "\u6c34"]),
)
keys = st.one_of(nfc_text, boundary_keys, st.sampled_from(["a", "b", "aa", "ab", "z", "\u00e9"]))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    nfc_text,
    st.binary(max_size=300),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=6),
    ),
    max_leaves=40,
)


# ----------------------------------------------------------------- properties


@given(values)
def test_round_trip(value: Any) -> None:
    """decode(encode(v)) == v (types included) and encode(decode(b)) == b."""
    data = encode(value, max_depth=DEEP)
    decoded = decode(data, max_size=len(data), max_depth=DEEP)
    assert same(decoded, listify(value))
    assert encode(decoded, max_depth=DEEP) == data


@given(values)
def test_interoperates_with_cbor2(value: Any) -> None:
    """A generic RFC 8949 decoder reads the same value (no private dialect)."""
    data = encode(value, max_depth=DEEP)
    assert same(cbor2.loads(data), listify(value))


@given(st.dictionaries(keys, st.integers(0, 3), max_size=12))
def test_map_keys_sorted_bytewise(mapping: dict[str, int]) -> None:
    """RFC 8949 §4.2.1: keys in bytewise order of their encodings."""
    decoded = decode(encode(mapping), max_size=10**6)
    assert isinstance(decoded, dict)
    encoded_keys = [cbor2.dumps(k) for k in decoded]
    assert encoded_keys == sorted(encoded_keys)
    assert len(set(encoded_keys)) == len(encoded_keys)


@settings(max_examples=300)
@given(values, st.data())
def test_single_byte_mutation_is_refused_or_canonical(value: Any, data: st.DataObject) -> None:
    """Threat: malleability. A mutated encoding is accepted only if it is canonical."""
    encoded = encode(value, max_depth=DEEP)
    index = data.draw(st.integers(0, len(encoded) - 1))
    byte = data.draw(st.integers(0, 255))
    mutated = encoded[:index] + bytes([byte]) + encoded[index + 1 :]
    try:
        decoded = decode(mutated, max_size=len(mutated), max_depth=DEEP)
    except ProfileError:
        return
    assert encode(decoded, max_depth=DEEP) == mutated


@given(values, st.data())
def test_truncation_is_refused(value: Any, data: st.DataObject) -> None:
    """Threat: a cut-off item read as complete. CBOR items are prefix-free."""
    encoded = encode(value, max_depth=DEEP)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ProfileError):
        decode(encoded[:cut], max_depth=DEEP)


@given(values, st.binary(min_size=1, max_size=3))
def test_appended_bytes_are_refused(value: Any, extra: bytes) -> None:
    """Threat: smuggling data after the hashed item."""
    with pytest.raises(ProfileError, match="trailing bytes"):
        decode(encode(value, max_depth=DEEP) + extra, max_size=10**6, max_depth=DEEP)


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_refused_or_canonical(data: bytes) -> None:
    """Threat: any second encoding of a value. Only canonical bytes decode."""
    try:
        decoded = decode(data, max_depth=DEEP)
    except ProfileError:
        return
    assert encode(decoded, max_depth=DEEP) == data


# ----------------------------------------------------------------- API and basics


def test_public_api() -> None:
    assert sorted(cbor.__all__) == [
        "PROFILE",
        "decode",
        "encode",
    ]
    assert PROFILE == "chit-det/1"
    assert LIMITS.cbor_default_size_bytes == 65536
    assert LIMITS.cbor_default_depth_levels == 16


@pytest.mark.parametrize(
    ("value", "hex_"),
    [
        (1000000, "1a000f4240"),  # RFC 8949 Appendix A
        ([1, [2, 3], [4, 5]], "8301820203820405"),  # RFC 8949 Appendix A
        ({"a": 1, "b": [2, 3]}, "a26161016162820203"),  # RFC 8949 Appendix A
        (2**64 - 1, "1bffffffffffffffff"),  # RFC 8949 Appendix A
        (-(2**64), "3bffffffffffffffff"),  # RFC 8949 Appendix A
        ((1, 2), "820102"),  # a tuple is an array
    ],
)
def test_rfc_8949_appendix_a(value: Any, hex_: str) -> None:
    assert encode(value).hex() == hex_


def test_bool_is_not_int() -> None:
    """Threat: True and 1 hashing alike (bool subclasses int in Python)."""
    assert encode(True) == b"\xf5"
    assert encode(False) == b"\xf4"
    assert encode([True, 1]) == b"\x82\xf5\x01"
    assert decode(b"\xf5") is True
    assert decode(b"\xf4") is False
    assert decode(b"\xf6") is None
    assert type(decode(b"\x01")) is int


def test_decode_accepts_bytearray_and_returns_bytes() -> None:
    assert decode(bytearray(b"\x42\x01\x02")) == b"\x01\x02"
    assert type(decode(bytearray(b"\x42\x01\x02"))) is bytes


def test_decode_rejects_non_bytes_argument() -> None:
    with pytest.raises(TypeError):
        decode("00")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_size": -1}, {"max_depth": -1}, {"max_depth": 257}, {"max_depth": 1.5}],
)
def test_nonsense_limits_are_programming_errors(kwargs: dict[str, Any]) -> None:
    """A limit above the ceiling could let recursion hit Python's stack limit."""
    with pytest.raises(ValueError, match="must be an int"):
        decode(b"\x00", **kwargs)
    if "max_depth" in kwargs:
        with pytest.raises(ValueError, match="must be an int"):
            encode(0, max_depth=kwargs["max_depth"])


# ----------------------------------------------------------------- decoder refusals


def refused(hex_: str, reason: str, **kwargs: Any) -> None:
    with pytest.raises(ProfileError) as info:
        decode(bytes.fromhex(hex_), **kwargs)
    assert info.value.reason == reason


@pytest.mark.parametrize("hex_", ["f93c00", "f97e00", "fa47c35000", "fb3ff199999999999a"])
def test_refuses_floats(hex_: str) -> None:
    """Threat: float non-determinism (NaN payloads, -0.0, widths)."""
    refused(hex_, "float not allowed")


@pytest.mark.parametrize(
    "hex_",
    [
        "c249010000000000000000",  # tag 2 bignum
        "c11a514b67b0",  # tag 1 epoch datetime
        "c074323031332d30332d32315432303a30343a30305a",  # tag 0 date/time string
        "d818420001",  # tag 24 embedded CBOR
        "d9d9f700",  # tag 55799 self-described CBOR
    ],
)
def test_refuses_tags(hex_: str) -> None:
    """Threat: tags give alternative encodings (bignum 1 vs 1) and hidden semantics."""
    refused(hex_, "tag not allowed")


@pytest.mark.parametrize(
    "hex_",
    [
        "9f01ff",  # array
        "9fff",  # empty array
        "bf616101ff",  # map
        "5f4101ff",  # bytes in chunks
        "7f616161ff",  # text in chunks
        "1f",  # uint with ai 31 (malformed)
        "3f",  # nint with ai 31 (malformed)
        "df",  # tag with ai 31 (malformed)
    ],
)
def test_refuses_indefinite_length(hex_: str) -> None:
    """Threat: a second encoding of every string and container (RFC 8949 §4.2.1)."""
    refused(hex_, "indefinite length not allowed")


@pytest.mark.parametrize(
    "hex_",
    [
        "1805",  # 5 with a 1-byte argument
        "1817",  # 23, largest immediate, in 1 byte
        "1900ff",  # 255 in 2 bytes
        "1a0000ffff",  # 65535 in 4 bytes
        "1b00000000ffffffff",  # 2**32-1 in 8 bytes
        "1b0000000000000000",  # 0 in 8 bytes
        "3800",  # -1 in 1 byte
        "39007f",  # -128 in 2 bytes
        "580100",  # bytes, length 1 in 1 byte
        "79000161",  # text, length 1 in 2 bytes
        "980100",  # array, length 1 in 1 byte
        "9a0000000100",  # array, length 1 in 4 bytes
        "b801616100",  # map, length 1 in 1 byte
    ],
)
def test_refuses_non_shortest_arguments(hex_: str) -> None:
    """Threat: the same integer or length written several ways (malleable hashes)."""
    refused(hex_, "argument not in shortest form")


def test_refuses_duplicate_keys() -> None:
    """Threat: parser differential, one reader takes the first value, another the last."""
    refused("a2616101616102", "duplicate map key")  # {"a": 1, "a": 2}
    refused("a2616101616101", "duplicate map key")  # {"a": 1, "a": 1}


@pytest.mark.parametrize(
    "hex_",
    [
        "a2616201616101",  # {"b": 1, "a": 1}
        "a262616101616202",  # {"aa": 1, "b": 2}: length-first violated
        "a361610162616102616203",  # {"a", "aa", "b"}: lexicographic, not §4.2.1
    ],
)
def test_refuses_keys_out_of_order(hex_: str) -> None:
    """Threat: two encodings of one map (RFC 8949 §4.2.1 bytewise key order)."""
    refused(hex_, "map keys out of order")


@pytest.mark.parametrize(
    "hex_",
    [
        "a10100",  # {1: 0}
        "a12001",  # {-1: 1}
        "a1410100",  # {h'01': 0}
        "a1800100",  # {[]: 0}
        "a1f500",  # {true: 0}
    ],
)
def test_refuses_non_text_keys(hex_: str) -> None:
    """Threat: {1: x} vs {"1": x} confusion across languages; key types outside the model."""
    refused(hex_, "map key is not a text string")


def test_refuses_non_nfc_text() -> None:
    """Threat: visually identical names ("é" vs "e"+U+0301) hashing differently."""
    refused("6365cc81", "text is not NFC")  # "e\u0301"
    refused("a16365cc8100", "text is not NFC")  # as a map key
    refused("63e284ab", "text is not NFC")  # U+212B ANGSTROM SIGN, NFC is U+00C5


@pytest.mark.parametrize(
    "hex_",
    [
        "6180",  # lone continuation byte
        "61ff",  # 0xff never occurs in UTF-8
        "62c080",  # overlong NUL
        "63eda080",  # UTF-16 surrogate U+D800
        "64f4908080",  # U+110000, above the Unicode range
        "62c328",  # bad continuation
        "a162c0800100",  # invalid key
    ],
)
def test_refuses_invalid_utf8(hex_: str) -> None:
    """Threat: text that different decoders repair differently (RFC 8949 §3.1 type 3)."""
    refused(hex_, "invalid UTF-8")


def test_refuses_trailing_bytes() -> None:
    """Threat: appending data that a hash covers but the reader ignores."""
    refused("0000", "trailing bytes after item")
    refused("a0ff", "trailing bytes after item")


@pytest.mark.parametrize(
    ("hex_", "reason"),
    [
        ("", "truncated input"),
        ("18", "truncated input"),
        ("1a0000", "truncated input"),
        ("6261", "length exceeds input"),
        ("8201", "length exceeds input"),
        ("a16161", "truncated input"),
        ("a2616101", "length exceeds input"),
        ("a26161016162", "truncated input"),
    ],
)
def test_refuses_truncation(hex_: str, reason: str) -> None:
    """Threat: a cut-off item read as complete, or a read past the end."""
    refused(hex_, reason)


@pytest.mark.parametrize("hex_", ["1c", "1d", "1e", "3c", "5d", "7e", "9c", "bd", "dc", "fc"])
def test_refuses_reserved_additional_info(hex_: str) -> None:
    """Threat: undefined encodings that future readers may interpret differently."""
    refused(hex_, "reserved additional information")


def test_refuses_undefined_and_simple_values() -> None:
    """Threat: values outside the data model (no Python counterpart, ambiguous)."""
    refused("f7", "undefined not allowed")
    refused("f0", "simple value not allowed")  # simple(16)
    refused("e0", "simple value not allowed")  # simple(0)
    refused("f3", "simple value not allowed")  # simple(19)
    refused("f818", "simple value not allowed")  # simple(24), two-byte form
    refused("f8ff", "simple value not allowed")  # simple(255)
    refused("f814", "simple value not allowed")  # false in the invalid two-byte form
    refused("ff", "unexpected break")


def test_refuses_oversize_input() -> None:
    """Threat: resource exhaustion by a large message."""
    data = encode(b"x" * LIMITS.cbor_default_size_bytes)  # 5-byte header + 65536 bytes
    refused(data.hex(), "input larger than max_size")
    assert decode(data, max_size=len(data)) == b"x" * LIMITS.cbor_default_size_bytes
    refused("820102", "input larger than max_size", max_size=2)


def _peak_memory(data: bytes, **kwargs: Any) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(ProfileError, match="length exceeds input"):
            decode(data, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "hex_",
    [
        "9affffffff",  # array of 2**32-1 items
        "9bffffffffffffffff",  # array of 2**64-1 items
        "baffffffff",  # map of 2**32-1 pairs
        "5bffffffffffffffff",  # bytes of 2**64-1 bytes
        "7affffffff",  # text of 2**32-1 bytes
        "8183" + "00" * 2,  # inner array announces 3 items, 2 bytes left
        "a2616100",  # map of 2 pairs, 3 bytes left (needs 4)
    ],
)
def test_huge_length_header_is_refused_fast_without_allocating(hex_: str) -> None:
    """Threat: a 5-byte header that makes the decoder allocate 4 G items."""
    data = bytes.fromhex(hex_)
    start = time.perf_counter()
    peak = _peak_memory(data)
    assert time.perf_counter() - start < 0.5
    assert peak < 64 * 1024


def test_huge_length_header_with_padding_is_refused() -> None:
    """Threat: as above, with enough bytes to pass a naive 'some bytes left' check."""
    data = bytes.fromhex("9affffffff") + b"\x00" * 60000
    assert _peak_memory(data) < 64 * 1024


def test_deep_nesting_is_refused_fast() -> None:
    """Threat: 100,000 nested arrays crashing the decoder with RecursionError."""
    data = b"\x81" * 100_000 + b"\x00"
    start = time.perf_counter()
    refused(data.hex(), "nesting too deep", max_size=len(data))
    refused(data.hex(), "input larger than max_size")  # the default size limit, too
    refused((b"\xa1\x61\x61" * 30_000 + b"\x00").hex(), "nesting too deep", max_size=10**6)
    assert time.perf_counter() - start < 1.0


def test_depth_limit_boundary() -> None:
    """Nesting up to max_depth containers is accepted, one more is refused."""
    ok = b"\x81" * LIMITS.cbor_default_depth_levels + b"\x00"
    assert encode(decode(ok)) == ok
    refused((b"\x81" * (LIMITS.cbor_default_depth_levels + 1) + b"\x00").hex(), "nesting too deep")
    assert decode(b"\x00", max_depth=0) == 0
    refused("80", "nesting too deep", max_depth=0)
    refused("a0", "nesting too deep", max_depth=0)
    assert decode(b"\x81\x80", max_depth=2) == [[]]
    refused("818180", "nesting too deep", max_depth=2)


# ----------------------------------------------------------------- encoder refusals


def encode_refused(value: Any, reason: str, **kwargs: Any) -> None:
    with pytest.raises(ProfileError) as info:
        encode(value, **kwargs)
    assert info.value.reason == reason


@pytest.mark.parametrize("value", [1.0, 0.0, -0.0, float("nan"), float("inf"), [1.5], {"a": 2.5}])
def test_encoder_refuses_floats(value: Any) -> None:
    """Threat: float non-determinism; cbor2 would silently shorten 1.0 to f93c00."""
    encode_refused(value, "float not allowed")


@pytest.mark.parametrize("key", [1, True, None, b"a", (1,), 1.5])
def test_encoder_refuses_non_text_keys(key: Any) -> None:
    """Threat: key type confusion ({1: x} vs {"1": x}; cbor2 would write them)."""
    encode_refused({key: 0}, "map key is not a text string")


def test_encoder_refuses_non_nfc_text() -> None:
    """Threat: visually identical names hashing differently."""
    encode_refused("e\u0301", "text is not NFC")
    encode_refused({"e\u0301": 1}, "text is not NFC")
    encode_refused(["ok", {"k": "\u212b"}], "text is not NFC")


def test_encoder_refuses_lone_surrogates() -> None:
    """Threat: text with no UTF-8 form (cbor2 would raise a non-profile error)."""
    encode_refused("\ud800", "text contains a surrogate code point")
    encode_refused({"\udfff": 1}, "text contains a surrogate code point")


@pytest.mark.parametrize("value", [2**64, -(2**64) - 1, 2**100, [2**64]])
def test_encoder_refuses_out_of_range_ints(value: Any) -> None:
    """Threat: cbor2 would emit a bignum tag (c2/c3), outside the profile."""
    encode_refused(value, "integer outside [-2**64, 2**64-1]")


class _Color(enum.IntEnum):
    RED = 1


class _Name(str):
    __slots__ = ()


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        ({1, 2}, "set"),
        (frozenset(), "frozenset"),
        (datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), "datetime"),
        (datetime.date(2024, 1, 1), "date"),
        (decimal.Decimal(1), "Decimal"),
        (1j, "complex"),
        (bytearray(b"x"), "bytearray"),
        (_Color.RED, "_Color"),
        (_Name("x"), "_Name"),
        (OrderedDict(), "OrderedDict"),
        (cbor2.CBORTag(2, b"\x01"), "CBORTag"),
        (cbor2.undefined, "UndefinedType"),
        (object(), "object"),
    ],
)
def test_encoder_refuses_other_types(value: Any, type_name: str) -> None:
    """Threat: types that cbor2 maps to tags or encodes in ways decode cannot reverse."""
    encode_refused(value, f"type not allowed: {type_name}")


def test_encoder_depth_limit_and_cycles() -> None:
    """Threat: unbounded recursion on deep or self-referencing values."""
    deep: Any = 0
    for _ in range(LIMITS.cbor_default_depth_levels):
        deep = [deep]
    assert encode(deep) == b"\x81" * LIMITS.cbor_default_depth_levels + b"\x00"
    encode_refused([deep], "nesting too deep")
    encode_refused({"a": deep}, "nesting too deep")
    cycle: list[Any] = []
    cycle.append(cycle)
    encode_refused(cycle, "nesting too deep")
    encode_refused(cycle, "nesting too deep", max_depth=256)
    encode_refused([], "nesting too deep", max_depth=0)


def test_encoder_has_no_size_limit() -> None:
    """Documented: encode has no size limit; decode's max_size is the caller's to set."""
    data = encode(b"\x00" * (LIMITS.cbor_default_size_bytes + 1))
    assert len(data) > LIMITS.cbor_default_size_bytes


# ----------------------------------------------------------------- vectors


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if list(value) == ["$bytes"]:
            return bytes.fromhex(value["$bytes"])
        if list(value) == ["$int"]:
            return int(value["$int"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


_VECTORS = json.loads(VECTORS.read_text(encoding="utf-8"))


def test_vector_file_shape() -> None:
    assert _VECTORS["profile"] == PROFILE
    assert len(_VECTORS["valid"]) >= 12
    assert len(_VECTORS["invalid"]) >= 15
    names = [v["name"] for v in _VECTORS["valid"] + _VECTORS["invalid"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("vector", _VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vector(vector: dict[str, Any]) -> None:
    value = _from_json(vector["value"])
    data = bytes.fromhex(vector["hex"])
    assert encode(value).hex() == vector["hex"]
    assert same(decode(data), value)
    assert same(cbor2.loads(data), value)
    assert hashlib.sha256(data).hexdigest() == vector["sha256"]


@pytest.mark.parametrize("vector", _VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vector(vector: dict[str, Any]) -> None:
    refused(vector["hex"], vector["reason"])
