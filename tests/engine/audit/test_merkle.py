"""engine/audit/merkle.py against published RFC 6962 vectors and a reference built from the RFC.

Oracles, none of them this module:

- the reference test tree of RFC 6962 implementations (eight leaves ``""``,
  ``00``, ``10``, ... ``606162...6f``): its root for every size, its compact
  ranges, and the inclusion and consistency probes of transparency-dev/merkle
  (tests/vectors/merkle_rfc6962.json, imported by import_merkle_vectors.py);
- the inclusion and consistency proofs first published with
  certificate-transparency's C++ tree and carried in google/trillian's
  ``merkle/logverifier/log_verifier_test.go`` (below, leaf indexes made 0-based);
- hash vectors of transparency-dev/merkle ``rfc6962/rfc6962_test.go``;
- ``MTH``, ``PATH`` and ``PROOF`` written below straight from RFC 9162 §2.1, by
  recursion, compared exhaustively for every size up to 70.

Threat: a log that can show a proof for an entry it does not hold, or pass off
a rewritten history as an extension of the old one, defeats the call log's
transparency form; so does a verifier that accepts a malformed proof.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.audit import merkle

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors" / "merkle_rfc6962.json").read_text("utf-8")
)
ENTRIES = [bytes.fromhex(h) for h in VECTORS["leaf_inputs_hex"]]
ROOTS = [bytes.fromhex(h) for h in VECTORS["roots_hex"]]
LEAVES = [hashlib.sha256(b"\x00" + e).digest() for e in ENTRIES]


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


# --- the reference, from RFC 9162 §2.1 -----------------------------------------------

BIG = [hashlib.sha256(b"\x00" + i.to_bytes(4, "big")).digest() for i in range(2100)]


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@cache
def mth(lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) over BIG, by the RFC's recursion."""
    n = hi - lo
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return BIG[lo]
    k = _k(n)
    return hashlib.sha256(b"\x01" + mth(lo, lo + k) + mth(lo + k, hi)).digest()


def path(m: int, lo: int, hi: int) -> list[bytes]:
    """PATH(m, D[lo:hi]), m relative to lo."""
    n = hi - lo
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*path(m, lo, lo + k), mth(lo + k, hi)]
    return [*path(m - k, lo + k, hi), mth(lo, lo + k)]


def subproof(m: int, lo: int, hi: int, b: bool) -> list[bytes]:
    """SUBPROOF(m, D[lo:hi], b)."""
    n = hi - lo
    if m == n:
        return [] if b else [mth(lo, hi)]
    k = _k(n)
    if m <= k:
        return [*subproof(m, lo, lo + k, b), mth(lo + k, hi)]
    return [*subproof(m - k, lo + k, hi, False), mth(lo, lo + k)]


def reference_frontier(n: int) -> tuple[bytes, ...]:
    """The perfect subtrees of a tree of size n, left to right, by the bits of n."""
    out, lo = [], 0
    for bit in range(n.bit_length() - 1, -1, -1):
        if n >> bit & 1:
            out.append(mth(lo, lo + (1 << bit)))
            lo += 1 << bit
    return tuple(out)


