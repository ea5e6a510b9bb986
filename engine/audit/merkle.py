"""The RFC 6962 Merkle tree over SHA-256 that the call log's transparency-log form is built on.

Leaf and node hashes, tree roots, inclusion and consistency proofs and their
verification (RFC 9162 §2.1), and the *frontier*: the roots of the perfect
subtrees a tree of size n is made of, which lets an append-only store keep the
tree's state in one row (docs/audit.md §8). Pure: hashes in, a hash, a proof or
a verdict out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "TreeBuilder",
    "consistency_proof",
    "decode_frontier",
    "encode_frontier",
    "frontier_append",
    "frontier_root",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE: Final = 32
"""Bytes of every hash here (SHA-256)."""
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
"""The root of the tree of no leaves: SHA-256 of the empty string (RFC 9162 §2.1.1)."""
_LEAF: Final = b"\x00"
_NODE: Final = b"\x01"


def leaf_hash(entry: bytes) -> bytes:
    """The 32-byte hash of one leaf, SHA-256(0x00 || entry) (RFC 9162 §2.1.1).

    Args:
        entry: The leaf's bytes (a log entry), of any length.
    """
    return hashlib.sha256(_LEAF + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The 32-byte hash of an interior node, SHA-256(0x01 || left || right) (RFC 9162 §2.1.1).

    Args:
        left: The left child's 32-byte hash.
        right: The right child's 32-byte hash.
    """
    return hashlib.sha256(_NODE + left + right).digest()


def root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle Tree Hash of a list of leaf hashes (RFC 9162 §2.1.1), in O(n).

    Args:
        leaves: The leaf hashes (``leaf_hash(entry)``, 32 bytes each), in order.

    Returns:
        The 32-byte root; :data:`EMPTY_ROOT` for no leaves.

    Raises:
        ValueError: If a leaf hash is not 32 bytes.
    """
    return _subtree(_leaf_hashes(leaves, len(leaves)), 0, len(leaves))


def inclusion_proof(leaves: Sequence[bytes], index: int, size: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of the first ``size`` leaves.

    RFC 9162 §2.1.3.1, ``PATH(index, D[0:size])``. Hashes fewer than ``size``
    nodes.

    Args:
        leaves: The log's leaf hashes (32 bytes each), at least ``size`` of them.
        index: The leaf's position, 0-based.
        size: The tree size the proof is for.

    Returns:
        The sibling hashes from the leaf's level up to the root's children.

    Raises:
        TypeError: If ``index`` or ``size`` is not an int.
        ValueError: If ``size`` is negative or more than the leaves given, if
            ``index`` is not in ``[0, size)``, or if a leaf hash is not 32 bytes.
    """
    _check_size("size", size, len(leaves))
    _check_index(index, size)
    hashes = _leaf_hashes(leaves, size)
    proof: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        mid = lo + _split(hi - lo)
        if index < mid:
            proof.append(_subtree(hashes, mid, hi))
            hi = mid
        else:
            proof.append(_subtree(hashes, lo, mid))
            lo = mid
    proof.reverse()
    return proof


