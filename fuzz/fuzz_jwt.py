"""Fuzz the token exchange's JWT handling (engine/auth/issuers.py, docs/exchange.md).

A home trusts the test issuers of tests/jwt_issuer.py (RS256 with a JWKS,
EdDSA with a PEM key). The first byte picks how the rest is used:

* 0: the rest is the subject token's text, as ``POST /token`` receives it;
* 1, 2: the rest is the JWT's claims (its payload's bytes), signed by the
  EdDSA issuer's key (1) or the RS256 issuer's (2), so the checks after the
  signature (registered claims, ``jti``, the mappings, the agent name) see
  whatever claims the input holds.

Each goes through the steps of ``TokenExchange._exchange`` up to the mint:
``read_unverified``, ``select_issuer``, ``issuer_key``, ``verify_jwt``,
``verified_jti``, ``select_mapping``, ``agent_name`` and the lifetime. Checks:
every refusal is a ``ChitError`` with a stable code.
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import _harness
import atheris

with atheris.instrument_imports(include=[*_harness.INSTRUMENT, "jwt"]):
    import jwt

    import policy
    from engine.auth import issuers
    from engine.errors import ChitError
    from engine.limits import LIMITS
    from tests import jwt_issuer

_HOME = Path(tempfile.mkdtemp(prefix="chit-fuzz-jwt-"))
jwt_issuer.trust(_HOME)
_POLICY = policy.load(jwt_issuer.POLICY)
_ED_HEADER = {"alg": "EdDSA", "typ": "JWT"}
_RSA_HEADER = {"alg": "RS256", "typ": "JWT", "kid": "ci-1"}


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def _signed(header: dict[str, str], payload: bytes) -> str:
    """A compact JWT of ``payload`` exactly as given, signed with the issuer's key."""
    signing_input = _b64(json.dumps(header).encode()) + b"." + _b64(payload)
    if header["alg"] == "EdDSA":
        signature = jwt_issuer.ed_key().sign(signing_input)
    else:
        algorithm = jwt.algorithms.RSAAlgorithm(jwt.algorithms.RSAAlgorithm.SHA256)
        signature = algorithm.sign(signing_input, jwt_issuer.rsa_key())
    return (signing_input + b"." + _b64(signature)).decode("ascii")


def _exchange(text: str) -> None:
    """``TokenExchange._exchange``'s checks of ``text``, without the store and the mint."""
    text = text.strip()
    if not text or len(text) > LIMITS.jwt_chars:
        return
    header, untrusted = issuers.read_unverified(text)
    issuer = issuers.select_issuer(_POLICY.issuers, header, untrusted)
    key = issuers.issuer_key(_HOME, issuer, header.get("kid"))
    claims = issuers.verify_jwt(text, key, issuer)
    issuers.verified_jti(issuer, claims)
    _index, mapping = issuers.select_mapping(issuer, claims)
    issuers.agent_name(mapping.agent, claims)
    min(mapping.max_ttl_seconds, _POLICY.limits.token_lifetime_seconds, int(claims["exp"]))


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    mode, rest = data[0] % 3, data[1:]
    if mode == 0:
        text = _harness.text_of(rest)
    else:
        text = _signed(_ED_HEADER if mode == 1 else _RSA_HEADER, rest)
    try:
        _exchange(text)
    except ChitError:
        pass


if __name__ == "__main__":
    _harness.run(TestOneInput)
