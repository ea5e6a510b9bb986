"""Errors of the chit engine, split by cause, each carrying a stable code.

Every refusal the engine makes is a :class:`ChitError` whose ``code`` is one of
:data:`CODES` (documented in ``docs/errors.md``). The message is written for the
caller: it never includes ``str()`` of another exception, secret material, or a
path outside the caller's scope. Edges translate ``to_dict()`` into their wire
format and never forward anything else.
"""

from __future__ import annotations

from typing import Any

import policy

CODES: frozenset[str] = frozenset(
    {
        "token_missing",
        "token_malformed",
        "token_unsupported_version",
        "token_unknown_key",
        "token_invalid_signature",
        "token_expired",
        "token_not_yet_valid",
        "token_expiry_required",
        "token_revoked",
        "caveat_unknown",
        "caveat_malformed",
        "delegation_not_permitted",
        "delegation_widens",
        "delegation_depth_exceeded",
        "path_invalid",
        "path_outside_scope",
        "repo_outside_scope",
        "repo_required",
        "path_forbidden",
        "symlink_in_path",
        "operation_not_permitted",
        "tool_not_offered",
        "policy_denied",
        "catalog_changed",
        "confirmation_required",
        "session_token_mismatch",
        "conflict",
        "not_found",
        "invalid_argument",
        "limit_exceeded",
        "engine_frozen",
        "seal_invalid",
        "exchange_refused",
        "approval_required",
        "approval_denied",
        "approval_expired",
        "internal_error",
    }
)


class ChitError(Exception):
    """Base of every error the engine raises on purpose.

    Args:
        code: One of :data:`CODES`.
        message: A caller-safe explanation (no secrets, no out-of-scope paths).
        **hints: JSON-serialisable extra fields for the caller (for example
            ``offered`` or ``retry_after``).

    Raises:
        ValueError: If ``code`` is not a known code (a programming error).
    """

    def __init__(self, code: str, message: str, **hints: Any) -> None:
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.hints = hints

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form ``{"error": code, "message": ..., **hints}``."""
        return {"error": self.code, "message": self.message, **self.hints}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class MalformedDataError(ChitError):
    """Bytes that do not decode under a chit format (``token_malformed`` and kin)."""


class TokenError(ChitError):
    """A token that parsed but is not valid now (signature, time, key, revocation)."""


class CaveatError(ChitError):
    """A caveat the engine does not know or cannot interpret (fails closed)."""


class AccessDeniedError(ChitError):
    """A valid token that does not grant what was asked (scope, operation, policy)."""


class InvalidRequestError(ChitError):
    """Arguments that are malformed regardless of authority (paths, revisions, values)."""


class RepositoryError(ChitError):
    """A version-control outcome the caller must act on (``conflict``, ``not_found``)."""


class StateError(ChitError):
    """Engine state forbids the call (``session_token_mismatch``, ``engine_frozen``)."""


class ApprovalError(ChitError):
    """A call an ``[[approval]]`` table holds: waiting, denied or expired (docs/approvals.md)."""


class ConfirmationError(ChitError):
    """A call the policy's ``[confirm]`` lists that did not say ``"confirm": true``.

    Carries ``preview``: what the call would have done (nothing was changed).
    """


class ConfigurationError(Exception):
    """The engine's own configuration (keyring, policy, repository) is unusable.

    Raised at start-up, never sent to an agent.
    """


class StoreError(Exception):
    """The state store failed (unreachable, locked too long, refused a statement).

    A store turns its driver's failures into this, with a message written for
    operators that names the store by its URL without a password; the
    driver's own error is chained for the engine's log only. Never sent to an
    agent: a call that meets it is refused with ``internal_error``.

    Args:
        message: What failed (never a password or a token).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class SchemaError(StoreError):
    """The store's schema is newer than this chit knows, or not chit's at all.

    An engine refuses to start on it: writing to a schema it does not know
    could lose what a newer chit recorded.
    """


class ProfileError(ValueError):
    """A value or byte string outside the ``chit-det/1`` CBOR profile.

    Raised by :mod:`engine.auth.cbor` (pure, no codes). Callers map it to the stable
    code that fits their format, for example ``token_malformed``.

    Args:
        reason: A short, caller-safe description ("float not allowed", ...).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def denied(decision: policy.Decision) -> AccessDeniedError:
    """The engine error for a refusing policy Decision (code, reasons, ``rule``, ``retry_after``).

    Args:
        decision: A Decision with ``allowed`` False.

    Returns:
        The error to raise; its hints carry ``rule`` and, for a rate limit,
        ``retry_after`` (whole seconds).
    """
    hints: dict[str, object] = {"rule": decision.rule}
    if decision.retry_after is not None:
        hints["retry_after"] = decision.retry_after
    return AccessDeniedError(
        decision.code or "policy_denied",
        "; ".join(decision.reasons) or "refused by the organisation policy",
        **hints,
    )
