"""The clock, kept out of the pure verification module: ``verify`` is ``verify_at_time(now)``.

The order of the checks: docs/token-format.md, *Verification, in order*.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from engine.auth.token import UnverifiedToken
from engine.auth.verify import KeyLookup, VerifiedToken
from engine.auth.verify import verify_at_time as _verify_at_time
from engine.limits import LIMITS

__all__ = ["now", "verify"]


def now() -> int:
    """Current time, whole unix seconds."""
    return int(time.time())


def verify(
    token: UnverifiedToken | str,
    keys: KeyLookup,
    *,
    is_revoked: Callable[[Iterable[str]], bool] = lambda _ids: False,
    depth_limit: int = LIMITS.delegation_depth_blocks,
) -> VerifiedToken:
    """Verify a token at the current time (see :func:`engine.auth.verify.verify_at_time`).

    Args:
        token: Text form or parsed token.
        keys: Key id to root key lookup.
        is_revoked: True if any of the given hex block ids is revoked.
        depth_limit: Most delegation blocks accepted.

    Returns:
        The verified token.

    Raises:
        ChitError: As :func:`engine.auth.verify.verify_at_time`.
    """
    return _verify_at_time(token, keys, now(), is_revoked=is_revoked, depth_limit=depth_limit)
