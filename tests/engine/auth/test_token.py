"""Token format and verification (engine/auth/token.py, verify.py): real HMAC keys, no mocks."""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.auth import cbor
from engine.auth import token as t
from engine.auth.caveats import OPERATIONS
from engine.auth.verify import VerifiedToken, describe, verify_at_time
from engine.errors import CaveatError, ChitError, MalformedDataError, TokenError

KEY = secrets.token_bytes(32)
KID = "r20261130-test"
NOW = 1_800_000_000
EXP = NOW + 900


def keys(kid: str) -> bytes | None:
    return KEY if kid == KID else None


def mint(**kw: object) -> str:
    args: dict[str, object] = {
        "agent": "alice",
        "operations": ["read", "write"],
        "paths": ["src/**"],
        "expires_at": EXP,
    }
    args.update(kw)
    return t.mint(KEY, KID, **args)  # type: ignore[arg-type]


def forge(blocks: list[dict[str, object]], *, key: bytes = KEY, kid: str = KID) -> str:
    """Build a correctly MAC'd token from arbitrary block maps (what an attacker
    holding the root key could do; used to reach the caveat checks)."""
    raw = [cbor.encode(b) for b in blocks]
    return t._emit(kid, raw, t._chain(key, raw))


def root(caveats: list[list[object]], **extra: object) -> dict[str, object]:
    return {"id": secrets.token_bytes(16), "agent": "alice", "caveats": caveats, **extra}


def code_of(token: str, now: int = NOW) -> str:
    with pytest.raises(ChitError) as info:
        verify_at_time(token, keys, now)
    return info.value.code


def test_round_trip_grants_exactly_what_was_minted() -> None:
    v = verify_at_time(mint(), keys, NOW)
    assert v.agent == "alice" and v.lane == "agent/alice"
    assert v.operations == {"read", "write"}
    assert v.path_scopes == (("src/**",),)
    assert v.expires_at == EXP and v.not_before is None and not v.delegable
    assert v.token_id == v.block_ids[0] and len(v.token_id) == 32


def test_text_form_has_prefix_and_no_padding() -> None:
    text = mint()
    assert text.startswith("chit_")
    assert "=" not in text and "+" not in text and "/" not in text


def test_tag_never_in_repr() -> None:
    parsed = t.parse(mint())
    assert parsed._tag.hex() not in repr(parsed)
    assert "_tag" not in repr(parsed)


@settings(max_examples=300)
@given(st.data())
def test_any_character_change_is_refused(data: st.DataObject) -> None:
    """Threat: tampering with the text form (one character anywhere)."""
    text = mint()
    i = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    c = data.draw(st.sampled_from(alphabet).filter(lambda ch: ch != text[i]))
    tampered = text[:i] + c + text[i + 1 :]
    with pytest.raises(ChitError):
        verify_at_time(tampered, keys, NOW)


@settings(max_examples=300)
@given(st.data())
def test_any_bit_flip_in_bytes_is_refused(data: st.DataObject) -> None:
    """Threat: tampering with the envelope bytes (one bit flipped anywhere)."""
    text = mint()
    raw = bytearray(base64.urlsafe_b64decode(text[5:] + "=" * (-len(text[5:]) % 4)))
    i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=7))
    raw[i] ^= 1 << bit
    tampered = "chit_" + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(ChitError):
        verify_at_time(tampered, keys, NOW)


def test_signature_failure_is_one_opaque_code() -> None:
    """Threat: a verification oracle. Wrong key and altered blocks look the same."""
    other = t.mint(
        secrets.token_bytes(32),
        KID,
        agent="alice",
        operations=["read"],
        paths=["**"],
        expires_at=EXP,
    )
    assert code_of(other) == "token_invalid_signature"
    parsed = t.parse(mint())
    swapped = t._emit(KID, parsed.blocks, bytes(32))
    assert code_of(swapped) == "token_invalid_signature"


def test_unknown_key_id() -> None:
    assert code_of(forge([root([["exp", EXP]])], kid="nope")) == "token_unknown_key"


def test_version_and_algorithm_come_from_configuration() -> None:
    """Threat: algorithm confusion. The token's claim never picks the algorithm."""
    parsed = t.parse(mint())
    for field, value in (("v", 2), ("alg", "none")):
        env = {
            "v": 1,
            "alg": "hmac-sha256",
            "kid": KID,
            "blocks": list(parsed.blocks),
            "tag": parsed._tag,
            field: value,
        }
        text = "chit_" + base64.urlsafe_b64encode(cbor.encode(env)).rstrip(b"=").decode()
        assert code_of(text) == "token_unsupported_version"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "chit_",
        "chit",
        "macaroon_abc",
        "chit_!!!!",
        "chit_" + "A" * 9000,
        "chit_AAAA=",
        "chit_YQ",
        "chit_oA",
    ],
)
def test_malformed_text(text: str) -> None:
    with pytest.raises(MalformedDataError) as info:
        verify_at_time(text, keys, NOW)
    assert info.value.code == "token_malformed"