def test_the_reference_matches_the_published_roots() -> None:
    """The oracle itself is checked against the published tree before it judges anything."""

    @cache
    def small(lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            return LEAVES[lo]
        k = _k(hi - lo)
        return hashlib.sha256(b"\x01" + small(lo, lo + k) + small(lo + k, hi)).digest()

    assert [small(0, n) for n in range(1, 9)] == ROOTS[1:]


# --- hashes and the reference tree ---------------------------------------------------


def test_hash_vectors() -> None:
    assert merkle.EMPTY_ROOT == h(
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert merkle.leaf_hash(b"") == h(
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert merkle.leaf_hash(b"L123456") == h(
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert merkle.node_hash(b"N123", b"N456") == h(
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )
    # Second-preimage resistance: a node is never the leaf of its children's bytes.
    a, b = merkle.leaf_hash(b"Hello"), merkle.leaf_hash(b"World")
    assert merkle.node_hash(a, b) != merkle.leaf_hash(a + b)
    assert merkle.node_hash(a, b) != merkle.node_hash(b, a)


def test_roots_of_the_reference_tree_for_every_size() -> None:
    assert len(ROOTS) == 9 and len(ENTRIES) == 8
    hashes = [merkle.leaf_hash(e) for e in ENTRIES]
    assert hashes == LEAVES
    for size in range(9):
        assert merkle.root(hashes[:size]) == ROOTS[size], size


def test_frontiers_of_the_reference_tree_are_its_compact_ranges() -> None:
    frontier: tuple[bytes, ...] = ()
    for size in range(9):
        expected = tuple(bytes.fromhex(x) for x in VECTORS["frontiers_hex"][size])
        assert frontier == expected, size
        assert merkle.frontier_root(frontier, size) == ROOTS[size]
        if size < 8:
            frontier = merkle.frontier_append(frontier, size, LEAVES[size])


# (0-based leaf index, tree size, proof): RFC 6962 reference proofs over the tree above.
CLASSIC_INCLUSION = [
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
# (old size, new size, proof)
CLASSIC_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]


@pytest.mark.parametrize(("index", "size", "proof"), CLASSIC_INCLUSION)
def test_classic_inclusion_proofs(index: int, size: int, proof: list[str]) -> None:
    want = [h(p) for p in proof]
    assert merkle.inclusion_proof(LEAVES, index, size) == want
    assert merkle.verify_inclusion(LEAVES[index], index, size, want, ROOTS[size])


@pytest.mark.parametrize(("old", "new", "proof"), CLASSIC_CONSISTENCY)
def test_classic_consistency_proofs(old: int, new: int, proof: list[str]) -> None:
    want = [h(p) for p in proof]
    assert merkle.consistency_proof(LEAVES, old, new) == want
    assert merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], want)


# --- transparency-dev/merkle's probes ------------------------------------------------

# Where chit is deliberately stricter than the probes: a "root" that is not 32
# bytes cannot be the SHA-256 root of any tree, so it never verifies.
STRICTER = {"testdata/consistency/additional/sizes-are-equal-one-and-proof-is-empty.json"}


def _outcome(check: Any) -> bool:
    try:
        return bool(check())
    except ValueError:  # a bad size or index is a refusal too
        return False


def _proof(probe: dict[str, Any]) -> list[bytes]:
    return [b64(p) for p in probe["proof"] or []]


def test_the_probe_files_are_all_there() -> None:
    assert len(VECTORS["inclusion"]) == 98
    assert len(VECTORS["consistency"]) == 98
    assert sum(not p["wantErr"] for p in VECTORS["inclusion"]) == 6
    assert STRICTER <= {p["file"] for p in VECTORS["consistency"]}


@pytest.mark.parametrize("probe", VECTORS["inclusion"], ids=lambda p: p["file"])
def test_inclusion_probes(probe: dict[str, Any]) -> None:
    got = _outcome(
        lambda: merkle.verify_inclusion(
            b64(probe["leafHash"]),
            probe["leafIdx"],
            probe["treeSize"],
            _proof(probe),
            b64(probe["root"]),
        )
    )
    assert got is not probe["wantErr"], probe["desc"]
    size, index = probe["treeSize"], probe["leafIdx"]
    if got and size <= 8 and b64(probe["root"]) == ROOTS[size]:
        assert merkle.inclusion_proof(LEAVES, index, size) == _proof(probe)


@pytest.mark.parametrize("probe", VECTORS["consistency"], ids=lambda p: p["file"])
def test_consistency_probes(probe: dict[str, Any]) -> None:
    got = _outcome(
        lambda: merkle.verify_consistency(
            probe["size1"], probe["size2"], b64(probe["root1"]), b64(probe["root2"]), _proof(probe)
        )
    )
    expected = not probe["wantErr"] and probe["file"] not in STRICTER
    assert got is expected, probe["desc"]
    old, new = probe["size1"], probe["size2"]
    if got and new <= 8 and b64(probe["root2"]) == ROOTS[new]:
        assert merkle.consistency_proof(LEAVES, old, new) == _proof(probe)


# --- exhaustive against the reference ------------------------------------------------

SIZES = range(71)


@pytest.mark.parametrize("size", SIZES)
def test_root_and_frontier_match_the_reference(size: int) -> None:
    assert merkle.root(BIG[:size]) == mth(0, size)
    frontier: tuple[bytes, ...] = ()
    for n in range(size):
        frontier = merkle.frontier_append(frontier, n, BIG[n])
    assert frontier == reference_frontier(size)
    assert merkle.frontier_root(frontier, size) == mth(0, size)
    assert merkle.decode_frontier(merkle.encode_frontier(frontier), size) == frontier


@pytest.mark.parametrize("size", SIZES[1:])
def test_every_inclusion_proof_matches_the_reference(size: int) -> None:
    r = mth(0, size)
    for index in range(size):
        proof = merkle.inclusion_proof(BIG, index, size)
        assert proof == path(index, 0, size), (index, size)
        assert merkle.verify_inclusion(BIG[index], index, size, proof, r)
        # Another leaf, another position, or a proof one hash short or long: refused.
        assert not merkle.verify_inclusion(BIG[size], index, size, proof, r)
        for other in {0, index - 1, index + 1, size - 1} - {index}:
            if 0 <= other < size:
                assert not merkle.verify_inclusion(BIG[index], other, size, proof, r)
        if proof:
            assert not merkle.verify_inclusion(BIG[index], index, size, proof[:-1], r)
        assert not merkle.verify_inclusion(BIG[index], index, size, [*proof, r], r)


@pytest.mark.parametrize("new", SIZES)
def test_every_consistency_proof_matches_the_reference(new: int) -> None:
    for old in range(new + 1):
        proof = merkle.consistency_proof(BIG, old, new)
        assert proof == ([] if old == 0 else subproof(old, 0, new, True)), (old, new)
        assert merkle.verify_consistency(old, new, mth(0, old), mth(0, new), proof)
        if 0 < old < new:
            assert not merkle.verify_consistency(old, new, mth(0, new), mth(0, old), proof)
            assert not merkle.verify_consistency(old, new, mth(0, old), BIG[new], proof)
            # Only the old root wrong: the proof must also rebuild it.
            assert not merkle.verify_consistency(old, new, BIG[new], mth(0, new), proof)
            assert not merkle.verify_consistency(old, new, mth(0, old), mth(0, new), proof[:-1])
            assert not merkle.verify_consistency(
                old, new, mth(0, old), mth(0, new), [*proof, proof[0]]
            )


def test_every_flipped_bit_of_a_proof_is_refused() -> None:
    size = 21
    r = mth(0, size)
    for index in range(size):
        proof = merkle.inclusion_proof(BIG, index, size)
        for i, node in enumerate(proof):
            for bit in range(256):
                bad = bytearray(node)
                bad[bit // 8] ^= 1 << (bit % 8)
                tampered = [*proof[:i], bytes(bad), *proof[i + 1 :]]
                assert not merkle.verify_inclusion(BIG[index], index, size, tampered, r)
    for old in range(1, size):
        proof = merkle.consistency_proof(BIG, old, size)
        for i, node in enumerate(proof):
            bad = bytes([node[0] ^ 0x10]) + node[1:]
            tampered = [*proof[:i], bad, *proof[i + 1 :]]
            assert not merkle.verify_consistency(old, size, mth(0, old), r, tampered)


@given(st.integers(1, 2048), st.data())
def test_large_trees_match_the_reference(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1))
    old = data.draw(st.integers(0, size))
    assert merkle.root(BIG[:size]) == mth(0, size)
    proof = merkle.inclusion_proof(BIG, index, size)
    assert proof == path(index, 0, size)
    assert merkle.verify_inclusion(BIG[index], index, size, proof, mth(0, size))
    consistency = merkle.consistency_proof(BIG, old, size)
    assert merkle.verify_consistency(old, size, mth(0, old), mth(0, size), consistency)


def test_proofs_use_only_the_first_size_leaves() -> None:
    assert merkle.inclusion_proof(BIG, 3, 8) == merkle.inclusion_proof(BIG[:8], 3, 8)
    assert merkle.consistency_proof(BIG, 3, 8) == merkle.consistency_proof(BIG[:8], 3, 8)


def test_the_empty_tree() -> None:
    assert merkle.root([]) == merkle.EMPTY_ROOT
    assert merkle.frontier_root((), 0) == merkle.EMPTY_ROOT
    assert merkle.consistency_proof(BIG, 0, 5) == []
    assert merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, mth(0, 5), [])
    assert merkle.verify_consistency(0, 0, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [])
    # An "empty" tree with another root, or a proof where none is due: refused.
    assert not merkle.verify_consistency(0, 5, BIG[0], mth(0, 5), [])
    assert not merkle.verify_consistency(0, 0, merkle.EMPTY_ROOT, BIG[0], [])
    assert not merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, mth(0, 5), [BIG[0]])


