"""Identity-provider JWTs: the configured issuer, its key, verification and claim mapping.

What the token exchange (engine/admin/exchange.py) needs to trust a JWT from an
``[[issuers]]`` entry of the policy (:class:`policy.Issuer`); the key files are
read here, so the policy package stays pure. Every refusal is a
:class:`~engine.errors.ChitError` (docs/exchange.md, *Flow* and *Refusals*).
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

import policy
from engine.auth.agents import validate_agent_name
from engine.errors import ChitError, TokenError
from engine.limits import LIMITS

__all__ = [
    "PublicKey",
    "agent_name",
    "issuer_key",
    "read_unverified",
    "refused",
    "select_issuer",
    "select_mapping",
    "verified_jti",
    "verify_jwt",
]

logger = logging.getLogger("chit.exchange")

_REQUIRED = ["iss", "aud", "exp", "iat"]
_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CLAIM_VALUE = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
"""The key types an issuer's JWTs may be verified with."""


def refused(reason: str, message: str, **hints: Any) -> ChitError:
    """The ``exchange_refused`` error, with its ``reason`` hint and any others."""
    return ChitError("exchange_refused", message, reason=reason, **hints)


def read_unverified(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A JWT's header and claims, decoded without verifying anything.

    Args:
        text: The JWT, compact serialisation.

    Returns:
        ``(header, claims)``, both untrusted: only for choosing the issuer and
        for the call log.

    Raises:
        ChitError: ``exchange_refused`` with reason ``malformed`` if it is not a JWT
            (a compact JWT is ASCII: base64url parts and dots, RFC 7515 §7.1).
    """
    if not text.isascii():
        # pyjwt encodes the text as UTF-8 first, which a lone surrogate (a byte
        # that was not UTF-8, read with surrogateescape) turns into UnicodeEncodeError.
        raise refused("malformed", "the subject token is not a JWT")
    try:
        header = jwt.get_unverified_header(text)
        untrusted = jwt.decode(text, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise refused("malformed", "the subject token is not a JWT") from None
    return header, untrusted


def select_issuer(
    issuers: tuple[policy.Issuer, ...], header: dict[str, Any], untrusted: dict[str, Any]
) -> policy.Issuer:
    """The configured issuer the JWT's unverified ``iss`` names, if its ``alg`` is allowed.

    Args:
        issuers: The policy's issuers.
        header: The JWT's unverified header.
        untrusted: The JWT's unverified claims.

    Returns:
        The issuer to verify the JWT against.

    Raises:
        ChitError: ``exchange_refused`` with reason ``unknown_issuer``, or
            ``algorithm`` (with ``allowed``) if the header's ``alg`` is not one
            the issuer is configured with.
    """
    untrusted_iss = untrusted.get("iss")
    issuer = next((i for i in issuers if i.issuer == untrusted_iss), None)
    if issuer is None:
        raise refused("unknown_issuer", "the token's issuer is not configured in the policy")
    if header.get("alg") not in issuer.algorithms:
        raise refused(
            "algorithm", "the token's algorithm is not one this issuer is configured with",
            allowed=list(issuer.algorithms),
        )
    return issuer


def issuer_key(home: Path, issuer: policy.Issuer, kid: object) -> PublicKey:
    """The issuer's verification key: by ``kid`` from its JWKS, or its PEM key.

    Args:
        home: The chit home; the issuer's key file is relative to it.
        issuer: The configured issuer.
        kid: The JWT header's (unverified) ``kid``, or ``None``; a JWKS of one
            key also serves a JWT without one.

    Returns:
        An RSA, EC or Ed25519 public key.

    Raises:
        ChitError: ``exchange_refused`` with reason ``issuer_key_unavailable``
            (the key file is missing, over ``LIMITS.issuer_key_file_bytes`` or unusable:
            logged for the operator) or ``unknown_key``.
    """
    path = home / (issuer.jwks_file or issuer.public_key_pem_file or "")
    try:
        with path.open("rb") as fh:
            data = fh.read(LIMITS.issuer_key_file_bytes + 1)
        if len(data) > LIMITS.issuer_key_file_bytes:
            raise ValueError("key file too large")
        if issuer.public_key_pem_file is not None:
            loaded = load_pem_public_key(data)
            if not isinstance(loaded, PublicKey):
                raise ValueError("unsupported key type")
            return loaded
        keys = jwt.PyJWKSet.from_dict(json.loads(data)).keys
    except (OSError, ValueError, TypeError, jwt.PyJWTError) as exc:
        # The operator's problem, logged for them; the caller learns only the reason.
        logger.warning("issuer %r: key file %s unusable: %s", issuer.issuer, path, exc)
        raise refused(
            "issuer_key_unavailable", "the issuer's keys cannot be loaded; the operator is told"
        ) from None
    chosen: jwt.PyJWK | None = None
    if kid is None and len(keys) == 1:
        chosen = keys[0]
    elif kid is not None:
        chosen = next((k for k in keys if k.key_id == kid), None)
    if chosen is None or not isinstance(chosen.key, PublicKey):
        raise refused("unknown_key", "no key of this issuer matches the token's kid")
    return chosen.key


def verify_jwt(text: str, key: PublicKey, issuer: policy.Issuer) -> dict[str, Any]:
    """Verify a JWT's signature and registered claims with the issuer's configuration.

    pyjwt checks the signature with the issuer's algorithms (never the header's
    choice), ``aud``, ``iss`` and the times with the issuer's leeway, requiring
    ``iss``, ``aud``, ``exp`` and ``iat``; ``exp``, ``iat`` and ``nbf`` must then
    be non-negative finite numbers (RFC 7519 §2 NumericDate).

    Args:
        text: The JWT, compact serialisation.
        key: The issuer's verification key (:func:`issuer_key`).
        issuer: The configured issuer the unverified ``iss`` chose.

    Returns:
        The verified claims.

    Raises:
        TokenError: ``token_expired``, ``token_not_yet_valid`` or
            ``token_invalid_signature``.
        ChitError: ``exchange_refused`` with reason ``claim_missing``,
            ``claim_invalid`` (with ``claim``), ``audience``, ``issuer``,
            ``algorithm`` or ``invalid``.
    """
    try:
        claims: dict[str, Any] = jwt.decode(
            text,
            key,
            algorithms=list(issuer.algorithms),
            audience=issuer.audience,
            issuer=issuer.issuer,
            leeway=issuer.leeway_seconds,
            options={"require": _REQUIRED, "strict_aud": False},
        )
    except jwt.ExpiredSignatureError:
        raise TokenError("token_expired", "the subject token has expired") from None
    except jwt.ImmatureSignatureError:
        raise TokenError("token_not_yet_valid", "the subject token is not valid yet") from None
    except jwt.InvalidSignatureError:
        raise TokenError(
            "token_invalid_signature", "the subject token's signature does not verify"
        ) from None
    except jwt.MissingRequiredClaimError as exc:
        raise refused(
            "claim_missing", f"the subject token lacks the {exc.claim!r} claim", claim=exc.claim
        ) from None
    except jwt.InvalidAudienceError:
        raise refused("audience", "the subject token is not meant for this audience") from None
    except jwt.InvalidIssuerError:
        raise refused("issuer", "the subject token's issuer does not match") from None
    except jwt.InvalidIssuedAtError:
        raise TokenError(
            "token_not_yet_valid", "the subject token was issued in the future"
        ) from None
    except jwt.InvalidAlgorithmError:
        raise refused("algorithm", "the token's algorithm is not allowed") from None
    except jwt.exceptions.InvalidJTIError:
        raise refused("claim_invalid", "the 'jti' claim must be text", claim="jti") from None
    except jwt.exceptions.InvalidSubjectError:
        raise refused("claim_invalid", "the 'sub' claim must be text", claim="sub") from None
    except (jwt.PyJWTError, ValueError, TypeError, OverflowError):
        # OverflowError: a signed time claim of Infinity, on pyjwt versions that
        # convert it with int() unguarded.
        raise refused("invalid", "the subject token does not verify") from None
    for name in ("exp", "iat", "nbf"):
        # RFC 7519 §2: a NumericDate is a JSON number. pyjwt also takes a numeric
        # string; chit takes only a non-negative integer or finite number.
        value = claims.get(name)
        if name not in claims and name == "nbf":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise refused(
                "claim_invalid", f"the {name!r} claim must be a NumericDate (seconds since "
                "the epoch, a non-negative number)", claim=name,
            )
    return claims


def verified_jti(issuer: policy.Issuer, claims: dict[str, Any]) -> str | None:
    """The verified ``jti`` (RFC 7519 §4.1.7), checked for the replay cache.

    Args:
        issuer: The issuer whose signature verified the claims.
        claims: The verified claims (:func:`verify_jwt`).

    Returns:
        The ``jti``: text of 1 to ``LIMITS.jti_chars`` characters, UTF-8
        encodable, without NUL; ``None`` only if absent and the issuer does
        not require one.

    Raises:
        ChitError: ``exchange_refused`` with reason ``claim_missing`` or
            ``claim_invalid`` (claim ``jti``).
    """
    if "jti" not in claims:
        if issuer.require_jti:
            raise refused(
                "claim_missing",
                "the subject token lacks the 'jti' claim, so it could be replayed",
                claim="jti",
            )
        return None
    value = claims["jti"]
    if not isinstance(value, str) or not 1 <= len(value) <= LIMITS.jti_chars:
        raise refused(
            "claim_invalid", f"the 'jti' claim must be text of 1 to {LIMITS.jti_chars} characters",
            claim="jti",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise refused("claim_invalid", "the 'jti' claim is not valid text", claim="jti") from None
    if "\x00" in value:  # no store keeps it the same way (PostgreSQL text holds no NUL)
        raise refused("claim_invalid", "the 'jti' claim holds a NUL character", claim="jti")
    return value


def select_mapping(
    issuer: policy.Issuer, claims: dict[str, Any]
) -> tuple[int, policy.IssuerMapping]:
    """The first mapping of ``issuer`` whose claims all equal the verified claims.

    Args:
        issuer: The issuer whose signature verified the claims.
        claims: The verified claims.

    Returns:
        ``(index, mapping)``: the winning mapping's index in the issuer's list, and itself.

    Raises:
        ChitError: ``exchange_refused`` with reason ``no_mapping``.
    """
    for index, mapping in enumerate(issuer.mappings):
        if all(claims.get(k) == v for k, v in mapping.claims.items()):
            return index, mapping
    raise refused("no_mapping", "no mapping of this issuer matches the token's claims")


def agent_name(template: str, claims: dict[str, Any]) -> str:
    """Fill a mapping's agent template's ``{claim}`` fields from verified claims.

    Args:
        template: The mapping's ``agent``, e.g. ``"ci-{repository_owner}"``.
        claims: The verified claims; each field takes a claim that is 1-64 of
            ``A-Z a-z 0-9 _ -``, lowercased.

    Returns:
        A valid root agent name.

    Raises:
        ChitError: ``exchange_refused`` with reason ``agent_invalid``.
    """

    def fill(match: re.Match[str]) -> str:
        value = claims.get(match.group(1))
        if not isinstance(value, str) or not _CLAIM_VALUE.fullmatch(value):
            raise refused(
                "agent_invalid",
                f"claim {match.group(1)!r} is missing or not a plain name for the agent template",
            )
        return value.lower()

    name = _TEMPLATE_FIELD.sub(fill, template)
    try:
        return validate_agent_name(name)
    except ValueError:
        raise refused("agent_invalid", "the mapped agent name is not a valid agent name") from None
