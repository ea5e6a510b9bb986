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
``no_mapping``, ``agent_invalid``, ``claim_invalid``, ``replayed``, ``invalid``).

Replay protection (RFC 7519 section 4.1.7): a JWT's ``(issuer, jti)`` is
exchanged once. The engine's state store records it
(:meth:`engine.state.SQLiteStore.claim_jti`, one ``BEGIN IMMEDIATE``
transaction) only after the signature and every claim verified and a mapping
matched, and before the token is minted; so two concurrent exchanges of one JWT,
in any processes of one home, cannot both succeed, and the record survives
restarts. It is kept until the JWT's ``exp`` plus :data:`policy.MAX_LEEWAY_SECONDS`
(the largest leeway an issuer may be given, so raising a leeway later cannot
revive a JWT) and pruned after. A JWT without ``jti`` is refused
(``claim_missing``) unless its issuer's ``require_jti`` is false.

Every exchange that reaches :meth:`TokenExchange.exchange`, minted or refused,
is appended to the signed call log (engine/calllog.py) before the answer is
given: agent ``(exchange)``, tool ``token_exchange``, and as arguments the
channel, the verified issuer, ``sub`` and ``jti`` (or, for a JWT that did not
verify, its ``iss``, ``sub``, ``jti`` and ``alg`` bounded and marked under
``unverified``), the mapping and the minted token's agent, id, expiry and scope.
Neither the JWT nor the minted token is ever written. If the entry cannot be
written, the exchange fails with ``internal_error`` and returns no token.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

import policy
from engine.admin import operator
from engine.audit import calllog, provenance, redact
from engine.auth.agents import validate_agent_name
from engine.errors import ChitError, TokenError
from engine.service.policyfile import load_policy
from engine.state.sqlite import SQLiteStore, open_store

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "CHANNELS",
    "GRANT_TYPE",
    "JWT_TOKEN_TYPE",
    "MAX_JTI_CHARS",
    "MAX_JWT_CHARS",
    "TokenExchange",
    "exchange",
]

logger = logging.getLogger("chit.exchange")

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105
MAX_JWT_CHARS = 16_384
"""Longest subject token accepted."""

MAX_JTI_CHARS = 256
"""Longest ``jti`` accepted (a UUID has 36 characters); a longer one is ``claim_invalid``."""
CHANNELS: Final = frozenset({"cli", "token_endpoint"})
"""How an exchange arrived, as the call log records it (``via``)."""

MAX_KEY_FILE_BYTES = 1 << 20
_REQUIRED = ["iss", "aud", "exp", "iat"]
_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CLAIM_VALUE = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
_PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


def _refused(reason: str, message: str, **hints: Any) -> ChitError:
    return ChitError("exchange_refused", message, reason=reason, **hints)


@dataclass
class _Facts:
    """What one exchange established before it ended, for its call-log entry."""

    policy_hash: str = "-"
    unverified: dict[str, str] | None = None  # bounded, from a JWT that did not verify
    verified: dict[str, Any] | None = None  # issuer, sub, jti once everything verified
    mapping: int | None = None
    claimed: tuple[str, str] | None = None  # (issuer, jti) recorded in the replay cache
    minted: dict[str, Any] | None = None  # agent, token id, expiry, scope; never the text