def consistency_proof(leaves: Sequence[bytes], old_size: int, new_size: int) -> list[bytes]:
    """The proof that the tree of ``old_size`` leaves is a prefix of that of ``new_size``.

    RFC 9162 §2.1.4.1, ``PROOF(old_size, D[0:new_size])``; empty when the sizes
    are equal or ``old_size`` is 0 (every tree extends the empty one). Hashes
    fewer than ``new_size`` nodes.

    Args:
        leaves: The log's leaf hashes (32 bytes each), at least ``new_size``.
        old_size: The earlier tree size.
        new_size: The later tree size.

    Returns:
        The proof's hashes, in the RFC's order.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is negative, ``old_size > new_size``,
            ``new_size`` is more than the leaves given, or a leaf hash is not
            32 bytes.
    """
    _check_size("new_size", new_size, len(leaves))
    _check_size("old_size", old_size, new_size)
    hashes = _leaf_hashes(leaves, new_size)
    proof: list[bytes] = []
    if old_size in (0, new_size):
        return proof
    lo, hi, m, known = 0, new_size, old_size, True
    while m != hi - lo:
        mid = lo + _split(hi - lo)
        if m <= mid - lo:
            proof.append(_subtree(hashes, mid, hi))
            hi = mid
        else:
            proof.append(_subtree(hashes, lo, mid))
            m -= mid - lo
            lo, known = mid, False
    if not known:
        proof.append(_subtree(hashes, lo, hi))
    proof.reverse()
    return proof


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree ``root`` of ``size``.

    RFC 9162 §2.1.3.2.

    Args:
        leaf: The leaf's hash (``leaf_hash(entry)``, not the entry).
        index: The leaf's claimed position, 0-based.
        size: The tree size ``root`` is for.
        proof: The audit path (untrusted).
        root: The tree's 32-byte root hash.

    Returns:
        True only if the proof is well formed (32-byte hashes, the exact count)
        and leads from ``leaf`` to ``root``; a malformed proof, leaf or root is
        False, never an exception.

    Raises:
        TypeError: If ``leaf`` or ``root`` is not bytes, ``proof`` is not a
            sequence, or ``index`` or ``size`` is not an int.
        ValueError: If ``size`` is negative or ``index`` is not in ``[0, size)``.
    """
    _check_types(proof, leaf=leaf, root=root)
    _check_size("size", size, None)
    _check_index(index, size)
    if not (_is_hash(leaf) and _is_hash(root) and all(_is_hash(p) for p in proof)):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether ``proof`` shows the tree ``old_root`` is a prefix of the tree ``new_root``.

    RFC 9162 §2.1.4.2 for ``0 < old_size < new_size``. Equal sizes need an
    empty proof and equal roots; ``old_size`` 0 needs an empty proof and
    ``old_root`` equal to :data:`EMPTY_ROOT` (every tree extends the empty one).

    Args:
        old_size: The earlier tree size.
        new_size: The later tree size.
        old_root: The earlier tree's 32-byte root.
        new_root: The later tree's 32-byte root.
        proof: The consistency proof (untrusted).

    Returns:
        True only if the proof is well formed and consistent with both roots; a
        malformed proof or root is False, never an exception.

    Raises:
        TypeError: If a root is not bytes, ``proof`` is not a sequence, or a
            size is not an int.
        ValueError: If a size is negative or ``old_size > new_size``.
    """
    _check_types(proof, old_root=old_root, new_root=new_root)
    _check_size("new_size", new_size, None)
    _check_size("old_size", old_size, new_size)
    if not (_is_hash(old_root) and _is_hash(new_root) and all(_is_hash(p) for p in proof)):
        return False
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT and (new_size > 0 or new_root == EMPTY_ROOT)
    if old_size == new_size:
        return not proof and old_root == new_root
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


def frontier_append(frontier: tuple[bytes, ...], size: int, leaf: bytes) -> tuple[bytes, ...]:
    """The frontier of the tree of ``size + 1`` leaves, from that of ``size`` and the new leaf.

    The frontier of a tree of size n is the roots of its perfect subtrees, left
    to right and largest first, one per set bit of n. Hashes at most
    ``log2(size) + 1`` nodes.

    Args:
        frontier: The frontier of the tree of ``size`` leaves (``()`` for 0).
        size: The tree size before the append.
        leaf: The new leaf's hash (``leaf_hash(entry)``).

    Raises:
        TypeError: If ``frontier`` is not a tuple or ``size`` is not an int.
        ValueError: If ``size`` is negative, the frontier does not have one
            32-byte hash per set bit of ``size``, or ``leaf`` is not 32 bytes.
    """
    _check_frontier(frontier, size)
    if not _is_hash(leaf):
        raise ValueError("a leaf hash must be 32 bytes")
    nodes, h, n = list(frontier), leaf, size
    while n & 1:
        h = node_hash(nodes.pop(), h)
        n >>= 1
    nodes.append(h)
    return tuple(nodes)


def frontier_root(frontier: tuple[bytes, ...], size: int) -> bytes:
    """The root of a tree of ``size`` leaves from its frontier, equal to :func:`root` of them.

    Raises:
        TypeError: If ``frontier`` is not a tuple or ``size`` is not an int.
        ValueError: If ``size`` is negative or the frontier is not one 32-byte
            hash per set bit of ``size``.
    """
    _check_frontier(frontier, size)
    if not frontier:
        return EMPTY_ROOT
    r = frontier[-1]
    for h in reversed(frontier[:-1]):
        r = node_hash(h, r)
    return r


