"""Token exchange: a JWT from the organisation's identity provider for a root chit token.

The shape is RFC 8693's (``docs/exchange.md``). The policy's ``[[issuers]]``
entries (:class:`policy.Issuer`) name the identity providers whose JWTs are
accepted, their audience, their fixed algorithms and their key file (a JWKS or a
PEM public key, relative to the chit home, read here: the policy package stays
pure). Verification is pyjwt's, with ``iss``, ``aud``, ``exp`` and ``iat``
required and the issuer's bounded leeway; the algorithms come from the
configuration, never from the token's header. The unverified ``iss`` only picks
which configuration to verify against. The first mapping whose claims all hold
decides the agent name, operations, paths and lifetime cap; the engine's newest
root key mints the token.

Every refusal is a :class:`~engine.errors.ChitError`: ``token_invalid_signature``,
``token_expired``, ``token_not_yet_valid``, or ``exchange_refused`` with a
``reason`` hint (``malformed``, ``unknown_issuer``, ``algorithm``, ``audience``,
``issuer``, ``claim_missing``, ``unknown_key``, ``issuer_key_unavailable``,
``no_mapping``, ``agent_invalid``, ``invalid``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

import policy
from engine import operator
from engine.errors import ChitError, TokenError
from engine.service import load_policy
from engine.token import validate_agent_name

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "GRANT_TYPE",
    "JWT_TOKEN_TYPE",
    "MAX_JWT_CHARS",
    "exchange",
]

logger = logging.getLogger("chit.exchange")

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105
MAX_JWT_CHARS = 16_384
"""Longest subject token accepted."""

MAX_KEY_FILE_BYTES = 1 << 20
_REQUIRED = ["iss", "aud", "exp", "iat"]
_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CLAIM_VALUE = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
_PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


def _refused(reason: str, message: str, **hints: Any) -> ChitError:
    return ChitError("exchange_refused", message, reason=reason, **hints)


def exchange(
    home: str | os.PathLike[str], subject_token: str, *, now: int | None = None
) -> dict[str, Any]:
    """Verify an identity provider's JWT and mint the root token its mapping grants.

    Args:
        home: The chit home (keyring, ``policy.toml``, the issuers' key files).
        subject_token: The JWT, compact serialisation.
        now: Issue time of the chit token, unix seconds (default: the clock;
            the JWT's own times are checked against the clock by pyjwt).

    Returns:
        ``{"token", "token_id", "agent", "key_id", "expires_at", "expires_in",
        "issuer", "mapping"}`` where ``mapping`` is the winning mapping's index.

    Raises:
        ChitError: A refusal (see the module docstring for the codes).
        ConfigurationError: If the keyring or policy is unusable.
    """
    if not isinstance(subject_token, str) or not subject_token.strip():
        raise _refused("malformed", "the subject token is empty")
    text = subject_token.strip()
    if len(text) > MAX_JWT_CHARS:
        raise _refused("malformed", f"the subject token exceeds {MAX_JWT_CHARS} characters")
    pol = load_policy(home)
    try:
        header = jwt.get_unverified_header(text)
        untrusted = jwt.decode(text, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise _refused("malformed", "the subject token is not a JWT") from None
    untrusted_iss = untrusted.get("iss")
    issuer = next((i for i in pol.issuers if i.issuer == untrusted_iss), None)
    if issuer is None:
        raise _refused("unknown_issuer", "the token's issuer is not configured in the policy")
    if header.get("alg") not in issuer.algorithms:
        raise _refused(
            "algorithm", "the token's algorithm is not one this issuer is configured with",
            allowed=list(issuer.algorithms),
        )
    key = _key_for(Path(home), issuer, header.get("kid"))
    claims = _verify(text, key, issuer)
    return _mint(home, pol, issuer, claims, now=now)


def _verify(text: str, key: _PublicKey, issuer: policy.Issuer) -> dict[str, Any]:
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
        raise _refused(
            "claim_missing", f"the subject token lacks the {exc.claim!r} claim", claim=exc.claim
        ) from None
    except jwt.InvalidAudienceError:
        raise _refused("audience", "the subject token is not meant for this audience") from None
    except jwt.InvalidIssuerError:
        raise _refused("issuer", "the subject token's issuer does not match") from None
    except jwt.InvalidIssuedAtError:
        raise TokenError(
            "token_not_yet_valid", "the subject token was issued in the future"
        ) from None
    except jwt.InvalidAlgorithmError:
        raise _refused("algorithm", "the token's algorithm is not allowed") from None
    except (jwt.PyJWTError, ValueError, TypeError):
        raise _refused("invalid", "the subject token does not verify") from None
    return claims


def _key_for(home: Path, issuer: policy.Issuer, kid: object) -> _PublicKey:
    """The issuer's verification key: by ``kid`` from its JWKS, or its PEM key."""
    path = home / (issuer.jwks_file or issuer.public_key_pem_file or "")
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_KEY_FILE_BYTES + 1)
        if len(data) > MAX_KEY_FILE_BYTES:
            raise ValueError("key file too large")
        if issuer.public_key_pem_file is not None:
            loaded = load_pem_public_key(data)
            if not isinstance(loaded, _PublicKey):
                raise ValueError("unsupported key type")
            return loaded
        keys = jwt.PyJWKSet.from_dict(json.loads(data)).keys
    except (OSError, ValueError, TypeError, jwt.PyJWTError) as exc:
        # The operator's problem, logged for them; the caller learns only the reason.
        logger.warning("issuer %r: key file %s unusable: %s", issuer.issuer, path, exc)
        raise _refused(
            "issuer_key_unavailable", "the issuer's keys cannot be loaded; the operator is told"
        ) from None
    chosen: jwt.PyJWK | None = None
    if kid is None and len(keys) == 1:
        chosen = keys[0]
    elif kid is not None:
        chosen = next((k for k in keys if k.key_id == kid), None)
    if chosen is None or not isinstance(chosen.key, _PublicKey):
        raise _refused("unknown_key", "no key of this issuer matches the token's kid")
    return chosen.key


def _mint(
    home: str | os.PathLike[str],
    pol: policy.Policy,
    issuer: policy.Issuer,
    claims: dict[str, Any],
    *,
    now: int | None,
) -> dict[str, Any]:
    found = [
        (index, mapping)
        for index, mapping in enumerate(issuer.mappings)
        if all(claims.get(k) == v for k, v in mapping.claims.items())
    ]
    if not found:
        raise _refused("no_mapping", "no mapping of this issuer matches the token's claims")
    index, mapping = found[0]  # the first matching mapping wins
    agent = _agent(mapping.agent, claims)
    issued = int(time.time()) if now is None else now
    ttl = min(
        mapping.max_ttl_seconds,
        pol.limits.token_lifetime_seconds,
        int(claims["exp"]) - issued,
    )
    if ttl <= 0:
        raise TokenError("token_expired", "the subject token has expired")
    ops = list(mapping.ops)
    try:
        minted = operator.mint_token(
            home,
            agent=agent,
            operations=ops,
            paths=list(mapping.paths),
            ttl_seconds=ttl,
            delegable="sub-token:issue" in ops,
            now=issued,
        )
    except ValueError as exc:
        raise _refused("agent_invalid", f"the mapping cannot mint: {exc}") from None
    return {
        **minted,
        "expires_in": ttl,
        "issuer": issuer.issuer,
        "mapping": index,
    }


def _agent(template: str, claims: dict[str, Any]) -> str:
    """Fill ``{claim}`` fields from verified claims: plain short strings only, lowercased."""

    def fill(match: re.Match[str]) -> str:
        value = claims.get(match.group(1))
        if not isinstance(value, str) or not _CLAIM_VALUE.fullmatch(value):
            raise _refused(
                "agent_invalid",
                f"claim {match.group(1)!r} is missing or not a plain name for the agent template",
            )
        return value.lower()

    name = _TEMPLATE_FIELD.sub(fill, template)
    try:
        return validate_agent_name(name)
    except ValueError:
        raise _refused("agent_invalid", "the mapped agent name is not a valid agent name") from None