class TokenExchange:
    """The token exchange of one chit home: verify a JWT, mint a root token, log it.

    One instance serves any number of exchanges from any number of threads (the
    state store keeps one SQLite connection per thread). ``chit exchange`` makes
    one with channel ``cli``; ``chit engine serve`` one with channel
    ``token_endpoint`` for ``POST /token``.

    Args:
        home: The chit home (keyring, ``policy.toml``, the issuers' key files,
            ``state.db``).
        channel: How exchanges arrive, one of :data:`CHANNELS`; recorded as
            ``via`` in each call-log entry.

    Raises:
        ValueError: If ``channel`` is not one of :data:`CHANNELS`.
        sqlite3.Error: If the state store cannot be opened.
    """

    def __init__(self, home: str | os.PathLike[str], *, channel: str = "cli") -> None:
        if channel not in CHANNELS:
            raise ValueError(f"channel must be one of {sorted(CHANNELS)}")
        self._home = Path(home)
        self._channel = channel
        self._store: SQLiteStore = open_store(home)
        self._signer = calllog.LogSigner(home)

    def __repr__(self) -> str:
        return f"TokenExchange(channel={self._channel!r})"

    def __call__(self, subject_token: str) -> dict[str, Any]:
        """Same as :meth:`exchange` at the current time (the ``POST /token`` hook)."""
        return self.exchange(subject_token)

    def exchange(self, subject_token: str, *, now: int | None = None) -> dict[str, Any]:
        """Verify an identity provider's JWT and mint the root token its mapping grants.

        RFC 8693 token exchange with a JWT subject token (RFC 7519), verified as
        the module docstring says; each ``(issuer, jti)`` is exchanged once.
        The attempt is in the call log before this returns or raises.

        Args:
            subject_token: The JWT, compact serialisation (at most
                :data:`MAX_JWT_CHARS` characters).
            now: Issue time of the chit token and time of the log entry, unix
                seconds (default: the clock). The JWT's own times, and the
                replay cache's, follow the clock, as pyjwt checks them.

        Returns:
            ``{"token", "token_id", "agent", "key_id", "expires_at",
            "expires_in", "issuer", "mapping"}`` where ``mapping`` is the
            winning mapping's index and ``expires_in`` the lifetime in seconds.

        Raises:
            ChitError: A refusal (``exchange_refused`` with ``reason``,
                ``token_invalid_signature``, ``token_expired``,
                ``token_not_yet_valid``), or ``internal_error`` if the call log
                cannot be written (then no token is returned).
            ConfigurationError: If the keyring or policy is unusable (recorded
                as ``failed`` when the log can still be written).
        """
        issued = int(time.time()) if now is None else now
        facts = _Facts()
        try:
            minted = self._exchange(subject_token, issued, facts)
        except ChitError as exc:
            self._release(facts)
            self._record(facts, issued, exc)
            raise
        except Exception:
            # The keyring, the policy or the store failed, or a bug: nothing is
            # returned; record it if the log can still be written, then re-raise.
            self._release(facts)
            try:
                self._record(facts, issued, None, failed=True)
            except ChitError:
                pass  # already logged by _record; the original error matters more
            raise
        try:
            self._record(facts, issued, None)
        except ChitError:
            self._release(facts)  # the token is dropped unseen: the JWT may be retried
            raise
        return minted

    def _exchange(self, subject_token: str, issued: int, facts: _Facts) -> dict[str, Any]:
        if not isinstance(subject_token, str) or not subject_token.strip():
            raise _refused("malformed", "the subject token is empty")
        text = subject_token.strip()
        if len(text) > MAX_JWT_CHARS:
            raise _refused("malformed", f"the subject token exceeds {MAX_JWT_CHARS} characters")
        pol = load_policy(self._home)
        facts.policy_hash = provenance.policy_hash(pol)
        try:
            header = jwt.get_unverified_header(text)
            untrusted = jwt.decode(text, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise _refused("malformed", "the subject token is not a JWT") from None
        facts.unverified = _unverified(header, untrusted)
        untrusted_iss = untrusted.get("iss")
        issuer = next((i for i in pol.issuers if i.issuer == untrusted_iss), None)
        if issuer is None:
            raise _refused("unknown_issuer", "the token's issuer is not configured in the policy")
        if header.get("alg") not in issuer.algorithms:
            raise _refused(
                "algorithm", "the token's algorithm is not one this issuer is configured with",
                allowed=list(issuer.algorithms),
            )
        key = _key_for(self._home, issuer, header.get("kid"))
        claims = _verify(text, key, issuer)
        # From here on the claims are the issuer's own: signature, iss, aud, exp
        # and iat verified.
        facts.unverified = None
        facts.verified = {
            "issuer": issuer.issuer, "sub": claims.get("sub"), "jti": claims.get("jti"),
        }
        jti = _jti(issuer, claims)
        index, mapping = _mapping(issuer, claims)
        facts.mapping = index
        agent = _agent(mapping.agent, claims)
        ttl = min(
            mapping.max_ttl_seconds,
            pol.limits.token_lifetime_seconds,
            int(claims["exp"]) - issued,
        )
        if ttl <= 0:
            raise TokenError("token_expired", "the subject token has expired")
        if jti is not None:
            # Claimed before minting, in one transaction: of two exchanges of one
            # JWT, however concurrent, exactly one gets past this line.
            keep_until = int(claims["exp"]) + policy.MAX_LEEWAY_SECONDS
            if not self._store.claim_jti(
                issuer.issuer, jti, keep_until=keep_until, now=int(time.time())
            ):
                raise _refused("replayed", "this JWT has already been exchanged (its jti)")
            facts.claimed = (issuer.issuer, jti)
        ops = list(mapping.ops)
        try:
            minted = operator.mint_token(
                self._home,
                agent=agent,
                operations=ops,
                paths=list(mapping.paths),
                ttl_seconds=ttl,
                delegable="sub-token:issue" in ops,
                now=issued,
            )
        except ValueError as exc:
            raise _refused("agent_invalid", f"the mapping cannot mint: {exc}") from None
        facts.minted = {
            "agent": minted["agent"],
            "token_id": minted["token_id"],
            "key_id": minted["key_id"],
            "expires_at": minted["expires_at"],
            "ops": ops,
            "paths": list(mapping.paths),
            "delegable": "sub-token:issue" in ops,
        }
        return {
            **minted,
            "expires_in": ttl,
            "issuer": issuer.issuer,
            "mapping": index,
        }

    def _release(self, facts: _Facts) -> None:
        """Forget this exchange's replay-cache entry: it returns no token."""
        if facts.claimed is None:
            return
        try:
            self._store.release_jti(*facts.claimed)
        except Exception:
            logger.exception("a failed exchange's jti could not be released; it stays used")
        facts.claimed = None

    def _record(
        self, facts: _Facts, when: int, error: ChitError | None, *, failed: bool = False
    ) -> None:
        """Append the exchange to the call log.

        Raises:
            ChitError: ``internal_error`` if the entry cannot be written.
        """
        arguments: dict[str, Any] = {"via": self._channel}
        if facts.verified is not None:
            arguments.update(facts.verified)
        if facts.unverified is not None:
            arguments["unverified"] = facts.unverified
        if facts.mapping is not None:
            arguments["mapping"] = facts.mapping
        if error is not None:
            for hint in ("reason", "claim"):
                if hint in error.hints:
                    arguments[hint] = error.hints[hint]
        if facts.minted is not None and error is None and not failed:
            arguments["minted"] = facts.minted
        if failed or (error is not None and error.code == "internal_error"):
            decision, code = "failed", "internal_error"
        elif error is not None:
            decision, code = "refused", error.code
        else:
            decision, code = "allowed", None
        record = calllog.CallRecord(
            time=when,
            agent=calllog.EXCHANGE_AGENT,
            chain=(),
            session="-",
            tool=calllog.EXCHANGE_TOOL,
            arguments=redact.redact_arguments(arguments),
            decision=decision,
            code=code,
            policy_hash=facts.policy_hash,
            catalog_hash=None,
        )
        try:
            calllog.append(self._store, self._signer, record)
        except Exception:
            logger.exception("the call log could not be written; run `chit audit log verify`")
            raise ChitError(
                "internal_error",
                "the engine could not record this exchange; no token was issued",
            ) from None


def exchange(
    home: str | os.PathLike[str],
    subject_token: str,
    *,
    now: int | None = None,
    channel: str = "cli",
) -> dict[str, Any]:
    """Exchange one JWT: :meth:`TokenExchange.exchange` on a fresh :class:`TokenExchange`.

    Args:
        home: The chit home.
        subject_token: The JWT, compact serialisation.
        now: Issue time of the chit token, unix seconds (default: the clock).
        channel: Recorded as ``via`` in the call log (:data:`CHANNELS`).

    Returns:
        As :meth:`TokenExchange.exchange`.

    Raises:
        ChitError: A refusal, or ``internal_error`` if the call log cannot be written.
        ConfigurationError: If the keyring or policy is unusable.
        ValueError: If ``channel`` is unknown.
    """
    return TokenExchange(home, channel=channel).exchange(subject_token, now=now)


def _unverified(header: dict[str, Any], claims: dict[str, Any]) -> dict[str, str]:
    """The attacker-chosen fields worth logging, each bounded like a tool name."""
    found = {"alg": header.get("alg"), **{k: claims.get(k) for k in ("iss", "sub", "jti")}}
    return {k: redact.redact_label(v) for k, v in found.items() if v is not None}


def _jti(issuer: policy.Issuer, claims: dict[str, Any]) -> str | None:
    """The verified ``jti``; ``None`` only if absent and the issuer does not require one."""
    if "jti" not in claims:
        if issuer.require_jti:
            raise _refused(
                "claim_missing",
                "the subject token lacks the 'jti' claim, so it could be replayed",
                claim="jti",
            )
        return None
    value = claims["jti"]
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_JTI_CHARS:
        raise _refused(
            "claim_invalid", f"the 'jti' claim must be text of 1 to {MAX_JTI_CHARS} characters",
            claim="jti",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _refused("claim_invalid", "the 'jti' claim is not valid text", claim="jti") from None
    return value


def _mapping(issuer: policy.Issuer, claims: dict[str, Any]) -> tuple[int, policy.IssuerMapping]:
    """The first mapping whose claims all equal the token's (its index and itself)."""
    for index, mapping in enumerate(issuer.mappings):
        if all(claims.get(k) == v for k, v in mapping.claims.items()):
            return index, mapping
    raise _refused("no_mapping", "no mapping of this issuer matches the token's claims")


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
    except jwt.exceptions.InvalidJTIError:
        raise _refused("claim_invalid", "the 'jti' claim must be text", claim="jti") from None
    except jwt.exceptions.InvalidSubjectError:
        raise _refused("claim_invalid", "the 'sub' claim must be text", claim="sub") from None
    except (jwt.PyJWTError, ValueError, TypeError, OverflowError):
        # OverflowError: a signed time claim of Infinity, on pyjwt versions that
        # convert it with int() unguarded.
        raise _refused("invalid", "the subject token does not verify") from None
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
            raise _refused(
                "claim_invalid", f"the {name!r} claim must be a NumericDate (seconds since "
                "the epoch, a non-negative number)", claim=name,
            )
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
