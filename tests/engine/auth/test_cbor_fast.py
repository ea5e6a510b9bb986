"""The fast path of engine.auth.cbor.decode against the reference decoder.

Threat model: ``decode`` is the security boundary of everything chit hashes,
MACs or signs (docs/cbor-profile.md). It first tries a fast path that may only
accept, never refuse: anything it cannot vouch for is read again by the
reference decoder (``_Decoder``). If the fast path accepted one byte string
the reference refuses (a non-canonical head, a duplicate or misordered key, an
indefinite length, a tag, a float, non-NFC text, a big number, nesting too
deep), a second encoding of a signed value would verify; if it returned
another value than the reference, a verifier and a signer would disagree about
what was signed. Every test below compares the two readings of the same bytes,
valid and hostile, and fails on any disagreement.
"""

from __future__ import annotations

import json
import secrets
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.auth import cbor
from engine.auth import token as t
from engine.auth.cbor import decode, encode
from engine.errors import ProfileError
from tests.engine.auth.test_cbor import DEEP, listify, same, values

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "cbor_det1.json"
DEPTHS = [0, 1, 2, 3, 16, 17, 256]

Reading = tuple[str, Any]  # ("ok", value) or ("refused", reason)


def reference(data: bytes, max_depth: int) -> Reading:
    """The reference decoder alone (what decode() did before the fast path)."""
    decoder = cbor._Decoder(data, max_depth)
    try:
        value, pos = decoder.item(0, 0)
        if pos != decoder.end:
            raise ProfileError("trailing bytes after item")
    except ProfileError as exc:
        return "refused", exc.reason
    return "ok", value


def public(data: bytes | bytearray, max_depth: int) -> Reading:
    try:
        return "ok", decode(data, max_size=len(data), max_depth=max_depth)
    except ProfileError as exc:
        return "refused", exc.reason


def agree(data: bytes, max_depth: int = cbor.LIMITS.cbor_default_depth_levels) -> Reading:
    """Assert the fast path and decode() agree with the reference on ``data``."""
    expected = reference(data, max_depth)
    fast = cbor._fast_decode(data, max_depth)
    if fast is not None:
        assert expected[0] == "ok", f"fast path accepted {data.hex()}: {expected}"
        assert same(fast[0], expected[1]), f"fast path read {data.hex()} differently"
    got = public(data, max_depth)
    assert got[0] == expected[0], data.hex()
    if expected[0] == "ok":
        assert same(got[1], expected[1]), data.hex()
    else:
        assert got[1] == expected[1], data.hex()
    assert public(bytearray(data), max_depth)[0] == expected[0]
    return expected


def vouched(data: bytes, max_depth: int = DEEP) -> bool:
    return cbor._fast_decode(data, max_depth) is not None


# ----------------------------------------------------------------- vectors


