"""Private MAC primitives for the token chain. Nothing outside ``engine.token`` uses them.

HMAC-SHA256 (RFC 2104, FIPS 198-1) from ``cryptography``; comparisons are
constant-time. Kept apart from the token recipe so the dangerous parts are few
and easy to audit (the pyca "hazmat" split).
"""

from __future__ import annotations

from cryptography.hazmat.primitives import constant_time, hashes, hmac

TAG_BYTES = 32
_SHA256 = hashes.SHA256()


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """Return HMAC-SHA256(key, message), 32 bytes."""
    mac = hmac.HMAC(key, _SHA256)
    mac.update(message)
    return mac.finalize()


def tags_equal(expected: bytes, received: bytes) -> bool:
    """Compare two tags in constant time (independent of where they differ)."""
    return constant_time.bytes_eq(expected, received)
