"""Verification of the call log: every entry and link, the tree, every checkpoint, any anchors.

Needs only the stored rows, tree head and checkpoints and the engine's public
keys; each finding names the entry and the check (docs/audit.md §8, *The
checks*, and what the log cannot tell you).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.audit import merkle
from engine.audit.calllog import (
    HEAD_CONTEXT,
    LEGACY_VERSION,
    LOG_VERSION,
    decode_entry,
    decode_head,
    entry_head,
)
from engine.audit.checkpoints import Signed, read_checkpoints
from engine.state import GENESIS, LogCheckpoint, LogRow, LogTree

__all__ = ["verify"]


def _verify_sig(
    public_keys: Mapping[str, Ed25519PublicKey], kid: str, sig: object, message: bytes
) -> str | None:
    key = public_keys.get(kid)
    if key is None:
        return f"signed by unknown key id {kid!r}"
    if not isinstance(sig, bytes):
        return "the signature is missing"
    try:
        key.verify(sig, message)
    except InvalidSignature:
        return "the signature does not verify"
    return None


class _Report:
    def __init__(self) -> None:
        self.findings: list[dict[str, Any]] = []

    def add(self, seq: int | None, check: str, reason: str) -> None:
        self.findings.append({"seq": seq, "check": check, "reason": reason})


def _missing(first: int, last: int) -> str:
    return f"entry {first} is missing" if first == last else f"entries {first}..{last} are missing"


class _Walk:
    """What the pass over the rows has seen so far."""

    def __init__(self) -> None:
        self.count = 0
        self.seq = 0
        self.digest = GENESIS
        self.tree = merkle.TreeBuilder()
        self.roots: dict[int, bytes] = {}
        self.legacy: tuple[int, bytes] | None = None  # the last chit-call-log/1 entry
        self.newer_seen = False


def verify(
    rows: Iterable[LogRow],
    head: tuple[Any, Any, Any, Any] | None,
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    tree: LogTree | None = None,
    checkpoints: Iterable[LogCheckpoint] = (),
    given: Sequence[str] = (),
    anchors: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """Verify the call log: every entry and link, the tree, every checkpoint, the anchors.

    Checks, each finding naming the entry (``seq``) it is about:

    - ``decodes``: the entry is a call-log entry in ``chit-det/1``;
    - ``signature``: a ``chit-call-log/1`` entry's Ed25519 signature (over the
      chain head at that entry) verifies under a known key;
    - ``sequence``: numbers run 1, 2, ... without a gap or a repeat, and each
      row's number is its entry's own;
    - ``chain``: ``prev`` is the SHA-256 of the previous entry's bytes;
    - ``columns``: the row's ``time`` and ``agent`` columns equal the entry's;
    - ``checkpoint``: every stored checkpoint, and every one in ``given``, is
      signed by a known key under the log's origin and names the root of the
      recomputed tree at its size;
    - ``tree``: the stored tree head names the recomputed size, last entry,
      frontier and newest checkpoint;
    - ``head``: a ``chit-call-log/1`` chain head names the last entry of that form;
    - ``anchor``: each anchor's entry exists with that hash.

    Entries covered by a checkpoint whose signature verified are authenticated
    through the tree; those are decoded with the profile's C decoder and shape
    checks, the rest with the strict decoder. The report says which entries are
    chained but not yet signed.

    Args:
        rows: Stored rows in ascending ``seq``.
        head: The stored ``chit-call-log/1`` head ``(seq, hash, head bytes, sig)`` or ``None``.
        public_keys: Trusted key id to Ed25519 public key (retired keys included).
        tree: The stored tree head (``None`` if none).
        checkpoints: Stored checkpoints in ascending size (untrusted).
        given: Checkpoint notes from elsewhere (a witness, an earlier report),
            which must be of this log.
        anchors: ``{seq: "sha256:<hex>"}`` recorded earlier from a verified log.

    Returns:
        ``{"ok", "entries", "head": {"seq", "hash"} | None, "checkpoint":
        {"size", "root"} | None, "unsigned": {"first", "last"} | None,
        "findings": [{"seq", "check", "reason"}]}``: ``head`` is the last
        entry's number and hash (an anchor), ``checkpoint`` the newest one that
        verified, ``unsigned`` the entries after it that only the chain holds;
        ``ok`` iff there is no finding.
    """
    report = _Report()
    origin = tree.origin if tree is not None else None
    signed = read_checkpoints(checkpoints, given, public_keys, origin)
    for seq, reason in signed.problems:
        report.add(seq, "checkpoint", reason)
    covered = max((c.size for c in signed.good), default=0)
    wanted = dict(anchors or {})
    seen_anchor: dict[int, str] = {}
    sizes = {c.size for c in signed.good}
    walk = _Walk()
    for row in rows:
        _entry(report, walk, row, public_keys, strict=walk.count >= covered)
        if walk.seq in wanted:
            seen_anchor[walk.seq] = "sha256:" + walk.digest.hex()
        if walk.count in sizes:
            walk.roots[walk.count] = walk.tree.root()
    _check_checkpoints(report, signed, walk)
    _check_tree(report, tree, walk, signed)
    _check_legacy_head(report, head, public_keys, walk)
    for seq, expected in sorted(wanted.items()):
        if seq not in seen_anchor:
            report.add(seq, "anchor", f"anchored entry {seq} is missing")
        elif seen_anchor[seq] != expected:
            report.add(seq, "anchor", f"entry {seq}'s hash differs from the anchor")
    newest = max(signed.good, key=lambda c: c.size, default=None)
    unsigned = None
    if walk.newer_seen and walk.count > covered:
        unsigned = {"first": max(covered + 1, _first_newer(walk)), "last": walk.seq}
    return {
        "ok": not report.findings,
        "entries": walk.count,
        "head": {"seq": walk.seq, "hash": "sha256:" + walk.digest.hex()} if walk.count else None,
        "checkpoint": None
        if newest is None
        else {"size": newest.size, "root": "sha256:" + newest.root.hex()},
        "unsigned": unsigned,
        "findings": report.findings,
    }


def _first_newer(walk: _Walk) -> int:
    return walk.legacy[0] + 1 if walk.legacy is not None else 1


def _entry(
    report: _Report,
    walk: _Walk,
    row: LogRow,
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    strict: bool,
) -> None:
    walk.count += 1
    seq = int(row.seq)
    raw = row.entry
    data = raw if type(raw) is bytes else b""
    digest = hashlib.sha256(data).digest()
    walk.tree.append(hashlib.sha256(b"\x00" + data).digest())  # RFC 6962 leaf hash
    prev_seq, prev_hash = walk.seq, walk.digest
    walk.seq, walk.digest = seq, digest
    try:
        entry = decode_entry(raw, strict=strict)
    except ValueError as exc:
        _sequence(report, seq, prev_seq)
        report.add(seq, "decodes", str(exc))
        return
    if (  # the usual entry: every check passes, nothing to report
        entry["v"] == LOG_VERSION
        and seq == prev_seq + 1
        and entry["seq"] == seq
        and entry["prev"] == prev_hash
        and row.time == entry["time"]
        and row.agent == entry["agent"]
    ):
        walk.newer_seen = True
        return
    _sequence(report, seq, prev_seq)
    if entry["v"] == LEGACY_VERSION:
        if walk.newer_seen:
            report.add(seq, "decodes", f"a {LEGACY_VERSION} entry after newer entries")
        walk.legacy = (seq, digest)
        signed = entry_head(entry["seq"], data, entry["kid"], entry["time"])
        problem = _verify_sig(public_keys, entry["kid"], row.sig, HEAD_CONTEXT + signed)
        if problem:
            report.add(seq, "signature", problem)
    else:
        walk.newer_seen = True
    if entry["seq"] != seq:
        report.add(seq, "sequence", f"row {seq} holds entry {entry['seq']}")
    if entry["prev"] != prev_hash:
        after = f"entry {prev_seq}" if prev_seq else "the start of the log"
        lost = " (it starts a new chain: the head was lost)" if entry["prev"] == GENESIS else ""
        report.add(seq, "chain", f"entry {seq}'s prev is not the hash of {after}{lost}")
    if row.time != entry["time"] or row.agent != entry["agent"]:
        report.add(seq, "columns", f"row {seq}'s time or agent column differs from its entry")


def _sequence(report: _Report, seq: int, prev_seq: int) -> None:
    if seq <= prev_seq:
        report.add(seq, "sequence", f"entry {seq} repeats or precedes entry {prev_seq}")
    elif seq != prev_seq + 1:
        report.add(seq, "sequence", f"{_missing(prev_seq + 1, seq - 1)} before entry {seq}")


def _check_checkpoints(report: _Report, signed: Signed, walk: _Walk) -> None:
    for c in signed.good:
        where = "given" if c.given else "stored"
        if c.size > walk.seq:
            report.add(
                c.size, "checkpoint",
                f"a {where} checkpoint names {c.size} entries; the log ends at entry "
                f"{walk.seq}: " + _missing(walk.seq + 1, c.size),
            )
        elif c.size and walk.roots.get(c.size) != c.root:
            report.add(
                c.size, "checkpoint",
                f"the tree of the first {c.size} entries is not the one a {where} checkpoint"
                " signed (an entry up to it was changed, removed or added)",
            )
        elif not c.size and c.root != merkle.EMPTY_ROOT:
            report.add(0, "checkpoint", f"a {where} checkpoint of no entries has a wrong root")


def _check_tree(report: _Report, tree: LogTree | None, walk: _Walk, signed: Signed) -> None:
    if tree is None:
        if walk.newer_seen:
            report.add(walk.seq, "tree", "the tree head is missing")
        return
    if tree.size > walk.seq:
        report.add(
            walk.seq, "tree", f"the tree head names {tree.size} entries; the log ends at entry "
            f"{walk.seq}: " + _missing(walk.seq + 1, tree.size),
        )
        return
    if tree.size != walk.count:
        report.add(
            walk.seq, "tree",
            f"the tree head names {tree.size} entries; the log holds {walk.count}",
        )
        return
    if tree.last != (walk.digest if walk.count else GENESIS):
        report.add(walk.seq, "tree", "the tree head's last entry is not the log's last entry")
    if tree.frontier != merkle.encode_frontier(walk.tree.frontier):
        report.add(walk.seq, "tree", "the tree head's frontier is not the recomputed tree's")
    stored = [c.size for c in signed.good if not c.given]
    if tree.signed != max(stored, default=0):
        report.add(
            walk.seq, "tree",
            f"the tree head names a checkpoint of {tree.signed} entries; the newest stored"
            f" one that verifies has {max(stored, default=0)}",
        )


def _check_legacy_head(
    report: _Report,
    head: tuple[Any, Any, Any, Any] | None,
    public_keys: Mapping[str, Ed25519PublicKey],
    walk: _Walk,
) -> None:
    if head is None:
        if walk.legacy is not None and not walk.newer_seen:
            report.add(walk.seq, "head", "the chain head is missing")
        return
    col_seq, col_hash, data, sig = head
    try:
        decoded = decode_head(data)
    except ValueError:
        report.add(None, "head", "the chain head does not decode")
        return
    seq, digest = decoded["seq"], decoded["hash"]
    problem = _verify_sig(public_keys, decoded["kid"], sig, HEAD_CONTEXT + data)
    if problem:
        report.add(seq, "head", f"the chain head: {problem}")
    if col_seq != seq or col_hash != digest:
        report.add(seq, "head", "the head's seq or hash column differs from the signed head")
    last = walk.legacy
    if not walk.count:
        report.add(seq, "head", f"the head names entry {seq} but the log is empty")
    elif last is None:
        report.add(seq, "head", f"the head names entry {seq} but the log has no such entry")
    elif seq > last[0]:
        report.add(
            seq,
            "head",
            f"the head names entry {seq}; the log ends at {last[0]}: " + _missing(last[0] + 1, seq),
        )
    elif seq < last[0]:
        report.add(seq + 1, "head", f"the head names entry {seq} but the log goes on to {last[0]}")
    elif digest != last[1]:
        report.add(seq, "head", f"entry {seq} is not the entry the head names")
