"""Regenerate tests/vectors/tokens.json (deterministic: fixed keys and block ids).

Run from the repository root: ``python tests/vectors/make_token_vectors.py``.

Delegation blocks are built here from the specification (docs/token-format.md),
not with the engine's ``delegate``, so the vectors check the engine against the
written algorithm.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from engine.auth import cbor

OLD_KEY, KEY, RETIRED_KEY = bytes(range(32)), bytes(range(32, 64)), bytes(range(64, 96))
OLD, KID, RETIRED = "r20261101-00000001", "r20261130-00000002", "r20260901-00000003"
NOW = 1_800_000_000
EXP = NOW + 3600
DEPTH_LIMIT = 3


def mac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def bid(n: int) -> bytes:
    return bytes([n]) * 16


def text(envelope: dict[str, Any] | bytes) -> str:
    raw = envelope if isinstance(envelope, bytes) else cbor.encode(envelope)
    return "chit_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Chain:
    """Builds a token block by block, per the specification."""

    def __init__(self, root: dict[str, Any], *, key: bytes = KEY, kid: str = KID) -> None:
        self.key, self.kid = key, kid
        self.blocks: list[bytes] = []
        self.tag = mac(key, b"chit-token/1 hmac-sha256")
        self.add(root)

    def add(self, block: dict[str, Any]) -> Chain:
        raw = cbor.encode(block)
        self.blocks.append(raw)
        self.tag = mac(self.tag, raw)
        return self

    def add_raw(self, raw: bytes) -> Chain:
        self.blocks.append(raw)
        self.tag = mac(self.tag, raw)
        return self

    def delegate(self, block: dict[str, Any], *, proof_key: bytes | None = None) -> Chain:
        key = mac(proof_key or self.key, b"chit-token/1 delegation")
        proof = mac(key, self.tag + cbor.encode(block))
        return self.add({**block, "proof": proof})

    def envelope(self, **override: Any) -> dict[str, Any]:
        env = {"v": 1, "alg": "hmac-sha256", "kid": self.kid, "blocks": list(self.blocks),
               "tag": self.tag}
        env.update(override)
        return env

    def text(self, **override: Any) -> str:
        return text(self.envelope(**override))


def root(*caveats: list[Any], agent: str = "alice", n: int = 1) -> dict[str, Any]:
    return {"id": bid(n), "agent": agent, "caveats": list(caveats)}


def att(n: int, *caveats: list[Any]) -> dict[str, Any]:
    return {"id": bid(n), "caveats": list(caveats)}


def deleg(n: int, agent: str, *caveats: list[Any]) -> dict[str, Any]:
    return {"id": bid(n), "agent": agent, "caveats": list(caveats)}


BASE = (["ops", ["read", "write"]], ["paths", ["src/**"]], ["exp", EXP])
LEAD = (["ops", ["commit", "read", "sub-token:issue", "write"]], ["paths", ["src/**"]],
        ["exp", EXP], ["deleg", True])
CHILD = (["ops", ["read", "write"]], ["paths", ["src/api/**"]], ["exp", EXP - 600],
         ["deleg", False])
CHILD_DELEGABLE = (["ops", ["read", "sub-token:issue"]], ["paths", ["src/api/**"]],
                   ["exp", EXP - 600], ["deleg", True])


def grant(agent: str, ops: list[str], scopes: list[list[str]], exp: int, *,
          nbf: int | None = None, delegable: bool = False, token_id: int = 1,
          repos: list[list[str]] | None = None, single_repo_only: bool = True,
          ) -> dict[str, Any]:
    return {"agent": agent, "operations": ops, "path_scopes": scopes, "expires_at": exp,
            "not_before": nbf, "delegable": delegable, "token_id": bid(token_id).hex(),
            "repo_scopes": repos or [], "single_repo_only": single_repo_only}


def checks(*rows: tuple[str, bool, bool]) -> list[dict[str, Any]]:
    """``repo_checks``: (name, only_repo, allowed), as docs/token-format.md *Repositories* says."""
    return [{"repo": name, "only_repo": only, "allowed": allowed} for name, only, allowed in rows]


def cases() -> list[dict[str, Any]]:
    base = Chain(root(*BASE))
    lead = Chain(root(*LEAD, agent="lead"))
    child = Chain(root(*LEAD, agent="lead")).delegate(deleg(2, "lead.helper", *CHILD))
    c: list[dict[str, Any]] = []

    def ok(name: str, token: str, expect: dict[str, Any], **extra: Any) -> None:
        c.append({"name": name, "token": token, "expect": expect, **extra})

    def bad(name: str, token: str, error: str, **extra: Any) -> None:
        c.append({"name": name, "token": token, "error": error, **extra})

    # --- valid ----------------------------------------------------------------
    ok("root token", base.text(), grant("alice", ["read", "write"], [["src/**"]], EXP))
    ok("attenuation narrows ops, paths and expiry",
       Chain(root(*BASE)).add(att(2, ["ops", ["commit", "read"]], ["paths", ["src/api/**"]],
                                  ["exp", EXP - 60])).text(),
       grant("alice", ["read"], [["src/**"], ["src/api/**"]], EXP - 60))
    ok("repeated caveats in one block intersect",
       Chain(root(["ops", ["read", "write"]], ["ops", ["read"]], ["paths", ["src/**"]],
                  ["exp", EXP], ["exp", EXP - 5])).text(),
       grant("alice", ["read"], [["src/**"]], EXP - 5))
    ok("delegation flag granted by the root block", lead.text(),
       grant("lead", ["commit", "read", "sub-token:issue", "write"], [["src/**"]], EXP,
             delegable=True))
    ok("attenuation drops the delegation flag",
       Chain(root(*LEAD, agent="lead")).add(att(2, ["deleg", False])).text(),
       grant("lead", ["commit", "read", "sub-token:issue", "write"], [["src/**"]], EXP))
    ok("a later deleg true adds nothing",
       Chain(root(*BASE)).add(att(2, ["deleg", True])).text(),
       grant("alice", ["read", "write"], [["src/**"]], EXP))
    ok("not-before in the past", Chain(root(*BASE, ["nbf", NOW - 1])).text(),
       grant("alice", ["read", "write"], [["src/**"]], EXP, nbf=NOW - 1))
    ok("not-before equal to now", Chain(root(*BASE, ["nbf", NOW])).text(),
       grant("alice", ["read", "write"], [["src/**"]], EXP, nbf=NOW))
    ok("no ops caveat grants no operations", Chain(root(["paths", ["**"]], ["exp", EXP])).text(),
       grant("alice", [], [["**"]], EXP))
    ok("delegated child: a new agent with the child's scope", child.text(),
       grant("lead.helper", ["read", "write"], [["src/**"], ["src/api/**"]], EXP - 600,
             token_id=2), chain=[[bid(1).hex(), "lead"], [bid(2).hex(), "lead.helper"]])
    ok("delegated child, then attenuated by its holder",
       Chain(root(*LEAD, agent="lead")).delegate(deleg(2, "lead.helper", *CHILD))
       .add(att(3, ["ops", ["read"]])).text(),
       grant("lead.helper", ["read"], [["src/**"], ["src/api/**"]], EXP - 600, token_id=2),
       chain=[[bid(1).hex(), "lead"], [bid(2).hex(), "lead.helper"]])
    two_hops = (
        Chain(root(*LEAD, agent="lead"))
        .delegate(deleg(2, "lead.helper", *CHILD_DELEGABLE))
        .delegate(deleg(3, "lead.helper.sub", ["ops", ["read"]], ["paths", ["src/api/v1/**"]],
                        ["exp", EXP - 900], ["deleg", False]))
    )
    ok("two delegation hops", two_hops.text(),
       grant("lead.helper.sub", ["read"], [["src/**"], ["src/api/**"], ["src/api/v1/**"]],
             EXP - 900, token_id=3),
       chain=[[bid(1).hex(), "lead"], [bid(2).hex(), "lead.helper"],
              [bid(3).hex(), "lead.helper.sub"]])
    ok("signed by an older key that is still active", Chain(root(*BASE), key=OLD_KEY,
                                                            kid=OLD).text(),
       grant("alice", ["read", "write"], [["src/**"]], EXP))

    # --- repositories ----------------------------------------------------------------
    app = (["ops", ["read"]], ["paths", ["**"]], ["repos", ["app", "lib-*"]], ["exp", EXP])
    ok("repos caveat: a name must match one of its globs", Chain(root(*app)).text(),
       grant("alice", ["read"], [["**"]], EXP, repos=[["app", "lib-*"]], single_repo_only=False),
       repo_checks=checks(("app", False, True), ("app", True, True), ("lib-x", False, True),
                          ("lib-", False, True), ("lib", False, False), ("App", False, False),
                          ("app2", False, False), ("other", True, False)))
    ok("repos caveats intersect: attenuation narrows",
       Chain(root(*app)).add(att(2, ["repos", ["lib-?"]])).text(),
       grant("alice", ["read"], [["**"]], EXP, repos=[["app", "lib-*"], ["lib-?"]],
             single_repo_only=False),
       repo_checks=checks(("lib-x", False, True), ("lib-xy", False, False),
                          ("app", False, False)))
    ok("no repos caveat: good only where the engine serves exactly one repository",
       Chain(root(["ops", ["read"]], ["paths", ["**"]], ["exp", EXP])).text(),
       grant("alice", ["read"], [["**"]], EXP),
       repo_checks=checks(("app", True, True), ("app", False, False), ("..", True, False),
                          ("app/x", True, False), ("app\n", True, False)))
    ok("repos added by an attenuation never lift the one-repository rule",
       Chain(root(*BASE)).add(att(2, ["repos", ["*"]])).text(),
       grant("alice", ["read", "write"], [["src/**"]], EXP, repos=[["*"]]),
       repo_checks=checks(("app", True, True), ("app", False, False)))
    ok("an empty repos list grants no repository",
       Chain(root(["ops", ["read"]], ["paths", ["**"]], ["repos", []], ["exp", EXP])).text(),
       grant("alice", ["read"], [["**"]], EXP, repos=[[]], single_repo_only=False),
       repo_checks=checks(("app", True, False)))
    ok("delegated child limited to one repository of its parent's",
       Chain(root(["ops", ["commit", "read", "sub-token:issue", "write"]], ["paths", ["src/**"]],
                  ["repos", ["*"]], ["exp", EXP], ["deleg", True], agent="lead"))
       .delegate(deleg(2, "lead.helper", ["ops", ["read"]], ["paths", ["src/**"]],
                       ["repos", ["app"]], ["exp", EXP - 600], ["deleg", False])).text(),
       grant("lead.helper", ["read"], [["src/**"], ["src/**"]], EXP - 600, token_id=2,
             repos=[["*"], ["app"]], single_repo_only=False),
       chain=[[bid(1).hex(), "lead"], [bid(2).hex(), "lead.helper"]],
       repo_checks=checks(("app", False, True), ("lib", False, False)))
    for label, value in [("a slash", ["a/b"]), ("traversal", [".."]), ("a dot", ["."]),
                         ("'**'", ["app**"]), ("a NUL", ["app\x00"]), ("a space", ["a b"]),
                         ("a character class", ["[ab]"]), ("an empty glob", [""]),
                         ("65 characters", ["a" * 65]), ("a non-ASCII letter", ["\u00e4pp"]),
                         ("not a list", "app"), ("a number", [1])]:
        bad(f"repos glob with {label}",
            Chain(root(["ops", ["read"]], ["paths", ["**"]], ["repos", value], ["exp", EXP]))
            .text(), "caveat_malformed")

    # --- signatures and tampering ------------------------------------------------
    bad("wrong root key", Chain(root(*BASE), key=bytes(32)).text(), "token_invalid_signature")
    bad("tag of another token", base.text(tag=lead.tag), "token_invalid_signature")
    flipped = bytearray(base.blocks[0])
    flipped[-1] ^= 0x01
    bad("one bit of a block flipped", base.text(blocks=[bytes(flipped)]),
        "token_invalid_signature")
    att_chain = Chain(root(*BASE)).add(att(2, ["ops", ["read"]]))
    bad("attenuation block removed, tag kept", att_chain.text(blocks=att_chain.blocks[:1]),
        "token_invalid_signature")
    bad("blocks reordered", att_chain.text(blocks=att_chain.blocks[::-1]),
        "token_invalid_signature")
    bad("unknown key id", Chain(root(*BASE), kid="r-nobody").text(), "token_unknown_key")
    bad("retired key", Chain(root(*BASE), key=RETIRED_KEY, kid=RETIRED).text(),
        "token_unknown_key")
    bad("claims version 2", base.text(v=2), "token_unsupported_version")
    bad("claims alg none", base.text(alg="none"), "token_unsupported_version")
    bad("claims hmac-sha512", base.text(alg="hmac-sha512"), "token_unsupported_version")

    # --- time ------------------------------------------------------------------
    bad("expired", Chain(root(["exp", NOW - 1])).text(), "token_expired")
    bad("expires exactly now", Chain(root(["exp", NOW])).text(), "token_expired")
    bad("an attenuation's earlier expiry wins",
        Chain(root(*BASE)).add(att(2, ["exp", NOW - 10])).text(), "token_expired")
    bad("not yet valid", Chain(root(*BASE, ["nbf", NOW + 1])).text(), "token_not_yet_valid")
    bad("no expiry anywhere", Chain(root(["ops", ["read"]], ["paths", ["**"]])).text(),
        "token_expiry_required")

    # --- caveats ---------------------------------------------------------------------
    bad("unknown caveat type", Chain(root(*BASE, ["ip", "10.0.0.1"])).text(), "caveat_unknown")
    bad("unknown caveat type in an attenuation",
        Chain(root(*BASE)).add(att(2, ["time-of-day", [9, 17]])).text(), "caveat_unknown")
    bad("time as a string", Chain(root(["exp", "2027-01-01T00:00:00Z"])).text(),
        "caveat_malformed")
    bad("impossible date", Chain(root(["exp", 2**40])).text(), "caveat_malformed")
    bad("negative time", Chain(root(["exp", -1])).text(), "caveat_malformed")
    bad("boolean as a time", Chain(root(["exp", True])).text(), "caveat_malformed")
    bad("unknown operation", Chain(root(["ops", ["read", "admin"]], ["exp", EXP])).text(),
        "caveat_malformed")
    bad("repeated operation", Chain(root(["ops", ["read", "read"]], ["exp", EXP])).text(),
        "caveat_malformed")
    bad("traversal in a glob", Chain(root(["paths", ["src/../**"]], ["exp", EXP])).text(),
        "caveat_malformed")
    bad("caveat is not a pair", Chain(root(["exp"], ["exp", EXP])).text(), "caveat_malformed")
    bad("delegation flag not a boolean", Chain(root(*BASE, ["deleg", 1])).text(),
        "caveat_malformed")

    # --- delegation ----------------------------------------------------------------------
    bad("delegation block added offline, no proof",
        Chain(root(*LEAD, agent="lead")).add(deleg(2, "lead.mallory", *CHILD)).text(),
        "delegation_not_permitted")
    bad("delegation proof made with the wrong key",
        Chain(root(*LEAD, agent="lead")).delegate(deleg(2, "lead.mallory", *CHILD),
                                                  proof_key=bytes(32)).text(),
        "delegation_not_permitted")
    bad("delegation from a token without the flag",
        Chain(root(*BASE, agent="lead")).delegate(deleg(2, "lead.helper", *CHILD)).text(),
        "delegation_not_permitted")
    bad("delegation from a token without sub-token:issue",
        Chain(root(["ops", ["read"]], ["paths", ["**"]], ["exp", EXP], ["deleg", True]))
        .delegate(deleg(2, "alice.helper", *CHILD)).text(), "delegation_not_permitted")
    bad("delegation after the flag was dropped",
        Chain(root(*LEAD, agent="lead")).add(att(2, ["deleg", False]))
        .delegate(deleg(3, "lead.helper", *CHILD)).text(), "delegation_not_permitted")
    bad("depth beyond the limit", two_hops.text(), "delegation_depth_exceeded", depth_limit=1)
    bad("delegated agent not named under its parent (even with a valid proof)",
        Chain(root(*LEAD, agent="lead")).delegate(deleg(2, "alice", *CHILD)).text(),
        "token_malformed")
    bad("root block with a null agent", Chain({"id": bid(1), "agent": None,
                                                "caveats": list(BASE)}).text(),
        "token_malformed")

    # --- revocation ------------------------------------------------------------------------
    bad("root revoked", base.text(), "token_revoked", revoked=[bid(1).hex()])
    bad("parent revoked kills the child", child.text(), "token_revoked",
        revoked=[bid(1).hex()])
    bad("child revoked", child.text(), "token_revoked", revoked=[bid(2).hex()])
    bad("attenuation block revoked", att_chain.text(), "token_revoked", revoked=[bid(2).hex()])

    # --- malformed -------------------------------------------------------------------------
    good = base.text()
    raw = base64.urlsafe_b64decode(good[5:] + "=" * (-len(good[5:]) % 4))
    bad("missing prefix", good[5:], "token_malformed")
    bad("padding", good + "=", "token_malformed")
    bad("standard base64 alphabet", "chit_" + base64.b64encode(raw).decode().rstrip("=") + "+",
        "token_malformed")
    bad("tag truncated", base.text(tag=bytes(31)), "token_malformed")
    bad("extra envelope key", text({**base.envelope(), "x": 1}), "token_malformed")
    bad("non-canonical integer", text(raw.replace(b"\x61\x76\x01", b"\x61\x76\x18\x01", 1)),
        "token_malformed")
    bad("duplicate envelope key", text(raw.replace(b"\x63kid", b"\x63alg", 1)), "token_malformed")
    bad("indefinite-length array", text(b"\x9f\xff"), "token_malformed")
    bad("float in a block (refused by the profile before any caveat is read)",
        # att(2) with caveats [["exp", 1.0]]: the empty caveat array (0x80, last byte)
        # replaced by a one-pair array whose value is a half-precision float.
        Chain(root(*BASE)).add_raw(cbor.encode(att(2))[:-1] + b"\x81\x82\x63exp\xf9\x3c\x00")
        .text(), "token_malformed")
    bad("root block without an agent", Chain(att(1, *BASE)).text(), "token_malformed")
    bad("agent name with a slash", Chain(root(*BASE, agent="a/b")).text(), "token_malformed")
    bad("5-byte header announcing 4 GB", text(b"\x9a\xff\xff\xff\xff"), "token_malformed")
    return c


def main() -> None:
    doc = {
        "format": "chit-token/1",
        "now": NOW,
        "depth_limit": DEPTH_LIMIT,
        "keys": {
            OLD: {"secret": OLD_KEY.hex(), "status": "active"},
            KID: {"secret": KEY.hex(), "status": "active"},
            RETIRED: {"secret": RETIRED_KEY.hex(), "status": "retired"},
        },
        "note": "Verify each case at `now` with the active `keys` (retired keys are unknown), "
                "the case's `revoked` ids (default none) and `depth_limit` (default the "
                "top-level one). `expect` is the effective grant; `error` the exact code. "
                "Each `repo_checks` row says whether the token is good for repository `repo` "
                "on an engine where `only_repo` (it serves exactly one repository, this one).",
        "cases": cases(),
    }
    out = Path(__file__).with_name("tokens.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
