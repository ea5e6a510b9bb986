"""Token exchange (docs/exchange.md): real keys generated here, real JWTs signed with pyjwt."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from starlette.testclient import TestClient

import policy
from engine import exchange as ex
from engine import operator
from engine import token as tokens
from engine.errors import ChitError
from engine.keys import Keyring
from gateway import engine_server

ISS_RSA = "https://ci.example.com"
ISS_ED = "https://idp.example.org"
AUD = "chit://example"


def _pem(key: Any) -> bytes:
    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


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
"""


@pytest.fixture
def home(tmp_path: Path, rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey) -> Path:
    home = tmp_path / "home"
    operator.init_home(home)
    (home / "policy.toml").write_text(POLICY)
    (home / "issuers").mkdir()
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    jwk.update(kid="ci-1", use="sig", alg="RS256")
    (home / "issuers" / "ci.jwks").write_text(json.dumps({"keys": [jwk]}))
    (home / "issuers" / "idp.pem").write_bytes(_pem(ed_key))
    return home


def _claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": ISS_RSA, "aud": AUD, "iat": now, "exp": now + 1800, "sub": "repo:acme/app",
        "repository": "acme/app", "repository_owner": "Acme", "ref": "refs/heads/main",
    }
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def _ci_jwt(key: rsa.RSAPrivateKey, **over: Any) -> str:
    return jwt.encode(_claims(**over), key, algorithm="RS256", headers={"kid": "ci-1"})


def _refusal(home: Path, text: str) -> ChitError:
    with pytest.raises(ChitError) as info:
        ex.exchange(home, text)
    return info.value


def _verified(home: Path, token: str) -> tokens.VerifiedToken:
    ring = Keyring(home)
    return tokens.verify_at_time(token, ring.lookup, now=int(time.time()))


def test_rs256_from_a_jwks_mints_by_the_first_matching_mapping(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    info = ex.exchange(home, _ci_jwt(rsa_key))
    assert info["agent"] == "ci-acme"  # template filled from a verified claim, lowercased
    assert info["mapping"] == 0
    assert 895 <= info["expires_in"] <= 900
    described = tokens.describe(_verified(home, info["token"]))
    assert described["agent"] == "ci-acme"
    assert sorted(described["operations"]) == ["commit", "read", "write"]
    assert described["path_scopes"] == [["src/**"]]


def test_eddsa_from_a_pem_file(home: Path, ed_key: ed25519.Ed25519PrivateKey) -> None:
    text = jwt.encode(_claims(iss=ISS_ED), ed_key, algorithm="EdDSA")
    info = ex.exchange(home, text)
    assert info["agent"] == "people-bot"
    assert info["issuer"] == ISS_ED


def test_second_mapping_and_lifetime_capped_by_policy_and_jwt_exp(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    # mapping 1 allows 7200 s; the policy caps at 3600
    later = int(time.time()) + 5000
    info = ex.exchange(home, _ci_jwt(rsa_key, ref="refs/heads/feature", exp=later))
    assert info["agent"] == "ci-readonly" and info["mapping"] == 1
    assert 3595 <= info["expires_in"] <= 3600
    # the JWT's own expiry caps it further
    info = ex.exchange(home, _ci_jwt(rsa_key, ref="x", exp=int(time.time()) + 120))
    assert 115 <= info["expires_in"] <= 120
    assert info["expires_at"] <= int(time.time()) + 120


def test_alg_none_is_refused(home: Path) -> None:
    text = jwt.encode(_claims(), None, algorithm="none")
    err = _refusal(home, text)
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "algorithm")


def test_hs256_keyed_with_the_public_key_is_refused(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    # the classic confusion: HMAC keyed with the published public key. pyjwt refuses
    # to encode with a PEM key, so sign by hand.
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    import hashlib
    import hmac

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "ci-1"}).encode())
    body = b64(json.dumps(_claims()).encode())
    tag = hmac.new(_pem(rsa_key), f"{header}.{body}".encode(), hashlib.sha256).digest()
    err = _refusal(home, f"{header}.{body}.{b64(tag)}")
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "algorithm")


def test_wrong_audience(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    err = _refusal(home, _ci_jwt(rsa_key, aud="someone-else"))
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "audience")