def test_non_canonical_base64_refused() -> None:
    """Threat: many spellings of one token (scanner evasion, cache confusion)."""
    text = mint()
    body = text[5:]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if len(raw) % 3:  # trailing bits exist: set one
        last = body[-1]
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        bumped = alphabet[alphabet.index(last) + 1]
        assert code_of("chit_" + body[:-1] + bumped) in {
            "token_malformed",
            "token_invalid_signature",
        }


def test_expiry_required_and_enforced() -> None:
    assert code_of(forge([root([["ops", ["read"]], ["paths", ["**"]]])])) == "token_expiry_required"
    assert code_of(mint(), now=EXP) == "token_expired"
    assert code_of(mint(not_before=NOW + 10)) == "token_not_yet_valid"
    verify_at_time(mint(not_before=NOW), keys, NOW)


@pytest.mark.parametrize(
    ("caveat", "code"),
    [
        (["colour", "red"], "caveat_unknown"),
        (["exp", "2030-01-01"], "caveat_malformed"),
        (["exp", -5], "caveat_malformed"),
        (["exp", 2**40], "caveat_malformed"),
        (["exp", True], "caveat_malformed"),
        (["ops", ["read", "delete"]], "caveat_malformed"),
        (["ops", "read"], "caveat_malformed"),
        (["ops", ["read", "read"]], "caveat_malformed"),
        (["paths", ["../x"]], "caveat_malformed"),
        (["paths", ["src/a**"]], "caveat_malformed"),
        (["paths", ["a" * 2000]], "caveat_malformed"),
        (["deleg", 1], "caveat_malformed"),
        (["ops"], "caveat_malformed"),
        ("exp", "caveat_malformed"),
    ],
)
def test_caveats_fail_closed(caveat: object, code: str) -> None:
    """Threat: a caveat the engine cannot interpret being ignored (fail open)."""
    token = forge([root([["ops", ["read"]], ["paths", ["**"]], ["exp", EXP], caveat])])
    with pytest.raises(CaveatError) as info:
        verify_at_time(token, keys, NOW)
    assert info.value.code == code


def test_repeated_caveats_intersect() -> None:
    token = forge(
        [
            root(
                [
                    ["ops", ["read", "write"]],
                    ["ops", ["write", "commit"]],
                    ["paths", ["src/**"]],
                    ["paths", ["src/api/**", "docs/**"]],
                    ["exp", EXP],
                    ["exp", EXP - 100],
                ]
            )
        ]
    )
    v = verify_at_time(token, keys, NOW)
    assert v.operations == {"write"}
    assert v.expires_at == EXP - 100
    assert v.allows_path("src/api/x.py")
    assert not v.allows_path("docs/x.md") and not v.allows_path("src/other.py")


def test_no_ops_or_paths_stated_grants_nothing() -> None:
    v = verify_at_time(forge([root([["exp", EXP]])]), keys, NOW)
    assert v.operations == frozenset()
    assert not v.allows_path("README.md")


def test_offline_delegation_block_refused() -> None:
    """Threat: a holder naming a new agent offline (only the engine delegates)."""
    parsed = t.parse(mint(delegable=True, operations=["read", "sub-token:issue"]))
    block = cbor.encode({"id": secrets.token_bytes(16), "agent": "alice.mallory", "caveats": []})
    forged = t._emit(KID, (*parsed.blocks, block), t.hmac_sha256(parsed._tag, block))
    assert code_of(forged) == "delegation_not_permitted"


def test_root_block_shape_enforced() -> None:
    assert (
        code_of(forge([{"id": secrets.token_bytes(16), "caveats": [["exp", EXP]]}]))
        == "token_malformed"
    )
    assert code_of(forge([root([["exp", EXP]], extra=1)])) == "token_malformed"
    assert code_of(forge([{**root([["exp", EXP]]), "agent": "Bad Name"}])) == "token_malformed"


def test_delegation_flag_only_from_root_and_can_be_dropped() -> None:
    assert verify_at_time(mint(delegable=True), keys, NOW).delegable
    assert not verify_at_time(
        t.attenuate(mint(delegable=True), drop_delegation=True), keys, NOW
    ).delegable
    token = forge(
        [root([["exp", EXP]]), {"id": secrets.token_bytes(16), "caveats": [["deleg", True]]}]
    )
    assert not verify_at_time(token, keys, NOW).delegable


