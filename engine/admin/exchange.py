"""Token exchange: a JWT from the organisation's identity provider for a root chit token.

:class:`TokenExchange` runs the RFC 8693 exchange of docs/exchange.md: the JWT
verified and mapped (engine/auth/issuers.py), its ``(issuer, jti)`` claimed once
in the state store's replay cache, the token minted with the newest root key,
and every attempt, minted or refused, in the signed call log before the answer.
Its refusals: docs/exchange.md, *Refusals*, and docs/errors.md.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import policy
from engine.admin.tokens import mint_token
from engine.audit import calllog, provenance, redact, tlog
from engine.auth import issuers
from engine.errors import ChitError, TokenError
from engine.limits import LIMITS
from engine.service.policyfile import load_policy
from engine.state import Store, open_store

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "CHANNELS",
    "GRANT_TYPE",
    "JWT_TOKEN_TYPE",
    "TokenExchange",
    "exchange",
]

logger = logging.getLogger("chit.exchange")

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105

CHANNELS: Final = frozenset({"cli", "token_endpoint"})
"""How an exchange arrived, as the call log records it (``via``)."""


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

    One instance serves any number of exchanges from any number of threads.
    ``chit exchange`` makes one with channel ``cli``; ``chit engine serve`` one
    with channel ``token_endpoint`` for ``POST /token``, on its engine's store.

    Args:
        home: The chit home (keyring, ``policy.toml``, the issuers' key files).
        channel: How exchanges arrive, one of :data:`CHANNELS`; recorded as
            ``via`` in each call-log entry.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).
        store: A state store to use (an engine's, which stays open after
            :meth:`close`) instead of opening one.

    Raises:
        ValueError: If ``channel`` is not one of :data:`CHANNELS`.
        ConfigurationError: If the state URL is unusable.
        StoreError: If the state store cannot be opened.
    """

    def __init__(
        self,
        home: str | os.PathLike[str],
        *,
        channel: str = "cli",
        state: str | None = None,
        store: Store | None = None,
    ) -> None:
        if channel not in CHANNELS:
            raise ValueError(f"channel must be one of {sorted(CHANNELS)}")
        self._home = Path(home)
        self._channel = channel
        self._owned = store is None
        self._store: Store = open_store(home, state) if store is None else store
        self._signer = calllog.LogSigner(home)

    def __repr__(self) -> str:
        return f"TokenExchange(channel={self._channel!r})"

    def close(self) -> None:
        """Close the state store this exchange opened (not one it was given); idempotent."""
        if self._owned:
            self._store.close()

    def __call__(self, subject_token: str) -> dict[str, Any]:
        """Same as :meth:`exchange` at the current time (the ``POST /token`` hook)."""
        return self.exchange(subject_token)

    def exchange(self, subject_token: str, *, now: int | None = None) -> dict[str, Any]:
        """Verify an identity provider's JWT and mint the root token its mapping grants.

        RFC 8693 token exchange with a JWT subject token (RFC 7519), verified as
        docs/exchange.md (*Flow*) says; each ``(issuer, jti)`` is exchanged once.
        The attempt is in the call log before this returns or raises.

        Args:
            subject_token: The JWT, compact serialisation (at most
                ``LIMITS.jwt_chars`` characters).
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
            raise issuers.refused("malformed", "the subject token is empty")
        text = subject_token.strip()
        if len(text) > LIMITS.jwt_chars:
            raise issuers.refused(
                "malformed", f"the subject token exceeds {LIMITS.jwt_chars} characters"
            )
        pol = load_policy(self._home)
        facts.policy_hash = provenance.policy_hash(pol)
        header, untrusted = issuers.read_unverified(text)
        facts.unverified = _unverified(header, untrusted)
        issuer = issuers.select_issuer(pol.issuers, header, untrusted)
        key = issuers.issuer_key(self._home, issuer, header.get("kid"))
        claims = issuers.verify_jwt(text, key, issuer)
        # From here on the claims are the issuer's own: signature, iss, aud, exp
        # and iat verified.
        facts.unverified = None
        facts.verified = {
            "issuer": issuer.issuer, "sub": claims.get("sub"), "jti": claims.get("jti"),
        }
        jti = issuers.verified_jti(issuer, claims)
        index, mapping = issuers.select_mapping(issuer, claims)
        facts.mapping = index
        agent = issuers.agent_name(mapping.agent, claims)
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
                raise issuers.refused("replayed", "this JWT has already been exchanged (its jti)")
            facts.claimed = (issuer.issuer, jti)
        ops = list(mapping.ops)
        try:
            minted = mint_token(
                self._home,
                agent=agent,
                operations=ops,
                paths=list(mapping.paths),
                ttl_seconds=ttl,
                delegable="sub-token:issue" in ops,
                now=issued,
                repos=None if mapping.repos is None else list(mapping.repos),
            )
        except ValueError as exc:
            raise issuers.refused("agent_invalid", f"the mapping cannot mint: {exc}") from None
        facts.minted = {
            "agent": minted["agent"],
            "token_id": minted["token_id"],
            "key_id": minted["key_id"],
            "expires_at": minted["expires_at"],
            "ops": ops,
            "paths": list(mapping.paths),
            "delegable": "sub-token:issue" in ops,
            **({} if mapping.repos is None else {"repos": list(mapping.repos)}),
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
            tlog.append(self._store, [record], self._signer, now=when, checkpoint_entries=1)
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
    exchanger = TokenExchange(home, channel=channel)
    try:
        return exchanger.exchange(subject_token, now=now)
    finally:
        exchanger.close()


def _unverified(header: dict[str, Any], claims: dict[str, Any]) -> dict[str, str]:
    """The attacker-chosen fields worth logging, each bounded like a tool name."""
    found = {"alg": header.get("alg"), **{k: claims.get(k) for k in ("iss", "sub", "jti")}}
    return {k: redact.redact_label(v) for k, v in found.items() if v is not None}