class TreeBuilder:
    """A tree grown one leaf at a time, for a verifier passing over a whole log.

    Equal to :func:`frontier_append` and :func:`frontier_root` leaf by leaf, but
    it keeps its own frontier, so an append checks only the new leaf and hashes
    one node on average.

    Args:
        frontier: The frontier to start from (``()``: an empty tree).
        size: Its tree size.

    Raises:
        ValueError, TypeError: As :func:`frontier_append` for a bad start.
    """

    __slots__ = ("_nodes", "size")

    def __init__(self, frontier: tuple[bytes, ...] = (), size: int = 0) -> None:
        _check_frontier(frontier, size)
        self._nodes = list(frontier)
        self.size = size

    def append(self, leaf: bytes) -> None:
        """Add the next leaf (its ``leaf_hash``).

        Raises:
            ValueError: If ``leaf`` is not 32 bytes.
        """
        if type(leaf) is not bytes or len(leaf) != HASH_SIZE:
            raise ValueError("a leaf hash must be 32 bytes")
        nodes, h, n = self._nodes, leaf, self.size
        while n & 1:
            h = hashlib.sha256(b"\x01" + nodes.pop() + h).digest()
            n >>= 1
        nodes.append(h)
        self.size += 1

    @property
    def frontier(self) -> tuple[bytes, ...]:
        """The current frontier (as :func:`frontier_append` gives it)."""
        return tuple(self._nodes)

    def root(self) -> bytes:
        """The current root (as :func:`root` of the leaves so far)."""
        if not self._nodes:
            return EMPTY_ROOT
        r = self._nodes[-1]
        for h in reversed(self._nodes[:-1]):
            r = hashlib.sha256(b"\x01" + h + r).digest()
        return r


def encode_frontier(frontier: tuple[bytes, ...]) -> bytes:
    """The frontier's stored form: its hashes concatenated, 32 bytes each.

    Raises:
        ValueError: If a hash is not 32 bytes.
    """
    if not all(_is_hash(h) for h in frontier):
        raise ValueError("a frontier hash must be 32 bytes")
    return b"".join(frontier)


def decode_frontier(data: bytes, size: int) -> tuple[bytes, ...]:
    """The frontier of a tree of ``size`` leaves from its stored form.

    Args:
        data: The :func:`encode_frontier` bytes.
        size: The tree size the frontier is for (stored beside it).

    Returns:
        The frontier: one 32-byte hash per set bit of ``size``.

    Raises:
        TypeError: If ``data`` is not bytes or ``size`` is not an int.
        ValueError: If ``size`` is negative or ``data`` is not
            ``32 * popcount(size)`` bytes.
    """
    if not isinstance(data, bytes):
        raise TypeError("data must be bytes")
    _check_size("size", size, None)
    count = size.bit_count()
    if len(data) != HASH_SIZE * count:
        raise ValueError(f"a frontier for size {size} is {HASH_SIZE * count} bytes")
    return tuple(data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE))


def _split(n: int) -> int:
    """The largest power of two below ``n`` (``n >= 2``): RFC 9162's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def _subtree(hashes: list[bytes], lo: int, hi: int) -> bytes:
    """The Merkle Tree Hash of ``hashes[lo:hi]``: level by level, pairs left to right.

    Pairing neighbours and carrying an odd last node up a level builds the same
    tree as RFC 9162's split at the largest power of two below the size.
    """
    if lo == hi:
        return EMPTY_ROOT
    level = hashes[lo:hi]
    sha256 = hashlib.sha256
    while len(level) > 1:
        pairs = iter(level)
        odd = level[-1] if len(level) & 1 else None
        level = [sha256(_NODE + a + b).digest() for a, b in zip(pairs, pairs, strict=False)]
        if odd is not None:
            level.append(odd)
    return level[0]


def _leaf_hashes(leaves: Sequence[bytes], size: int) -> list[bytes]:
    """The first ``size`` leaf hashes as a list, each checked to be 32 bytes."""
    hashes = list(leaves[:size])
    if not all(type(h) is bytes and len(h) == HASH_SIZE for h in hashes):
        raise ValueError("a leaf hash must be 32 bytes")
    return hashes


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _check_size(name: str, value: int, at_most: int | None) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int")
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    if at_most is not None and value > at_most:
        raise ValueError(f"{name} {value} is more than {at_most}")


def _check_index(index: int, size: int) -> None:
    if type(index) is not int:
        raise TypeError("index must be an int")
    if not 0 <= index < size:
        raise ValueError(f"index {index} is not a leaf of a tree of size {size}")


def _check_types(proof: object, **hashes: object) -> None:
    for name, value in hashes.items():
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes")
    if not isinstance(proof, Sequence) or isinstance(proof, str | bytes):
        raise TypeError("proof must be a sequence of hashes")


def _check_frontier(frontier: tuple[bytes, ...], size: int) -> None:
    _check_size("size", size, None)
    if not isinstance(frontier, tuple):
        raise TypeError("a frontier must be a tuple of hashes")
    if len(frontier) != size.bit_count() or not all(_is_hash(h) for h in frontier):
        raise ValueError(f"a frontier for size {size} is {size.bit_count()} hashes of 32 bytes")