# --- refusals ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "size"), [(-1, 4), (4, 4), (5, 4), (0, 0), (0, -1), (0, len(BIG) + 1)]
)
def test_inclusion_proof_refuses_bad_indexes_and_sizes(index: int, size: int) -> None:
    with pytest.raises(ValueError, match=r"index|size"):
        merkle.inclusion_proof(BIG, index, size)


@pytest.mark.parametrize(("old", "new"), [(5, 4), (-1, 4), (0, -1), (0, len(BIG) + 1)])
def test_consistency_proof_refuses_bad_sizes(old: int, new: int) -> None:
    with pytest.raises(ValueError, match="size"):
        merkle.consistency_proof(BIG, old, new)


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_sizes_and_indexes_must_be_ints(bad: Any) -> None:
    with pytest.raises(TypeError):
        merkle.inclusion_proof(BIG, bad, 4)
    with pytest.raises(TypeError):
        merkle.inclusion_proof(BIG, 0, bad)
    with pytest.raises(TypeError):
        merkle.consistency_proof(BIG, bad, 4)
    with pytest.raises(TypeError):
        merkle.verify_inclusion(BIG[0], bad, 4, [], mth(0, 4))
    with pytest.raises(TypeError):
        merkle.verify_consistency(bad, 4, mth(0, 1), mth(0, 4), [])
    with pytest.raises(TypeError):
        merkle.frontier_root((), bad)


