"""Private MAC primitives of the token chain, for engine/auth/token.py and verify.py only.

HMAC-SHA256 (RFC 2104, FIPS 198-1) from ``cryptography``; comparisons are
constant-time. Kept apart from the token recipe so the dangerous parts are few
and easy to audit (the pyca "hazmat" split). The chain and the delegation proof
are specified in docs/token-format.md, *Chaining*.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.hazmat.primitives import constant_time, hashes, hmac

TAG_BYTES = 32
_SHA256 = hashes.SHA256()
_DOMAIN = b"chit-token/1 hmac-sha256"
_DELEGATION_DOMAIN = b"chit-token/1 delegation"


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """Return HMAC-SHA256(key, message), 32 bytes."""
    mac = hmac.HMAC(key, _SHA256)
    mac.update(message)
    return mac.finalize()


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
