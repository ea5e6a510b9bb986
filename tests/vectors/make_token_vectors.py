"""Regenerate tests/vectors/tokens.json (deterministic: fixed keys and block ids).

Run from the repository root: ``python tests/vectors/make_token_vectors.py``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from engine import cbor
from engine import token as t
from engine._mac import hmac_sha256

KEY = bytes(range(32))
KID = "r20261130-vectors"
NOW = 1_800_000_000
EXP = NOW + 3600


def bid(n: int) -> bytes:
    return bytes([n]) * 16


def emit(
    blocks: list[dict[str, Any]],
    *,
    key: bytes = KEY,
    kid: str = KID,
    env: dict[str, Any] | None = None,
) -> str:
    raw = [cbor.encode(b) for b in blocks]
    envelope = {
        "v": 1,
        "alg": "hmac-sha256",
        "kid": kid,
        "blocks": raw,
        "tag": t._chain(key, raw),
        **(env or {}),
    }
    return "chit_" + base64.urlsafe_b64encode(cbor.encode(envelope)).rstrip(b"=").decode()


def root(*caveats: list[Any], agent: str = "alice") -> dict[str, Any]:
    return {"id": bid(1), "agent": agent, "caveats": list(caveats)}


BASE = [["ops", ["read", "write"]], ["paths", ["src/**"]], ["exp", EXP]]


def attenuated(token: str, block: dict[str, Any]) -> str:
    parsed = t.parse(token)
    raw = cbor.encode(block)
    return t._emit(parsed.key_id, (*parsed.blocks, raw), hmac_sha256(parsed._tag, raw))


def main() -> None:
    base = emit([root(*BASE)])
    cases: list[dict[str, Any]] = [
        {
            "name": "root token",
            "token": base,
            "expect": {
                "agent": "alice",
                "operations": ["read", "write"],
                "path_scopes": [["src/**"]],
                "expires_at": EXP,
                "not_before": None,
                "delegable": False,
            },
        },
        {
            "name": "attenuated: ops and paths intersect",
            "token": attenuated(
                base,
                {
                    "id": bid(2),
                    "caveats": [
                        ["ops", ["read", "commit"]],
                        ["paths", ["src/api/**"]],
                        ["exp", EXP - 60],
                    ],
                },
            ),
            "expect": {
                "agent": "alice",
                "operations": ["read"],
                "path_scopes": [["src/**"], ["src/api/**"]],
                "expires_at": EXP - 60,
                "not_before": None,
                "delegable": False,
            },
        },
        {
            "name": "delegation flag granted by root",
            "token": emit([root(*BASE, ["deleg", True])]),
            "expect": {
                "agent": "alice",
                "operations": ["read", "write"],
                "path_scopes": [["src/**"]],
                "expires_at": EXP,
                "not_before": None,
                "delegable": True,
            },
        },
        {
            "name": "not-before in the past",
            "token": emit([root(*BASE, ["nbf", NOW - 1])]),
            "expect": {
                "agent": "alice",
                "operations": ["read", "write"],
                "path_scopes": [["src/**"]],
                "expires_at": EXP,
                "not_before": NOW - 1,
                "delegable": False,
            },
        },
        {
            "name": "wrong key",
            "token": emit([root(*BASE)], key=bytes(32)),
            "error": "token_invalid_signature",
        },
        {
            "name": "unknown key id",
            "token": emit([root(*BASE)], kid="r-other"),
            "error": "token_unknown_key",
        },
        {
            "name": "claims version 2",
            "token": emit([root(*BASE)], env={"v": 2}),
            "error": "token_unsupported_version",
        },
        {
            "name": "claims alg none",
            "token": emit([root(*BASE)], env={"alg": "none"}),
            "error": "token_unsupported_version",
        },
        {"name": "expired", "token": emit([root(["exp", NOW])]), "error": "token_expired"},
        {
            "name": "not yet valid",
            "token": emit([root(*BASE, ["nbf", NOW + 1])]),
            "error": "token_not_yet_valid",
        },
        {
            "name": "no expiry",
            "token": emit([root(["ops", ["read"]])]),
            "error": "token_expiry_required",
        },
        {
            "name": "unknown caveat",
            "token": emit([root(*BASE, ["ip", "10.0.0.1"])]),
            "error": "caveat_unknown",
        },
        {
            "name": "time as a string",
            "token": emit([root(["exp", "2027-01-01T00:00:00Z"])]),
            "error": "caveat_malformed",
        },
        {
            "name": "offline delegation block",
            "token": attenuated(
                emit([root(*BASE, ["deleg", True])]),
                {"id": bid(3), "agent": "mallory", "caveats": []},
            ),
            "error": "delegation_not_permitted",
        },
        {"name": "missing prefix", "token": base[5:], "error": "token_malformed"},
        {"name": "padding", "token": base + "=", "error": "token_malformed"},
        {
            "name": "tag truncated",
            "token": emit([root(*BASE)], env={"tag": bytes(31)}),
            "error": "token_malformed",
        },
        {
            "name": "float in a block",
            "token": "chit_"
            + base64.urlsafe_b64encode(bytes.fromhex("a5") + cbor.encode("alg")[0:0] + b"")
            .rstrip(b"=")
            .decode(),
            "error": "token_malformed",
        },
    ]
    doc = {
        "format": "chit-token/1",
        "keys": {KID: KEY.hex()},
        "now": NOW,
        "note": "Each case verifies at `now` with `keys`; `expect` is the effective "
        "grant, `error` the exact code.",
        "cases": cases,
    }
    out = Path(__file__).with_name("tokens.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
