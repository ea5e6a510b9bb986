"""Token verification: chit-token/1 against pymacaroons, in the same run.

Both sides verify a token with a root block and two attenuation blocks carrying
the same information (operations, path scope, expiry), from its text form, with
the same HMAC-SHA256 chain. chit additionally decodes strict deterministic CBOR and
interprets typed caveats; pymacaroons matches first-party caveat strings with
exact-match callbacks. Reports the ratio chit / peer.

Run: ``.venv/bin/pip install -e '.[bench]' && .venv/bin/python bench/bench_verify.py``
"""

from __future__ import annotations

import json
import platform
import secrets
import sys
import timeit

from pymacaroons import Macaroon, Verifier

from engine.auth import token as t
from engine.auth import verify

NOW = 1_800_000_000
ROUNDS = 2000
REPEAT = 5


def chit_case() -> tuple[str, bytes]:
    key = secrets.token_bytes(32)
    text = t.mint(key, "k1", agent="bench", operations=["read", "write", "commit"],
                  paths=["src/**"], expires_at=NOW + 3600)
    text = t.attenuate(text, operations=["read", "write"], paths=["src/api/**"])
    text = t.attenuate(text, expires_at=NOW + 600)
    return text, key


def macaroon_case() -> tuple[str, bytes]:
    key = secrets.token_bytes(32)
    m = Macaroon(location="chit", identifier="bench", key=key)
    m.add_first_party_caveat("agent = bench")
    m.add_first_party_caveat("ops = read,write,commit")
    m.add_first_party_caveat("paths = src/**")
    m.add_first_party_caveat(f"exp = {NOW + 3600}")
    m.add_first_party_caveat("ops = read,write")
    m.add_first_party_caveat("paths = src/api/**")
    m.add_first_party_caveat(f"exp = {NOW + 600}")
    return m.serialize(), key


def main() -> None:
    text, key = chit_case()
    lookup = {"k1": key}.get
    serialized, mkey = macaroon_case()

    def run_chit() -> None:
        verify.verify_at_time(text, lookup, NOW)

    def run_peer() -> None:
        m = Macaroon.deserialize(serialized)
        v = Verifier()
        v.satisfy_general(lambda c: c.startswith(("agent = ", "ops = ", "paths = ", "exp = ")))
        v.verify(m, mkey)

    chit_s = min(timeit.repeat(run_chit, number=ROUNDS, repeat=REPEAT)) / ROUNDS
    peer_s = min(timeit.repeat(run_peer, number=ROUNDS, repeat=REPEAT)) / ROUNDS
    result = {
        "benchmark": "verify a 3-block token from its text form",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "chit_us": round(chit_s * 1e6, 1),
        "pymacaroons_us": round(peer_s * 1e6, 1),
        "ratio_chit_over_peer": round(chit_s / peer_s, 2),
        "chit_token_chars": len(text),
        "pymacaroons_token_chars": len(serialized),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
