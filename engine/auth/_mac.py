"""Private MAC primitives of the token chain, for engine/auth/token.py and verify.py only.

HMAC-SHA256 (RFC 2104, FIPS 198-1) over OpenSSL's SHA-256 (``hashlib``);
comparisons are constant-time (``cryptography``). Kept apart from the token
recipe so the dangerous parts are few and easy to audit (the pyca "hazmat"
split). The chain and the delegation proof are specified in
docs/token-format.md, *Chaining*.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from cryptography.hazmat.primitives import constant_time

TAG_BYTES = 32
_DOMAIN = b"chit-token/1 hmac-sha256"
_DELEGATION_DOMAIN = b"chit-token/1 delegation"

# RFC 2104 §2: B = 64 bytes for SHA-256; ipad = 0x36 and opad = 0x5C repeated B
# times, applied to the key padded with zeros to B bytes (bytes.translate XORs
# every byte at once).
_BLOCK_BYTES = 64
_IPAD = bytes(byte ^ 0x36 for byte in range(256))
_OPAD = bytes(byte ^ 0x5C for byte in range(256))


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """Return HMAC-SHA256(key, message), 32 bytes (RFC 2104).

    ``H((K ^ opad) || H((K ^ ipad) || message))`` with ``K`` the key padded
    with zeros to 64 bytes, or its SHA-256 first if it is longer. Written out
    because constructing a ``cryptography`` HMAC object cost as much as the
    whole computation here; tests/engine/auth/test_mac.py compares the two.

    Raises:
        TypeError: If ``key`` or ``message`` is not bytes-like.
    """
    if type(key) is not bytes:
        key = memoryview(key).tobytes()
    if len(key) > _BLOCK_BYTES:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK_BYTES, b"\0")
    inner = hashlib.sha256(key.translate(_IPAD))
    inner.update(message)
    outer = hashlib.sha256(key.translate(_OPAD))
    outer.update(inner.digest())
    return outer.digest()


def tags_equal(expected: bytes, received: bytes) -> bool:
    """Compare two tags in constant time (independent of where they differ)."""
    return constant_time.bytes_eq(expected, received)


def chain_tags(root_key: bytes, blocks: Sequence[bytes]) -> list[bytes]:
    """Return the chain's tags ``t_0 ... t_{n-1}`` over the blocks' bytes.

    ``k0 = HMAC-SHA256(root_key, "chit-token/1 hmac-sha256")``, ``t_0 =
    HMAC-SHA256(k0, block_0)``, ``t_i = HMAC-SHA256(t_{i-1}, block_i)``; the
    token's tag is the last.
    """
    tag = hmac_sha256(root_key, _DOMAIN)
    tags = []
    for raw in blocks:
        tag = hmac_sha256(tag, raw)
        tags.append(tag)
    return tags


def delegation_key(root_key: bytes) -> bytes:
    """``kd = HMAC-SHA256(root_key, "chit-token/1 delegation")``: it keys every proof."""
    return hmac_sha256(root_key, _DELEGATION_DOMAIN)