VECTOR_DOC = json.loads(VECTORS.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", VECTOR_DOC["valid"], ids=lambda c: c["name"])
def test_valid_vectors_take_the_fast_path(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["hex"])
    assert agree(data)[0] == "ok"
    assert vouched(data, cbor.LIMITS.cbor_default_depth_levels)


@pytest.mark.parametrize("case", VECTOR_DOC["invalid"], ids=lambda c: c["name"])
@pytest.mark.parametrize("max_depth", DEPTHS)
def test_invalid_vectors_are_refused_with_the_reference_reason(
    case: dict[str, Any], max_depth: int
) -> None:
    data = bytes.fromhex(case["hex"])
    expected = agree(data, max_depth)
    if max_depth == cbor.LIMITS.cbor_default_depth_levels:
        assert expected == ("refused", case["reason"])
    assert not vouched(data, max_depth) or expected[0] == "ok"


# ----------------------------------------------------------------- hostile inputs


def _hostile() -> Iterator[str]:
    """Hex inputs for each refusal of docs/cbor-profile.md §3, in many places."""
    # fmt: off
    heads = [
        # not in shortest form, every major type and width
        "1805", "1817", "1900ff", "1a0000ffff", "1b00000000ffffffff", "3800", "39007f",
        "3a0000ffff", "580100", "59000100", "5a0000000100", "7801", "780161", "79000161",
        "980100", "99000100", "9a0000000100", "b801616100", "b90001616100",
        # indefinite lengths, break, reserved additional information
        "9f01ff", "9fff", "bf616101ff", "5f4101ff", "7f616161ff", "1f", "3f", "df", "ff",
        "1c", "1d", "1e", "3c", "5c", "7c", "9c", "bc", "dc", "fc", "fd", "fe",
        # tags, in and out of the integer range, around every type
        "c249010000000000000000", "c24101", "c240", "c34100", "c0", "c100", "c11a514b67b0",
        "d818420001", "d9d9f700", "d82063616263", "d81c80", "d90100820102", "dbffffffffffffffff00",
        # floats, simple values, undefined
        "f93c00", "f97e00", "f98000", "fa47c35000", "fb3ff199999999999a", "f7", "e0", "f0",
        "f3", "f814", "f820", "f8ff", "f8",
        # truncation and lengths beyond the input
        "", "18", "19ff", "1aff", "1bffffffffffff", "41", "5801", "62c3", "8201", "a1", "a16161",
        "9affffffff", "9bffffffffffffffff", "baffffffff", "5affffffff", "7affffffff", "a4616100",
        # invalid UTF-8: overlong, surrogates, above U+10FFFF, stray continuation
        "62c0af", "63eda080", "63edbfbf", "64f4908080", "6180", "62c328", "61ff",
        # non-NFC text, as a value, as a key, nested
        "6365cc81", "63e284ab", "6341cc8a", "a16365cc8100", "816365cc81", "a161618163e284ab",
        # map keys: non-text, duplicate, out of order (length first, then bytewise)
        "a10100", "a12001", "a1410100", "a1800100", "a1a000", "a1f500", "a1f600", "a1f93c0000",
        "a1c1616100", "a2616101616102", "a2616101616101", "a2616201616101", "a262616101616202",
        "a361610162616102616203", "a2600060616100", "a1616fa2616101616102",
        # trailing bytes
        "0000", "8000", "a0ff", "6161ff",
    ]
    # fmt: on
    yield from heads
    # Nesting at and beyond the default limit, arrays and maps.
    for depth in (15, 16, 17, 40):
        yield "81" * depth + "00"
        yield "a16161" * depth + "00"
        yield "81a16161" * (depth // 2) + "f6"
    yield "81" * 100_000


@pytest.mark.parametrize("hex_", list(_hostile()))
@pytest.mark.parametrize("max_depth", [0, 1, 16, 256])
def test_hostile_inputs_agree(hex_: str, max_depth: int) -> None:
    agree(bytes.fromhex(hex_), max_depth)


@pytest.mark.parametrize("hex_", list(_hostile()))
def test_hostile_inputs_inside_containers_agree(hex_: str) -> None:
    """The same problems one level down: in an array, as a map value, after a key."""
    inner = bytes.fromhex(hex_)
    if len(inner) > 1000:
        return
    for data in (
        b"\x81" + inner,
        b"\x82\x01" + inner,
        b"\xa1\x61a" + inner,
        b"\xa2\x61a\x00\x61b" + inner,
        b"\xa1\x65caves\x81\x82\x63exp" + inner,
    ):
        agree(data)


# ----------------------------------------------------------------- generated inputs


@settings(max_examples=400)
@given(values)
def test_every_canonical_encoding_takes_the_fast_path(value: Any) -> None:
    data = encode(value, max_depth=DEEP)
    kind, decoded = agree(data, DEEP)
    assert kind == "ok"
    assert same(decoded, listify(value))
    assert vouched(data, DEEP)


@settings(max_examples=400)
@given(values, st.integers(0, 20))
def test_depth_limits_agree(value: Any, max_depth: int) -> None:
    agree(encode(value, max_depth=DEEP), max_depth)


@settings(max_examples=600)
@given(values, st.data())
def test_mutations_agree(value: Any, data: st.DataObject) -> None:
    """Flip, insert, delete or cut one byte of a canonical encoding."""
    encoded = encode(value, max_depth=DEEP)
    index = data.draw(st.integers(0, len(encoded)))
    byte = bytes([data.draw(st.integers(0, 255))])
    mutated = data.draw(
        st.sampled_from(
            [
                encoded[:index] + byte + encoded[index + 1 :],  # replace
                encoded[:index] + byte + encoded[index:],  # insert
                encoded[:index] + encoded[index + 1 :],  # delete
                encoded[:index],  # cut
            ]
        )
    )
    agree(mutated, DEEP)


@settings(max_examples=1500)
@given(st.binary(max_size=48))
def test_arbitrary_bytes_agree(data: bytes) -> None:
    agree(data, DEEP)


heads_alphabet = st.sampled_from(
    [bytes([b]) for b in range(256)]
    + [bytes.fromhex(h) for h in ("6161", "6162", "62c3a9", "6365cc81", "1805", "c2", "f93c00")]
)


@settings(max_examples=1500)
@given(st.lists(heads_alphabet, max_size=24).map(b"".join))
def test_spliced_heads_agree(data: bytes) -> None:
    """Inputs built from heads and short items, so most are nearly well formed."""
    agree(data, DEEP)


nfd_text = st.text(alphabet="ae\u0301\u0308\u00e9\u212b\u1100\u1161A\u030a", max_size=6)


@settings(max_examples=400)
@given(st.lists(nfd_text, max_size=4), st.dictionaries(nfd_text, st.integers(0, 2), max_size=3))
def test_text_normal_forms_agree(texts: list[str], mapping: dict[str, int]) -> None:
    """Text and keys in and out of NFC, written with cbor2 (which does not normalise)."""
    for value in (texts, mapping, *texts):
        agree(cbor2.dumps(value, canonical=True))
        agree(cbor2.dumps(value))
    assert vouched(cbor2.dumps([unicodedata.normalize("NFC", s) for s in texts]))


# ----------------------------------------------------------------- real tokens


def test_token_envelope_and_blocks_agree() -> None:
    key = secrets.token_bytes(32)
    text = t.mint(
        key,
        "k1",
        agent="a",
        operations=["read", "write"],
        paths=["src/**"],
        expires_at=2_000_000_000,
        not_before=1_000,
        delegable=True,
    )
    text = t.attenuate(text, paths=["src/\u00e9t\u00e9/**", "docs/*.md"], drop_delegation=True)
    text = t.attenuate(text, expires_at=1_999_999_999)
    raw = t._b64url_decode(text[len(t.TEXT_PREFIX) :])
    parsed = t.parse(text)
    for data in (raw, *parsed.blocks):
        assert agree(data)[0] == "ok"
        assert vouched(data)


# ----------------------------------------------------------------- the comparison itself


def _lax(give_up: Callable[[bytes], bool]) -> Callable[[bytes, int], tuple[Any] | None]:
    """A deliberately wrong fast path: cbor2's reading unless ``give_up(data)``."""

    def fast(data: bytes, max_depth: int) -> tuple[Any] | None:
        if give_up(data):
            return None
        try:
            return (cbor2.loads(data),)
        except Exception:  # any failure means "ask the reference"
            return None

    return fast


@pytest.mark.parametrize(
    "hex_",
    ["a2616101616102", "1805", "9f01ff", "c24101", "6365cc81", "a2616201616101", "f93c00"],
)
def test_a_lax_fast_path_would_be_caught(hex_: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison fails if the fast path accepts what the reference refuses."""
    monkeypatch.setattr(cbor, "_fast_decode", _lax(lambda _data: False))
    with pytest.raises(AssertionError):
        agree(bytes.fromhex(hex_))