def test_revocation_of_any_block_kills_the_token() -> None:
    child = t.attenuate(mint(), operations=["read"])
    ids = verify_at_time(child, keys, NOW).block_ids
    for revoked in ids:
        with pytest.raises(TokenError) as info:
            verify_at_time(child, keys, NOW, is_revoked=lambda got, r=revoked: r in got)
        assert info.value.code == "token_revoked"


OPS = st.lists(st.sampled_from(sorted(OPERATIONS)), unique=True)
GLOBS = st.lists(
    st.sampled_from(
        ["**", "src/**", "src/*.py", "src/api/**", "docs/**", "src/api/v1.py", "src_old/**", "*"]
    ),
    min_size=1,
    max_size=3,
)
PROBES = [
    "src/a.py",
    "src/api/v1.py",
    "src/api/x/y.py",
    "docs/a.md",
    "src_old/a.py",
    "README.md",
    "src/b/c.py",
]


@settings(max_examples=200)
@given(ops=OPS, paths=GLOBS, ttl=st.integers(min_value=1, max_value=10**6), drop=st.booleans())
def test_attenuation_never_widens(ops: list[str], paths: list[str], ttl: int, drop: bool) -> None:
    """Property: whatever an attenuation asks, the result is within its parent."""
    parent = mint(operations=["read", "write"], paths=["src/**"], delegable=True)
    pv = verify_at_time(parent, keys, NOW)
    child = t.attenuate(
        parent, operations=ops, paths=paths, expires_at=NOW + ttl, drop_delegation=drop
    )
    try:
        cv = verify_at_time(child, keys, NOW)
    except TokenError as exc:
        assert exc.code == "token_expired"
        return
    assert cv.operations <= pv.operations
    assert cv.expires_at <= pv.expires_at
    assert cv.delegable <= pv.delegable
    for probe in PROBES:
        if cv.allows_path(probe):
            assert pv.allows_path(probe)
    assert cv.agent == pv.agent and cv.token_id == pv.token_id


def test_mint_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError):
        mint(agent="../x")
    with pytest.raises(ValueError):
        mint(operations=["admin"])
    with pytest.raises(ValueError):
        mint(paths="src/**")
    with pytest.raises(ValueError):
        mint(expires_at=0)


VECTORS = json.loads((Path(__file__).parents[2] / "vectors" / "tokens.json").read_text())


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_vectors(case: dict[str, Any]) -> None:
    table = {kid: bytes.fromhex(k["secret"]) for kid, k in VECTORS["keys"].items()
             if k["status"] == "active"}
    revoked = set(case.get("revoked", []))
    kwargs = {"is_revoked": lambda ids: bool(revoked & set(ids)),
              "depth_limit": case.get("depth_limit", VECTORS["depth_limit"])}
    if "error" in case:
        with pytest.raises(ChitError) as info:
            verify_at_time(case["token"], table.get, VECTORS["now"], **kwargs)
        assert info.value.code == case["error"]
        return
    v = verify_at_time(case["token"], table.get, VECTORS["now"], **kwargs)
    got = dict(describe(v))
    for key, value in case["expect"].items():
        assert got[key] == value, key
    if "chain" in case:
        assert [list(link) for link in v.chain] == case["chain"]
    for check in case.get("repo_checks", []):
        assert v.allows_repo(check["repo"], only_repo=check["only_repo"]) is check["allowed"], check


def test_vectors_cover_the_required_ground() -> None:
    cases = VECTORS["cases"]
    codes = {c["error"] for c in cases if "error" in c}
    assert len(cases) >= 40
    assert {"token_invalid_signature", "token_unknown_key", "token_unsupported_version",
            "token_expired", "token_not_yet_valid", "token_expiry_required", "token_revoked",
            "caveat_unknown", "caveat_malformed", "delegation_not_permitted",
            "delegation_depth_exceeded", "token_malformed"} <= codes
    repo_cases = [c for c in cases if c.get("repo_checks")]
    assert len(repo_cases) >= 5
    assert {r["allowed"] for c in repo_cases for r in c["repo_checks"]} == {True, False}


@settings(max_examples=500)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes_only_ever_malformed(raw: bytes) -> None:
    """Fuzz: arbitrary envelope bytes never crash or hang the parser."""
    text = "chit_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    try:
        t.parse(text)
    except MalformedDataError as exc:
        assert exc.code == "token_malformed"


@settings(max_examples=500)
@given(st.text(max_size=300))
def test_fuzz_random_text_only_ever_malformed(text: str) -> None:
    try:
        t.parse(text)
    except MalformedDataError as exc:
        assert exc.code == "token_malformed"