@pytest.mark.parametrize("bad", [b"", b"\x00" * 31, b"\x00" * 33, "00" * 32, None, bytearray(32)])
def test_leaf_hashes_must_be_32_bytes(bad: Any) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        merkle.root([BIG[0], bad])
    with pytest.raises(ValueError, match="32 bytes"):
        merkle.inclusion_proof([BIG[0], bad], 0, 2)
    with pytest.raises(ValueError, match="32 bytes"):
        merkle.consistency_proof([BIG[0], bad, BIG[1]], 1, 3)
    with pytest.raises(ValueError, match="32 bytes"):
        merkle.frontier_append((), 0, bad)


def test_verify_inclusion_refuses_bad_sizes_and_indexes() -> None:
    proof = merkle.inclusion_proof(BIG, 2, 8)
    for index, size in [(8, 8), (9, 8), (-1, 8), (0, 0), (0, -3)]:
        with pytest.raises(ValueError, match=r"index|size"):
            merkle.verify_inclusion(BIG[2], index, size, proof, mth(0, 8))


def test_verify_consistency_refuses_bad_sizes() -> None:
    for old, new in [(5, 4), (-1, 4), (0, -1)]:
        with pytest.raises(ValueError, match="size"):
            merkle.verify_consistency(old, new, mth(0, 4), mth(0, 4), [])


MALFORMED_NODES: list[Any] = [b"", b"\x00" * 31, b"\x00" * 33, "00" * 32, None, 7]


@pytest.mark.parametrize("bad", MALFORMED_NODES)
def test_malformed_proofs_are_false_not_errors(bad: Any) -> None:
    proof = merkle.inclusion_proof(BIG, 5, 13)
    r = mth(0, 13)
    for i in range(len(proof) + 1):
        assert (
            merkle.verify_inclusion(BIG[5], 5, 13, [*proof[:i], bad, *proof[i + 1 :]], r) is False
        )
    consistency = merkle.consistency_proof(BIG, 5, 13)
    for i in range(len(consistency) + 1):
        tampered = [*consistency[:i], bad, *consistency[i + 1 :]]
        assert merkle.verify_consistency(5, 13, mth(0, 5), r, tampered) is False
    # The power-of-two case, where the old root is the path's first node.
    consistency = merkle.consistency_proof(BIG, 4, 13)
    assert merkle.verify_consistency(4, 13, mth(0, 4), r, [bad, *consistency[1:]]) is False


