"""Verification of the call log: every entry, every link, the chain head and any anchors.

Needs only the stored rows and head and the engine's public keys; each finding
names the entry and the check (docs/audit.md §8, *The checks*, and what the log
cannot tell you).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.audit.calllog import HEAD_CONTEXT, decode_entry, decode_head, entry_head
from engine.state import GENESIS, LogRow

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


def verify(
    rows: Iterable[LogRow],
    head: tuple[Any, Any, Any, Any] | None,
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    anchors: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """Verify the call log: every entry, every link, the head and any anchors.

    Checks, each finding naming the entry (``seq``) it is about:

    - ``decodes``: the entry is a ``chit-call-log/1`` entry in ``chit-det/1``;
    - ``signature``: the entry's Ed25519 signature (over the chain head at that
      entry, :func:`entry_head`) verifies under a known key;
    - ``sequence``: the row's number is the entry's own, and numbers run 1, 2, ...
      without a gap (a deleted entry) or a repeat;
    - ``chain``: ``prev`` is the SHA-256 of the previous entry's bytes;
    - ``columns``: the row's ``time`` and ``agent`` columns (used by ``show``
      filters) equal the signed entry's;
    - ``head``: the signed head names the last entry's number and hash (a cut
      tail, or entries appended by someone without the key);
    - ``anchor``: each anchor's entry exists with that hash.

    Args:
        rows: Stored rows in ascending ``seq`` (:meth:`~engine.state.sqlite.SQLiteStore.log_rows`).
        head: The stored head ``(seq, hash, head bytes, sig)`` or ``None``.
        public_keys: Trusted key id to Ed25519 public key (retired keys included).
        anchors: ``{seq: "sha256:<hex>"}`` recorded earlier from a verified log.

    Returns:
        ``{"ok", "entries", "head": {"seq", "hash"} | None, "findings": [{"seq",
        "check", "reason"}]}``; ``ok`` iff there is no finding.
    """
    report = _Report()
    wanted = dict(anchors or {})
    seen_anchor: dict[int, str] = {}
    prev_seq, prev_hash, count = 0, GENESIS, 0
    for row in rows:
        count += 1
        seq = int(row.seq)
        data = row.entry if isinstance(row.entry, bytes) else b""
        digest = hashlib.sha256(data).digest()
        if seq in wanted:
            seen_anchor[seq] = "sha256:" + digest.hex()
        if seq <= prev_seq:
            report.add(seq, "sequence", f"entry {seq} repeats or precedes entry {prev_seq}")
        elif seq != prev_seq + 1:
            report.add(seq, "sequence", f"{_missing(prev_seq + 1, seq - 1)} before entry {seq}")
        try:
            entry = decode_entry(row.entry)
        except ValueError as exc:
            report.add(seq, "decodes", str(exc))
            prev_seq, prev_hash = seq, digest
            continue
        signed = entry_head(entry["seq"], data, entry["kid"], entry["time"])
        problem = _verify_sig(public_keys, entry["kid"], row.sig, HEAD_CONTEXT + signed)
        if problem:
            report.add(seq, "signature", problem)
        if entry["seq"] != seq:
            report.add(seq, "sequence", f"row {seq} holds entry {entry['seq']}")
        if entry["prev"] != prev_hash:
            after = f"entry {prev_seq}" if prev_seq else "the start of the log"
            lost = " (it starts a new chain: the head was lost)" if entry["prev"] == GENESIS else ""
            report.add(seq, "chain", f"entry {seq}'s prev is not the hash of {after}{lost}")
        if row.time != entry["time"] or row.agent != entry["agent"]:
            report.add(seq, "columns", f"row {seq}'s time or agent column differs from its entry")
        prev_seq, prev_hash = seq, digest
    shown_head: dict[str, Any] | None = None
    if head is None:
        if count:
            report.add(prev_seq, "head", "the chain head is missing")
    else:
        shown_head = _check_head(report, head, public_keys, count, prev_seq, prev_hash)
    for seq, expected in sorted(wanted.items()):
        if seq not in seen_anchor:
            report.add(seq, "anchor", f"anchored entry {seq} is missing")
        elif seen_anchor[seq] != expected:
            report.add(seq, "anchor", f"entry {seq}'s hash differs from the anchor")
    return {
        "ok": not report.findings,
        "entries": count,
        "head": shown_head,
        "findings": report.findings,
    }


def _check_head(
    report: _Report,
    head: tuple[Any, Any, Any, Any],
    public_keys: Mapping[str, Ed25519PublicKey],
    count: int,
    last_seq: int,
    last_hash: bytes,
) -> dict[str, Any] | None:
    col_seq, col_hash, data, sig = head
    try:
        decoded = decode_head(data)
    except ValueError:
        report.add(None, "head", "the chain head does not decode")
        return None
    seq, digest = decoded["seq"], decoded["hash"]
    problem = _verify_sig(public_keys, decoded["kid"], sig, HEAD_CONTEXT + data)
    if problem:
        report.add(seq, "head", f"the chain head: {problem}")
    if col_seq != seq or col_hash != digest:
        report.add(seq, "head", "the head's seq or hash column differs from the signed head")
    if not count:
        report.add(seq, "head", f"the head names entry {seq} but the log is empty")
    elif seq > last_seq:
        report.add(
            seq, "head", f"the head names entry {seq}; the log ends at {last_seq}: "
            + _missing(last_seq + 1, seq)
        )
    elif seq < last_seq:
        report.add(
            seq + 1, "head", f"the head names entry {seq} but the log goes on to {last_seq}"
        )
    elif digest != last_hash:
        report.add(seq, "head", f"entry {seq} is not the entry the head names")
    return {"seq": seq, "hash": "sha256:" + digest.hex()}