@settings(max_examples=300)
@given(data=st.data())
def test_fuzz_mutated_tokens_fail_cleanly(data: st.DataObject) -> None:
    """Fuzz: insert, delete or overwrite bytes of a real delegated-shape token."""
    original = mint()
    raw = bytearray(base64.urlsafe_b64decode(original[5:] + "=="))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["insert", "delete", "set"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "insert":
            raw.insert(i, data.draw(st.integers(0, 255)))
        elif op == "delete" and raw:
            del raw[i]
        elif raw:
            raw[i] = data.draw(st.integers(0, 255))
    text = "chit_" + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    try:
        verify_at_time(text, keys, NOW)
    except ChitError as exc:
        assert exc.code.startswith(("token_", "caveat_", "delegation_"))
    else:
        assert text == original  # only a mutation that restored the bytes verifies


def test_only_verification_makes_a_verified_token() -> None:
    """Threat: code granting authority by constructing the verified type directly."""
    with pytest.raises(TypeError):
        VerifiedToken(token_id="0" * 32, block_ids=("0" * 32,), key_id=KID, agent="a",
                        operations=frozenset({"write"}), path_scopes=(("**",),),
                        expires_at=EXP, not_before=None, delegable=True)


def test_clock_wrapper_verifies_now() -> None:
    import time

    from engine.auth.clock import verify

    token = t.mint(KEY, KID, agent="alice", operations=["read"], paths=["**"],
                   expires_at=int(time.time()) + 60)
    assert verify(token, keys).agent == "alice"


def test_hostile_headers_in_a_token_are_refused_quickly() -> None:
    """Threat: memory or CPU exhaustion through announced sizes and nesting."""
    for raw in (b"\x9a\xff\xff\xff\xff", b"\x81" * 5000 + b"\x00", b"\xbb" + b"\xff" * 8):
        text = "chit_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        with pytest.raises(MalformedDataError):
            verify_at_time(text, keys, NOW)


@pytest.mark.parametrize(
    "case", [c for c in VECTORS["cases"] if "error" not in c], ids=lambda c: c["name"]
)
def test_a_verified_token_is_what_its_constructor_makes(case: dict[str, Any]) -> None:
    """Threat: a verified token built another way differing from the dataclass's own.

    verify_at_time fills the frozen token's fields at once instead of through the
    generated __init__; every field, equality, hash and immutability must be the
    same as what the constructor makes from the same values.
    """
    table = {kid: bytes.fromhex(k["secret"]) for kid, k in VECTORS["keys"].items()
             if k["status"] == "active"}
    v = verify_at_time(case["token"], table.get, VECTORS["now"],
                       depth_limit=case.get("depth_limit", VECTORS["depth_limit"]))
    names = [f.name for f in dataclasses.fields(VerifiedToken)]
    built = VerifiedToken(**{name: getattr(v, name) for name in names})
    assert sorted(vars(v)) == sorted(vars(built)) == sorted(names)
    for name in names:
        assert getattr(v, name) is getattr(built, name), name
    assert v == built
    assert hash(v) == hash(built)
    assert repr(v) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.agent = "mallory"  # type: ignore[misc]
    again = verify_at_time(case["token"], table.get, VECTORS["now"],
                           depth_limit=case.get("depth_limit", VECTORS["depth_limit"]))
    assert again == v and again is not v


def _b64url_decode_reference(body: str) -> bytes:
    """The text form's base64url check as written before its fast path."""
    if not body or not body.isascii():
        raise t.malformed("the body must be base64url")
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (ValueError, TypeError):
        raise t.malformed("the body must be unpadded base64url") from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != body:
        raise t.malformed("the body is not canonical base64url")
    return raw


def _b64_outcome(decode: Any, body: str) -> tuple[str, Any]:
    try:
        return "ok", decode(body)
    except MalformedDataError as exc:
        return "refused", (exc.code, str(exc))


b64_bodies = st.one_of(
    st.binary(max_size=40).map(lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()),
    st.binary(max_size=40).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
    st.text(alphabet="AQgw-_+/=abcXYZ09 \n.\u00e9", max_size=24),
    st.text(max_size=12),
)


@settings(max_examples=3000)
@given(b64_bodies, st.data())
def test_base64url_fast_path_agrees_with_the_checks(body: str, data: st.DataObject) -> None:
    """Threat: a second spelling of a token (padding, '+' '/', trailing bits) accepted.

    The fast path must accept exactly the bodies the checks accept, with the
    same bytes, and leave every refusal (and its message) to them.
    """
    if body and data.draw(st.booleans()):  # also flip one character
        i = data.draw(st.integers(0, len(body) - 1))
        body = body[:i] + data.draw(st.sampled_from("AB-_+/=\x00")) + body[i + 1 :]
    assert _b64_outcome(t._b64url_decode, body) == _b64_outcome(_b64url_decode_reference, body)