@pytest.mark.parametrize("bad", [b"", b"\x00" * 31, b"\x00" * 33])
def test_malformed_leaves_and_roots_are_false_not_errors(bad: bytes) -> None:
    proof = merkle.inclusion_proof(BIG, 5, 13)
    assert merkle.verify_inclusion(bad, 5, 13, proof, mth(0, 13)) is False
    assert merkle.verify_inclusion(BIG[5], 5, 13, proof, bad) is False
    consistency = merkle.consistency_proof(BIG, 5, 13)
    assert merkle.verify_consistency(5, 13, bad, mth(0, 13), consistency) is False
    assert merkle.verify_consistency(5, 13, mth(0, 5), bad, consistency) is False
    assert merkle.verify_consistency(13, 13, bad, bad, []) is False


@pytest.mark.parametrize("bad", [None, b"\x00" * 32, "proof", 3])
def test_a_proof_that_is_not_a_sequence_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="proof"):
        merkle.verify_inclusion(BIG[0], 0, 2, bad, mth(0, 2))
    with pytest.raises(TypeError, match="proof"):
        merkle.verify_consistency(1, 2, BIG[0], mth(0, 2), bad)


def test_leaf_and_root_must_be_bytes() -> None:
    with pytest.raises(TypeError, match="leaf"):
        merkle.verify_inclusion(BIG[0].hex(), 0, 2, [BIG[1]], mth(0, 2))
    with pytest.raises(TypeError, match="root"):
        merkle.verify_inclusion(BIG[0], 0, 2, [BIG[1]], None)
    with pytest.raises(TypeError, match="old_root"):
        merkle.verify_consistency(1, 2, None, mth(0, 2), [BIG[1]])


# --- the frontier's stored form ------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 2, 3, 7, 8, 70, 2**40 + 5, 2**63 - 1])
def test_decode_frontier_takes_exactly_one_hash_per_set_bit(size: int) -> None:
    count = size.bit_count()
    data = bytes(range(32)) * count
    assert merkle.decode_frontier(data, size) == (bytes(range(32)),) * count
    for wrong in {len(data) - 32, len(data) - 1, len(data) + 1, len(data) + 32} - {len(data)}:
        if wrong >= 0:
            with pytest.raises(ValueError, match=f"size {size} is {32 * count} bytes"):
                merkle.decode_frontier((b"\x00" * wrong), size)


def test_decode_frontier_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="negative"):
        merkle.decode_frontier(b"", -1)
    with pytest.raises(TypeError):
        merkle.decode_frontier("00" * 32, 1)


def test_frontier_functions_refuse_a_frontier_of_the_wrong_shape() -> None:
    good = reference_frontier(6)  # two hashes
    for bad in [good[:1], (*good, BIG[0]), (good[0], b"\x00" * 31)]:
        with pytest.raises(ValueError, match="frontier for size 6"):
            merkle.frontier_append(bad, 6, BIG[6])
        with pytest.raises(ValueError, match="frontier for size 6"):
            merkle.frontier_root(bad, 6)
    with pytest.raises(TypeError):
        merkle.frontier_root(list(good), 6)
    with pytest.raises(ValueError, match="32 bytes"):
        merkle.encode_frontier((good[0], b"\x00" * 31))
    with pytest.raises(ValueError, match="negative"):
        merkle.frontier_append((), -1, BIG[0])


def test_tree_builder_matches_the_frontier_functions_leaf_by_leaf() -> None:
    builder = merkle.TreeBuilder()
    frontier: tuple[bytes, ...] = ()
    leaves = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(300)]
    for size, leaf in enumerate(leaves):
        builder.append(leaf)
        frontier = merkle.frontier_append(frontier, size, leaf)
        assert builder.frontier == frontier and builder.size == size + 1
        assert builder.root() == merkle.root(leaves[: size + 1])
    resumed = merkle.TreeBuilder(frontier, 300)
    resumed.append(leaves[0])
    assert resumed.root() == merkle.root([*leaves, leaves[0]])
    assert merkle.TreeBuilder().root() == merkle.EMPTY_ROOT
    with pytest.raises(ValueError, match="32 bytes"):
        builder.append(b"short")
    with pytest.raises(ValueError):
        merkle.TreeBuilder((), 3)