def test_expired_beyond_leeway(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    now = int(time.time())
    err = _refusal(home, _ci_jwt(rsa_key, iat=now - 600, exp=now - 60))
    assert err.code == "token_expired"


@pytest.mark.parametrize("claim", ["iat", "exp", "aud"])
def test_required_claims(home: Path, rsa_key: rsa.RSAPrivateKey, claim: str) -> None:
    err = _refusal(home, _ci_jwt(rsa_key, **{claim: None}))
    assert (err.code, err.hints["reason"], err.hints["claim"]) == (
        "exchange_refused", "claim_missing", claim
    )


def test_unknown_issuer(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    err = _refusal(home, _ci_jwt(rsa_key, iss="https://evil.example"))
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "unknown_issuer")


def test_signed_by_another_key(home: Path) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    err = _refusal(home, _ci_jwt(other))
    assert err.code == "token_invalid_signature"


def test_unknown_kid(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    text = jwt.encode(_claims(), rsa_key, algorithm="RS256", headers={"kid": "nope"})
    err = _refusal(home, text)
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "unknown_key")


def test_no_mapping_matches(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    err = _refusal(home, _ci_jwt(rsa_key, repository="acme/other"))
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "no_mapping")


def test_template_claim_must_be_a_plain_name(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    err = _refusal(home, _ci_jwt(rsa_key, repository_owner="../main"))
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "agent_invalid")


def test_garbage_is_malformed(home: Path) -> None:
    err = _refusal(home, "not-a-jwt")
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "malformed")


@pytest.mark.parametrize(
    ("snippet", "where"),
    [
        ('algorithms = ["HS256"]', "issuers[0].algorithms[0]"),
        ('algorithms = ["none"]', "issuers[0].algorithms[0]"),
        ("leeway_seconds = 301", "issuers[0].leeway_seconds"),
    ],
)
def test_policy_refuses_unsafe_issuer_config(snippet: str, where: str) -> None:
    text = f"""
[[issuers]]
issuer = "x"
audience = "y"
jwks_file = "k.jwks"
{snippet}
{'algorithms = ["RS256"]' if not snippet.startswith("algorithms") else ""}
"""
    with pytest.raises(policy.PolicyError) as info:
        policy.load(text)
    assert where in str(info.value)


def test_policy_refuses_key_file_outside_home() -> None:
    text = """
[[issuers]]
issuer = "x"
audience = "y"
algorithms = ["RS256"]
jwks_file = "../etc/keys.jwks"
"""
    with pytest.raises(policy.PolicyError):
        policy.load(text)


class _NoEngine:
    def offer(self, token: str) -> dict[str, Any]:
        raise AssertionError

    def invoke(self, *a: Any, **kw: Any) -> dict[str, Any]:
        raise AssertionError


def _client(home: Path) -> TestClient:
    app = engine_server.create_app(
        _NoEngine(), exchange=lambda text: ex.exchange(home, text)  # type: ignore[arg-type]
    )
    return TestClient(app)


def _form(subject: str, **over: str) -> dict[str, str]:
    return {
        "grant_type": ex.GRANT_TYPE,
        "subject_token": subject,
        "subject_token_type": ex.JWT_TOKEN_TYPE,
        **over,
    }


def test_http_token_endpoint(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    client = _client(home)
    answer = client.post("/token", data=_form(_ci_jwt(rsa_key)))
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["issued_token_type"] == ex.ACCESS_TOKEN_TYPE
    assert doc["token_type"] == "Bearer"
    assert 895 <= doc["expires_in"] <= 900
    assert answer.headers["cache-control"] == "no-store"
    assert tokens.describe(_verified(home, doc["access_token"]))["agent"] == "ci-acme"

    refused = client.post("/token", data=_form(_ci_jwt(rsa_key, aud="other")))
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_request"
    assert refused.json()["chit_error"] == "exchange_refused"
    assert refused.json()["reason"] == "audience"

    wrong_grant = client.post("/token", data=_form("x", grant_type="password"))
    assert wrong_grant.json()["error"] == "unsupported_grant_type"
    wrong_type = client.post("/token", data=_form("x", subject_token_type="urn:x"))
    assert wrong_type.json()["error"] == "invalid_request"
    as_json = client.post("/token", json=_form("x"))
    assert as_json.status_code == 400
    repeated = client.post(
        "/token",
        content=f"grant_type={ex.GRANT_TYPE}&grant_type={ex.GRANT_TYPE}",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert repeated.json()["error"] == "invalid_request"


def test_http_token_endpoint_absent_without_exchange() -> None:
    app = engine_server.create_app(_NoEngine())  # type: ignore[arg-type]
    assert TestClient(app).post("/token", data=_form("x")).status_code == 404


def test_cli_exchange(home: Path, rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    jwt_file = tmp_path / "ci.jwt"
    jwt_file.write_text(_ci_jwt(rsa_key) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--home", str(home), "exchange",
         "--jwt", str(jwt_file), "--json"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["agent"] == "ci-acme"
    jwt_file.write_text(_ci_jwt(rsa_key, iss="https://evil.example"))
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--home", str(home), "exchange",
         "--jwt", str(jwt_file)],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 2
    assert "exchange_refused" in done.stderr
