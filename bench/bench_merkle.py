"""The Merkle tree's cost: roots, proofs and the frontier, against the bare hashing floor.

Set-up (untimed): ``N`` distinct 64-byte entries.

Measured (medians of ``ROUNDS``):

- ``root``: ``leaf_hash`` of every entry then ``merkle.root``, leaves per second;
  against the peer, the same 2n - 1 SHA-256 calls in a plain loop with no
  tree logic (what any RFC 6962 root must at least cost in CPython);
- one inclusion and one consistency proof over the N leaf hashes (each hashes
  fewer than N nodes), seconds;
- ``frontier_append`` for every leaf, appends per second (what an append-only
  store pays per entry to keep the tree in one row).

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_merkle.py [N]``.
"""

from __future__ import annotations

import hashlib
import platform
import statistics
import sys
import time

from engine.audit import merkle

ROUNDS = 5
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000


def _floor(entries: list[bytes]) -> float:
    start = time.perf_counter()
    sha = hashlib.sha256
    hashes = [sha(b"\x00" + e).digest() for e in entries]
    node = hashes[0]
    for h in hashes[1:]:
        node = sha(b"\x01" + node + h).digest()
    return time.perf_counter() - start


def _root(entries: list[bytes]) -> float:
    start = time.perf_counter()
    merkle.root([merkle.leaf_hash(e) for e in entries])
    return time.perf_counter() - start


def _timed(call: object, *args: object) -> float:
    start = time.perf_counter()
    call(*args)  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    entries = [i.to_bytes(8, "big") * 8 for i in range(N)]
    leaves = [merkle.leaf_hash(e) for e in entries]
    roots = [_root(entries) for _ in range(ROUNDS)]
    floors = [_floor(entries) for _ in range(ROUNDS)]
    inclusion = [_timed(merkle.inclusion_proof, leaves, N // 3, N) for _ in range(ROUNDS)]
    consistency = [_timed(merkle.consistency_proof, leaves, N // 3, N) for _ in range(ROUNDS)]

    def appends() -> None:
        frontier: tuple[bytes, ...] = ()
        for size, leaf in enumerate(leaves):
            frontier = merkle.frontier_append(frontier, size, leaf)

    frontier = [_timed(appends) for _ in range(ROUNDS)]
    root_s, floor_s = statistics.median(roots), statistics.median(floors)
    print(f"python {platform.python_version()} on {platform.machine()}, {N:,} leaves")
    print(f"root (leaf hashing included): {N / root_s:,.0f} leaves/s ({root_s:.3f} s)")
    print(f"bare hashing floor:           {N / floor_s:,.0f} leaves/s ({floor_s:.3f} s)")
    print(f"root / floor:                 {root_s / floor_s:.2f}")
    print(f"inclusion proof:              {statistics.median(inclusion):.3f} s")
    print(f"consistency proof:            {statistics.median(consistency):.3f} s")
    print(f"frontier_append:              {N / statistics.median(frontier):,.0f} appends/s")


if __name__ == "__main__":
    main()
