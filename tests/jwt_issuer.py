"""An identity provider for token-exchange tests: keys generated here, JWTs signed with pyjwt.

:func:`trust` writes a policy and key files into a chit home so that it trusts
three issuers: a CI system (RS256, a JWKS), a people IdP (EdDSA, a PEM key), and
a lax one (EdDSA, ``require_jti = false``).
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

ISS_RSA = "https://ci.example.com"
ISS_ED = "https://idp.example.org"
ISS_LAX = "https://lax.example.net"
AUD = "chit://example"

POLICY = f"""
version = 1

[limits]
token_lifetime_seconds = 3600

[[issuers]]
issuer = "{ISS_RSA}"
audience = "{AUD}"
algorithms = ["RS256"]
jwks_file = "issuers/ci.jwks"
leeway_seconds = 10

[[issuers.mappings]]
claims = {{ repository = "acme/app", ref = "refs/heads/main" }}
agent = "ci-{{repository_owner}}"
ops = ["read", "write", "commit"]
paths = ["src/**"]
max_ttl_seconds = 900

[[issuers.mappings]]
claims = {{ repository = "acme/app" }}
agent = "ci-readonly"
ops = ["read"]
paths = ["**"]
max_ttl_seconds = 7200

[[issuers]]
issuer = "{ISS_ED}"
audience = "{AUD}"
algorithms = ["EdDSA"]
public_key_pem_file = "issuers/idp.pem"

[[issuers.mappings]]
agent = "people-bot"
ops = ["read"]
paths = ["docs/**"]
max_ttl_seconds = 600

[[issuers]]
issuer = "{ISS_LAX}"
audience = "{AUD}"
algorithms = ["EdDSA"]
public_key_pem_file = "issuers/idp.pem"
require_jti = false

[[issuers.mappings]]
agent = "lax-bot"
ops = ["read"]
paths = ["docs/**"]
max_ttl_seconds = 600
"""


@functools.cache
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def pem(key: Any) -> bytes:
    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def trust(home: Path, policy_text: str = POLICY) -> None:
    """Make an initialised chit home trust the test issuers."""
    (home / "policy.toml").write_text(policy_text)
    (home / "issuers").mkdir(exist_ok=True)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key().public_key()))
    jwk.update(kid="ci-1", use="sig", alg="RS256")
    (home / "issuers" / "ci.jwks").write_text(json.dumps({"keys": [jwk]}))
    (home / "issuers" / "idp.pem").write_bytes(pem(ed_key()))


def claims(**over: Any) -> dict[str, Any]:
    """CI claims with a fresh ``jti``; ``None`` removes a claim."""
    now = int(time.time())
    found: dict[str, Any] = {
        "iss": ISS_RSA, "aud": AUD, "iat": now, "exp": now + 1800, "sub": "repo:acme/app",
        "repository": "acme/app", "repository_owner": "Acme", "ref": "refs/heads/main",
        "jti": str(uuid.uuid4()),
    }
    found.update(over)
    return {k: v for k, v in found.items() if v is not None}


def ci_jwt(key: rsa.RSAPrivateKey | None = None, **over: Any) -> str:
    """An RS256 JWT from the CI issuer (``kid`` ci-1), signed by ``key`` (default: its own)."""
    return jwt.encode(claims(**over), key or rsa_key(), algorithm="RS256",
                      headers={"kid": "ci-1"})


def ed_jwt(**over: Any) -> str:
    """An EdDSA JWT from the people IdP (``iss`` may be overridden, e.g. to the lax one)."""
    return jwt.encode(claims(**{"iss": ISS_ED, **over}), ed_key(), algorithm="EdDSA")
