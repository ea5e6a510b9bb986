"""Token exchange (docs/exchange.md): real keys generated here, real JWTs signed with pyjwt."""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from starlette.testclient import TestClient

import policy
from engine import admin
from engine.admin import exchange as ex
from engine.audit import provenance
from engine.auth import signkeys
from engine.auth import verify as tokens
from engine.auth.rootkeys import Keyring
from engine.errors import ChitError, ConfigurationError
from engine.limits import LIMITS
from engine.service.policyfile import load_policy
from engine.state import MAX_JTI_KEEP_UNTIL
from engine.state.sqlite import open_store
from gateway import engine_server
from tests import jwt_issuer as idp
from tests.jwt_issuer import ISS_ED, ISS_LAX, ISS_RSA


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return idp.rsa_key()


@pytest.fixture(scope="module")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return idp.ed_key()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    admin.init_home(home)
    idp.trust(home)
    return home


_pem = idp.pem
_claims = idp.claims


def _ci_jwt(key: rsa.RSAPrivateKey, **over: Any) -> str:
    return idp.ci_jwt(key, **over)


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


@pytest.mark.parametrize(("claim", "value"), [
    ("exp", "string"), ("iat", "string"), ("iat", -(10**30)), ("nbf", "string"),
])
def test_times_must_be_numeric_dates(
    home: Path, rsa_key: rsa.RSAPrivateKey, claim: str, value: str
) -> None:
    """RFC 7519 §2: exp, iat and nbf are JSON numbers; pyjwt alone takes numeric text."""
    now = int(time.time())
    forms = {"string": str(now + 300 if claim == "exp" else now - 5)}
    err = _refusal(home, _ci_jwt(rsa_key, **{claim: forms.get(value, value)}))
    assert (err.code, err.hints["reason"], err.hints["claim"]) == (
        "exchange_refused", "claim_invalid", claim
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


@pytest.mark.parametrize("text", ["eyJhbGciOiJFZERTQSJ9.\udcff.x", "eyJ\u00e9.e30.x"])
def test_non_ascii_subject_token_is_malformed(home: Path, text: str) -> None:
    # Threat: a subject token holding a byte that is not UTF-8 (stdin read with
    # surrogateescape, as in the POSIX locale) escaped the exchange as a
    # UnicodeEncodeError instead of a refusal with a stable code (found by
    # fuzz/fuzz_jwt.py).
    err = _refusal(home, text)
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
    def offer(self, token: str, *, repo: str | None = None) -> dict[str, Any]:
        raise AssertionError

    def invoke(self, *a: Any, **kw: Any) -> dict[str, Any]:
        raise AssertionError


def _client(home: Path) -> TestClient:
    app = engine_server.create_app(
        _NoEngine(),  # type: ignore[arg-type]
        exchange=ex.TokenExchange(home, channel="token_endpoint"),
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

    # RFC 8693's optional parameters: honoured or refused, never silently dropped.
    narrowing = client.post("/token", data=_form(_ci_jwt(rsa_key), scope="read"))
    assert (narrowing.status_code, narrowing.json()["error"]) == (400, "invalid_scope")
    as_jwt = client.post("/token", data=_form(
        _ci_jwt(rsa_key), requested_token_type="urn:ietf:params:oauth:token-type:jwt"))
    assert (as_jwt.status_code, as_jwt.json()["error"]) == (400, "invalid_request")
    targeted = client.post("/token", data=_form(
        _ci_jwt(rsa_key), requested_token_type=ex.ACCESS_TOKEN_TYPE,
        resource="https://chit.example.com/mcp"))
    assert targeted.status_code == 200, targeted.text

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


def test_http_token_endpoint_with_an_unusable_policy_or_a_huge_body(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    client = _client(home)
    huge = client.post("/token", content=b"grant_type=x", headers={
        "content-type": "application/x-www-form-urlencoded", "content-length": str(10**12)})
    assert huge.status_code == 413
    (home / "policy.toml").write_text("this is [not toml\n")
    broken = client.post("/token", data=_form(_ci_jwt(rsa_key)))
    assert broken.status_code == 500
    assert broken.json()["error"] == "server_error"
    assert broken.json()["chit_error"] == "internal_error"
    assert "access_token" not in broken.json()


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
    assert done.returncode == 3  # refused
    assert "exchange_refused" in done.stderr


# --- replay protection (jti) ---------------------------------------------------------


def _exchange_entries(home: Path) -> list[dict[str, Any]]:
    return [e for e in admin.call_log_entries(home) if e["tool"] == "token_exchange"]


def _log_verifies(home: Path) -> None:
    public = signkeys.load_public_keys(admin.export_public(home))
    report = admin.verify_call_log(home, public)
    assert report["ok"], report["findings"]


def _jti_rows(home: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        return db.execute(
            "SELECT issuer, jti, keep_until FROM exchange_jti ORDER BY issuer, jti"
        ).fetchall()


def test_a_jwt_is_exchanged_once(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    """Threat: a JWT copied from a CI log or a proxy, replayed for more tokens."""
    text = _ci_jwt(rsa_key, jti="run-42")
    first = ex.exchange(home, text)
    err = _refusal(home, text)
    assert (err.code, err.hints["reason"]) == ("exchange_refused", "replayed")
    assert first["token"] not in err.message and text not in err.message
    # Whitespace around the same JWT is the same JWT.
    err = _refusal(home, f"  {text}\n")
    assert err.hints["reason"] == "replayed"
    # Another JWT with another jti is another exchange; the same jti of another
    # issuer is another entry: (issuer, jti) is the key.
    assert ex.exchange(home, _ci_jwt(rsa_key, jti="run-43"))["agent"] == "ci-acme"
    assert ex.exchange(home, idp.ed_jwt(jti="run-42"))["agent"] == "people-bot"
    exp = jwt.decode(text, options={"verify_signature": False})["exp"]
    assert (ISS_RSA, "run-42", exp + policy.MAX_LEEWAY_SECONDS) in _jti_rows(home)


def test_the_cache_holds_across_processes_and_restarts(
    home: Path, rsa_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    """Threat: replaying a JWT to a second engine process, or after a restart."""
    text = _ci_jwt(rsa_key)
    jwt_file = tmp_path / "ci.jwt"
    jwt_file.write_text(text)
    argv = [sys.executable, "-m", "gateway.cli", "--home", str(home), "exchange",
            "--jwt", str(jwt_file), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    # Another process, and this one with a fresh exchanger: both refuse it.
    again = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert again.returncode == 3  # refused (docs/errors.md, "Exit statuses")
    refusal = json.loads(again.stdout)  # --json: the error as JSON on stdout
    assert refusal["error"] == "exchange_refused"
    assert "already been exchanged" in refusal["message"]
    assert text not in again.stderr + again.stdout
    err = _refusal(home, text)
    assert err.hints["reason"] == "replayed"


def test_concurrent_exchanges_in_threads_mint_one_token(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    """Threat: racing many copies of one JWT so that several pass the check."""
    text = _ci_jwt(rsa_key)
    count = 8
    exchangers = [ex.TokenExchange(home, channel="token_endpoint") for _ in range(count)]
    barrier = threading.Barrier(count)
    results: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def run(exchanger: ex.TokenExchange) -> None:
        barrier.wait()
        try:
            outcome: tuple[str, Any] = ("ok", exchanger.exchange(text)["token_id"])
        except ChitError as exc:
            outcome = (exc.code, exc.hints.get("reason"))
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run, args=(e,)) for e in exchangers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == count
    assert [r[0] for r in results].count("ok") == 1, results
    assert sorted(r for r in results if r[0] != "ok") == [("exchange_refused", "replayed")] * 7
    decisions = sorted(e["decision"] for e in _exchange_entries(home))
    assert decisions == ["allowed"] + ["refused"] * 7
    _log_verifies(home)


RACER = """
import json, os, sys, time
from pathlib import Path
from engine.admin import exchange as ex
from engine.errors import ChitError
home, jwt_file, go = sys.argv[1:4]
text = Path(jwt_file).read_text()
exchanger = ex.TokenExchange(home, channel="cli")
Path(f"{go}.{os.getpid()}").write_text("ready")
while not os.path.exists(go):
    time.sleep(0.001)
try:
    print(json.dumps({"ok": exchanger.exchange(text)["token_id"]}))
except ChitError as exc:
    print(json.dumps({"error": exc.code, "reason": exc.hints.get("reason")}))
"""


def test_concurrent_exchanges_in_processes_mint_one_token(
    home: Path, rsa_key: rsa.RSAPrivateKey, tmp_path: Path
) -> None:
    """Threat: racing one JWT through several engine processes of one home."""
    jwt_file = tmp_path / "ci.jwt"
    jwt_file.write_text(_ci_jwt(rsa_key))
    go = tmp_path / "go"
    count = 4
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, str(home), str(jwt_file), str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("go.*"))) < count:
            assert time.monotonic() < deadline, "the racers did not get ready"
            assert all(r.poll() is None for r in racers), [r.communicate() for r in racers]
            time.sleep(0.01)
        go.write_text("go")
        outputs = [r.communicate(timeout=120) for r in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()
    results = [json.loads(out) for out, _err in outputs]
    assert [r.get("ok") is not None for r in results].count(True) == 1, (results, outputs)
    assert [r for r in results if "ok" not in r] == [
        {"error": "exchange_refused", "reason": "replayed"}
    ] * (count - 1)


def test_claims_are_atomic_under_contention(home: Path) -> None:
    """Threat: a check-then-insert window that lets two claimers of one jti both win."""
    count, rounds = 8, 60
    stores = [open_store(home) for _ in range(count)]
    barrier = threading.Barrier(count)
    wins: list[list[bool]] = [[] for _ in range(rounds)]
    keep = int(time.time()) + 600

    def run(store: Any) -> None:
        for n in range(rounds):
            barrier.wait()
            won = store.claim_jti("https://ci.example.com", f"jti-{n}", keep_until=keep,
                                  now=int(time.time()))
            wins[n].append(won)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [w.count(True) for w in wins] == [1] * rounds
    assert stores[0].jti_count() == rounds


def test_tokens_that_do_not_verify_never_enter_the_cache(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    """Threat: burning a victim's jti (or filling the store) with forged or refused JWTs."""
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    jti = "victim-run-7"
    refused = [
        (idp.ci_jwt(other, jti=jti), "token_invalid_signature", None),
        (_ci_jwt(rsa_key, jti=jti, iat=now - 600, exp=now - 60), "token_expired", None),
        (_ci_jwt(rsa_key, jti=jti, aud="someone-else"), "exchange_refused", "audience"),
        (_ci_jwt(rsa_key, jti=jti, iss="https://evil.example"), "exchange_refused",
         "unknown_issuer"),
        (_ci_jwt(rsa_key, jti=jti, repository="acme/other"), "exchange_refused", "no_mapping"),
        (_ci_jwt(rsa_key, jti=jti, repository_owner="../x"), "exchange_refused",
         "agent_invalid"),
    ]
    for text, code, reason in refused:
        err = _refusal(home, text)
        assert (err.code, err.hints.get("reason")) == (code, reason)
    assert _jti_rows(home) == []
    assert ex.exchange(home, _ci_jwt(rsa_key, jti=jti))["agent"] == "ci-acme"
    assert [row[:2] for row in _jti_rows(home)] == [(ISS_RSA, jti)]


def test_a_jwt_without_jti_is_refused_unless_its_issuer_allows_it(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    """Threat: a JWT that can never be recognised again, replayed until it expires."""
    err = _refusal(home, _ci_jwt(rsa_key, jti=None))
    assert (err.code, err.hints["reason"], err.hints["claim"]) == (
        "exchange_refused", "claim_missing", "jti"
    )
    # require_jti = false: accepted, and (documented) not protected against replay ...
    lax = idp.ed_jwt(iss=ISS_LAX, jti=None)
    assert ex.exchange(home, lax)["agent"] == "lax-bot"
    assert ex.exchange(home, lax)["agent"] == "lax-bot"
    # ... but a jti it does carry is still exchanged once.
    with_jti = idp.ed_jwt(iss=ISS_LAX)
    ex.exchange(home, with_jti)
    assert _refusal(home, with_jti).hints["reason"] == "replayed"


@pytest.mark.parametrize("jti", ["", "x" * (LIMITS.jti_chars + 1), 42, ["a"], {"a": 1},
                                 False, "\ud800", "a\x00b"])
def test_the_jti_is_bounded_text(home: Path, rsa_key: rsa.RSAPrivateKey, jti: Any) -> None:
    """Threat: an oversized or non-text jti that bloats the store or breaks its key.

    A NUL is refused on every store alike (PostgreSQL text cannot hold one).
    """
    err = _refusal(home, _ci_jwt(rsa_key, jti=jti))
    assert (err.code, err.hints["reason"], err.hints["claim"]) == (
        "exchange_refused", "claim_invalid", "jti"
    )
    assert _jti_rows(home) == []


def test_the_longest_jti_and_a_far_future_exp_fit(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    longest = "é" * LIMITS.jti_chars
    assert ex.exchange(home, _ci_jwt(rsa_key, jti=longest, exp=2**70))["expires_in"] <= 900
    assert _jti_rows(home) == [(ISS_RSA, longest, MAX_JTI_KEEP_UNTIL)]
    assert _refusal(home, _ci_jwt(rsa_key, jti=longest)).hints["reason"] == "replayed"


@pytest.mark.parametrize("claim", ["exp", "iat"])
def test_non_finite_times_are_refused(
    home: Path, rsa_key: rsa.RSAPrivateKey, claim: str
) -> None:
    """A signed exp or iat of Infinity or NaN is a refusal, never an engine failure."""
    for value in (float("inf"), float("nan")):
        err = _refusal(home, _ci_jwt(rsa_key, **{claim: value}))
        assert err.code in ("exchange_refused", "token_not_yet_valid"), err
    assert _jti_rows(home) == []
    assert {e["decision"] for e in _exchange_entries(home)} == {"refused"}


def test_expired_entries_are_pruned(home: Path) -> None:
    store = open_store(home)
    now = int(time.time())
    assert store.claim_jti("iss", "old", keep_until=now - 1, now=now - 100)
    assert not store.claim_jti("iss", "old", keep_until=now + 60, now=now - 50)  # still kept
    assert store.claim_jti("iss", "new", keep_until=now + 60, now=now)  # prunes "old"
    assert store.jti_count() == 1
    assert store.claim_jti("iss", "old", keep_until=now + 60, now=now)
    assert not store.claim_jti("iss", "new", keep_until=now + 60, now=now)
    assert store.claim_jti("iss", "edge", keep_until=now, now=now)
    assert not store.claim_jti("iss", "edge", keep_until=now, now=now)  # kept through keep_until
    with pytest.raises(ValueError):
        store.claim_jti("iss", "", keep_until=now, now=now)


def test_a_mint_that_fails_after_the_claim_releases_it(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    """The JWT stays usable when the engine, not the JWT, failed; nothing was issued."""
    text = _ci_jwt(rsa_key)
    root = next((home / "keys" / "root").iterdir())
    root.chmod(0o644)  # the keyring refuses a key file others can read
    try:
        with pytest.raises(ConfigurationError):
            ex.exchange(home, text)
    finally:
        root.chmod(0o600)
    assert _jti_rows(home) == []
    failed = _exchange_entries(home)[-1]
    assert (failed["decision"], failed["code"]) == ("failed", "internal_error")
    assert "minted" not in failed["arguments"]
    assert ex.exchange(home, text)["agent"] == "ci-acme"


def test_an_exchange_that_cannot_be_logged_returns_no_token(
    home: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    """Threat: tokens issued with no trace in the call log."""
    text = _ci_jwt(rsa_key)
    signing = next((home / "keys" / "signing").iterdir())
    signing.chmod(0o644)
    try:
        err = _refusal(home, text)
    finally:
        signing.chmod(0o600)
    assert err.code == "internal_error"
    assert "token" not in err.hints
    assert _exchange_entries(home) == []
    assert _jti_rows(home) == []  # released: the token was never handed out
    assert ex.exchange(home, text)["agent"] == "ci-acme"
    assert len(_exchange_entries(home)) == 1


# --- the call log ----------------------------------------------------------------------


def _stored_bytes(home: Path) -> bytes:
    blob = b"".join(
        bytes(row.entry) + bytes(row.sig) for row in open_store(home).log_rows()
    )
    for name in ("state.db", "state.db-wal"):
        if (home / name).exists():
            blob += (home / name).read_bytes()
    return blob


def test_exchanges_are_in_the_signed_call_log(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    """Threat: tokens minted from JWTs with no record of who obtained them."""
    text = _ci_jwt(rsa_key, jti="run-1", sub="repo:acme/app:ref:refs/heads/main")
    info = ex.exchange(home, text)
    _refusal(home, text)  # replayed
    forged_iss = "chit_" + "A" * 40  # attacker-chosen, token-like
    unknown = _ci_jwt(rsa_key, iss=forged_iss, sub="a b " * 100, jti="j\u202e1")
    _refusal(home, unknown)
    _refusal(home, "not-a-jwt")
    _refusal(home, _ci_jwt(rsa_key, jti=None))

    entries = _exchange_entries(home)
    assert [(e["decision"], e["code"]) for e in entries] == [
        ("allowed", None),
        ("refused", "exchange_refused"),
        ("refused", "exchange_refused"),
        ("refused", "exchange_refused"),
        ("refused", "exchange_refused"),
    ]
    ok, replay, forged, garbage, no_jti = entries
    policy_hash = provenance.policy_hash(load_policy(home))
    for entry in entries:
        assert entry["agent"] == "(exchange)" and entry["tool"] == "token_exchange"
        assert entry["session"] == "-" and entry["chain"] == []
        assert entry["catalog_hash"] is None and entry["policy_hash"] == policy_hash
        assert entry["arguments"]["via"] == "cli"
    assert ok["arguments"] == {
        "via": "cli", "issuer": ISS_RSA, "sub": "repo:acme/app:ref:refs/heads/main",
        "jti": "run-1", "mapping": 0,
        "minted": {
            "agent": "ci-acme", "token_id": info["token_id"], "key_id": info["key_id"],
            "expires_at": info["expires_at"], "ops": ["read", "write", "commit"],
            "paths": ["src/**"], "delegable": False,
        },
    }
    assert replay["arguments"] == {
        "via": "cli", "issuer": ISS_RSA, "sub": "repo:acme/app:ref:refs/heads/main",
        "jti": "run-1", "mapping": 0, "reason": "replayed",
    }
    # Nothing from a JWT that did not verify, but bounded and marked as such.
    assert forged["arguments"] == {
        "via": "cli", "reason": "unknown_issuer",
        "unverified": {"alg": "RS256", "iss": "~token-like", "sub": "~too-long",
                       "jti": "j\u202e1"},
    }
    assert garbage["arguments"] == {"via": "cli", "reason": "malformed"}
    assert no_jti["arguments"]["reason"] == "claim_missing"
    assert no_jti["arguments"]["claim"] == "jti" and no_jti["arguments"]["jti"] is None
    # Never the JWT, its signature, or the minted token.
    stored = _stored_bytes(home)
    for secret in (text, text.rsplit(".", 1)[1], unknown, info["token"],
                   info["token"].removeprefix("chit_")[:40], forged_iss):
        assert secret.encode() not in stored
    _log_verifies(home)


def test_http_token_endpoint_replay_and_log(home: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    client = _client(home)
    text = _ci_jwt(rsa_key)
    first = client.post("/token", data=_form(text))
    assert first.status_code == 200 and first.headers["pragma"] == "no-cache"
    again = client.post("/token", data=_form(text))
    assert again.status_code == 400
    assert again.json() == {
        "error": "invalid_request",
        "error_description": "this JWT has already been exchanged (its jti)",
        "chit_error": "exchange_refused",
        "reason": "replayed",
    }
    assert again.headers["cache-control"] == "no-store"
    assert [e["arguments"]["via"] for e in _exchange_entries(home)] == ["token_endpoint"] * 2
    # A request refused before the engine (no subject token) is not an exchange.
    client.post("/token", data=_form(""))
    assert len(_exchange_entries(home)) == 2
    # An exchange that cannot be logged is a server error with no token in it: a
    # row written behind the engine's back takes the next sequence number.
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db, db:
        (head,) = db.execute("SELECT size FROM call_log_tree").fetchone()
        db.execute(
            "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (?, 0, '-', x'', x'')",
            (head + 1,),
        )
    broken = client.post("/token", data=_form(_ci_jwt(rsa_key)))
    assert broken.status_code == 500
    assert broken.json()["error"] == "server_error"
    assert broken.json()["chit_error"] == "internal_error"
    assert "access_token" not in broken.json()
