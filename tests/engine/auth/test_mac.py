"""engine/auth/_mac.py: HMAC-SHA256 written out over hashlib, against two libraries.

Threat: a MAC that differs from HMAC-SHA256 on some key or message would
accept tokens no engine minted, or refuse genuine ones; a key of an unusual
length (empty, exactly one block, longer than a block and so hashed first) is
where hand-written HMACs go wrong. Every test compares with cryptography's
HMAC (what the chain used before) and with the standard library's hmac.
"""

from __future__ import annotations

import hashlib
import hmac as stdlib_hmac

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.auth import _mac


def crypto(key: bytes, message: bytes) -> bytes:
    mac = crypto_hmac.HMAC(key, hashes.SHA256())
    mac.update(message)
    return mac.finalize()


def check(key: bytes, message: bytes) -> None:
    expected = crypto(key, message)
    assert expected == stdlib_hmac.digest(key, message, hashlib.sha256)
    assert _mac.hmac_sha256(key, message) == expected
    assert _mac.hmac_sha256(bytearray(key), bytearray(message)) == expected
    assert _mac.hmac_sha256(memoryview(key), memoryview(message)) == expected


@settings(max_examples=2000)
@given(
    st.one_of(st.binary(max_size=200), st.integers(0, 140).map(lambda n: b"\xa5" * n)),
    st.binary(max_size=300),
)
def test_agrees_with_cryptography_and_the_standard_library(key: bytes, message: bytes) -> None:
    check(key, message)


@pytest.mark.parametrize("size", [0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000])
@pytest.mark.parametrize("fill", [0x00, 0x36, 0x5C, 0xFF])
def test_key_lengths_around_the_block(size: int, fill: int) -> None:
    for message in (b"", b"chit-token/1 hmac-sha256", bytes(range(256)) * 40):
        check(bytes([fill]) * size, message)


def test_rfc_4231_case_2() -> None:
    """RFC 4231 test case 2 (a short key), HMAC-SHA-256."""
    assert _mac.hmac_sha256(b"Jefe", b"what do ya want for nothing?").hex() == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )


def test_rfc_4231_case_6() -> None:
    """RFC 4231 test case 6 (a 131-byte key, hashed first), HMAC-SHA-256."""
    message = b"Test Using Larger Than Block-Size Key - Hash Key First"
    assert _mac.hmac_sha256(b"\xaa" * 131, message).hex() == (
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    )


@pytest.mark.parametrize("bad", ["key", 5, None])
def test_refuses_what_is_not_bytes(bad: object) -> None:
    with pytest.raises(TypeError):
        _mac.hmac_sha256(bad, b"m")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _mac.hmac_sha256(b"k", bad)  # type: ignore[arg-type]
