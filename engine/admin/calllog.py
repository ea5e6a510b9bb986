"""The auditor's view of the call log: show, verify, checkpoints and proofs.

``chit audit log show|verify|checkpoint|prove`` call these, with the
``--since`` and ``--anchor`` parsers. The log's format and checks are in
docs/audit.md §8.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.admin.state import state_store
from engine.audit import calllog, checkpoints, logverify, merkle, note
from engine.limits import LIMITS
from engine.state import Store

__all__ = [
    "call_log_checkpoint",
    "call_log_entries",
    "call_log_verifier_keys",
    "parse_anchor",
    "parse_since",
    "prove_consistency",
    "prove_inclusion",
    "read_checkpoint_file",
    "verify_call_log",
]

_ANCHOR = re.compile(r"^([0-9]{1,18}):(sha256:[0-9a-f]{64})$")


def parse_since(text: str) -> int:
    """Parse ``--since``: unix seconds, or ISO-8601 (no zone: UTC).

    Raises:
        ValueError: If ``text`` is neither.
    """
    text = text.strip()
    if re.fullmatch(r"[0-9]{1,12}", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("--since is unix seconds or ISO-8601, e.g. 2026-12-01T09:30Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


def parse_anchor(text: str) -> tuple[int, str]:
    """Parse ``--anchor SEQ:sha256:HEX`` (an entry and hash from an earlier verify).

    Raises:
        ValueError: If ``text`` is not of that form.
    """
    match = _ANCHOR.fullmatch(text.strip())
    if match is None:
        raise ValueError("--anchor is SEQ:sha256:<64 hex digits>, as `verify --json` prints")
    return int(match.group(1)), match.group(2)


def read_checkpoint_file(path: str | os.PathLike[str]) -> str:
    """Read a checkpoint note from a file (``--checkpoint FILE``), unverified.

    Raises:
        ValueError: If the file is larger than ``calllog_checkpoint_bytes`` or not UTF-8.
        OSError: If it cannot be read.
    """
    with open(path, "rb") as fh:
        raw = fh.read(LIMITS.calllog_checkpoint_bytes + 1)
    if len(raw) > LIMITS.calllog_checkpoint_bytes:
        raise ValueError(f"the checkpoint file is over {LIMITS.calllog_checkpoint_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the checkpoint file is not UTF-8 text") from None


def verify_call_log(
    home: str | os.PathLike[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    anchors: Mapping[int, str] | None = None,
    given: Sequence[str] = (),
    state: str | None = None,
) -> dict[str, Any]:
    """Verify the home's call log (:func:`engine.audit.logverify.verify`).

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).
        public_keys: Trusted key id to Ed25519 public key.
        anchors: ``{seq: "sha256:<hex>"}`` from an earlier verify.
        given: Checkpoint notes kept elsewhere, each checked against the log.

    Raises:
        ConfigurationError: If the home has no state store.
    """
    with state_store(home, state, must_exist=True) as store:
        return logverify.verify(
            store.log_rows(), store.log_head(), public_keys, tree=store.log_tree(),
            checkpoints=store.log_checkpoints(), given=given, anchors=anchors,
        )


def call_log_checkpoint(
    home: str | os.PathLike[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    state: str | None = None,
) -> dict[str, Any]:
    """The newest stored checkpoint whose signature verifies.

    Returns:
        ``{"origin", "size", "root": base64, "time", "note"}``.

    Raises:
        ConfigurationError: If the home has no state store.
        ValueError: If the log has no checkpoint that verifies yet.
    """
    with state_store(home, state, must_exist=True) as store:
        stored = _stored(store, public_keys)
        if not stored:
            raise ValueError("the call log has no signed checkpoint yet (one is made within a "
                             "second of an engine's first entry, and when it stops)")
        newest = stored[max(stored)]
        when = next(r.time for r in store.log_checkpoints() if r.size == newest.size)
    return {"origin": newest.origin, "size": newest.size, "root": _b64(newest.root),
            "time": when, "note": newest.text}


def call_log_verifier_keys(
    home: str | os.PathLike[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    *,
    state: str | None = None,
) -> list[str]:
    """The log's verifier keys in the C2SP note form ``<origin>+<key hash>+<base64 key>``.

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).
        public_keys: The engine's public keys, the active one first.

    Returns:
        One line per key.

    Raises:
        ConfigurationError: If the home has no state store.
        ValueError: If the log has no entry yet (its origin is fixed by the first).
    """
    with state_store(home, state, must_exist=True) as store:
        tree = store.log_tree()
    if tree is None:
        raise ValueError("the call log has no entry yet; its origin is fixed by the first")
    return [note.verifier_key(tree.origin, key.public_bytes_raw()) for key in public_keys.values()]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _leaves(store: Store, size: int) -> list[bytes]:
    leaves: list[bytes] = []
    for row in store.log_rows():
        if len(leaves) == size:
            break
        leaves.append(merkle.leaf_hash(row.entry if isinstance(row.entry, bytes) else b""))
    if len(leaves) < size:
        raise ValueError(f"the log has {len(leaves)} entries, fewer than the {size} asked for")
    return leaves


def _stored(
    store: Store, public_keys: Mapping[str, Ed25519PublicKey]
) -> dict[int, checkpoints.SignedCheckpoint]:
    """The stored checkpoints that verify, by size."""
    tree = store.log_tree()
    out = {}
    for row in store.log_checkpoints():
        try:
            signed = checkpoints.open_checkpoint(
                row.note, public_keys, tree.origin if tree else None
            )
        except note.NoteError:
            continue
        out[signed.size] = signed
    return out


def _tree_at(
    store: Store,
    public_keys: Mapping[str, Ed25519PublicKey],
    which: str | int | None,
) -> checkpoints.SignedCheckpoint:
    """The checkpoint named by a note (verified), a size (stored), or ``None`` (the newest)."""
    if isinstance(which, str):
        tree = store.log_tree()
        try:
            return checkpoints.open_checkpoint(which, public_keys, tree.origin if tree else None)
        except note.NoteError as exc:
            raise ValueError(f"the checkpoint does not verify: {exc}") from None
    stored = _stored(store, public_keys)
    if not stored:
        raise ValueError("the call log has no signed checkpoint yet")
    size = max(stored) if which is None else which
    if size not in stored:
        raise ValueError(f"no signed checkpoint of {size} entries is stored")
    return stored[size]


def prove_inclusion(
    home: str | os.PathLike[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    entry: int,
    checkpoint: str | None = None,
    *,
    state: str | None = None,
) -> dict[str, Any]:
    """An RFC 6962 inclusion proof of entry ``entry`` in a checkpoint's tree.

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).
        public_keys: Trusted key id to Ed25519 public key.
        entry: The entry's sequence number (leaf ``entry - 1``).
        checkpoint: A checkpoint note (verified first); ``None``: the newest stored.

    Returns:
        ``{"entry", "leaf_index", "tree_size", "leaf_hash", "root", "proof":
        [hash, ...], "checkpoint"}``, hashes in standard base64. The proof was
        checked against the checkpoint's root before it is returned.

    Raises:
        ConfigurationError: If the home has no state store.
        ValueError: If the checkpoint does not verify, the entry is not in its
            tree, or the stored log does not match it.
    """
    with state_store(home, state, must_exist=True) as store:
        signed = _tree_at(store, public_keys, checkpoint)
        size, root = signed.size, signed.root
        if not 1 <= entry <= size:
            raise ValueError(f"entry {entry} is not in the checkpoint's tree of {size} entries")
        leaves = _leaves(store, size)
    proof = merkle.inclusion_proof(leaves, entry - 1, size)
    if not merkle.verify_inclusion(leaves[entry - 1], entry - 1, size, proof, root):
        raise ValueError(
            "the stored log does not match the checkpoint; run `chit audit log verify`"
        )
    return {"entry": entry, "leaf_index": entry - 1, "tree_size": size,
            "leaf_hash": _b64(leaves[entry - 1]), "root": _b64(root),
            "proof": [_b64(h) for h in proof], "checkpoint": signed.text}


def prove_consistency(
    home: str | os.PathLike[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    old: str | int,
    new: str | int | None = None,
    *,
    state: str | None = None,
) -> dict[str, Any]:
    """An RFC 6962 consistency proof between two checkpoints' trees.

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).
        public_keys: Trusted key id to Ed25519 public key.
        old: The older checkpoint's note, or its tree size.
        new: The newer checkpoint's note, or its size; ``None``: the newest stored.

    Returns:
        ``{"old_size", "new_size", "old_root", "new_root", "proof": [hash, ...]}``,
        hashes in standard base64, checked against both roots before it is
        returned (a size is taken to mean the stored checkpoint of that size).

    Raises:
        ConfigurationError: If the home has no state store.
        ValueError: If a checkpoint does not verify, the sizes are out of order,
            or the stored log does not match them.
    """
    with state_store(home, state, must_exist=True) as store:
        older, newer = _tree_at(store, public_keys, old), _tree_at(store, public_keys, new)
        old_size, new_size, old_root, new_root = older.size, newer.size, older.root, newer.root
        if not 0 < old_size <= new_size:
            raise ValueError(f"the old tree ({old_size}) must be non-empty and no larger than "
                             f"the new one ({new_size})")
        leaves = _leaves(store, new_size)
    proof = merkle.consistency_proof(leaves, old_size, new_size)
    if not merkle.verify_consistency(old_size, new_size, old_root, new_root, proof):
        raise ValueError("the stored log does not match the checkpoints; "
                         "run `chit audit log verify`")
    return {"old_size": old_size, "new_size": new_size, "old_root": _b64(old_root),
            "new_root": _b64(new_root), "proof": [_b64(h) for h in proof]}


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def call_log_entries(
    home: str | os.PathLike[str],
    *,
    agent: str | None = None,
    since: int | None = None,
    state: str | None = None,
) -> Iterator[dict[str, Any]]:
    """The stored entries, oldest first, as JSON-ready dicts (``prev`` in hex).

    Unverified: ``chit audit log verify`` says whether they can be trusted. An
    entry that does not decode is shown as ``{"seq", "undecodable": reason}``.

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).
        agent: Only entries for this agent (``-``: tokens that did not verify;
            ``(operator)``: freeze changes).
        since: Only entries at or after this time, unix seconds.

    Raises:
        ConfigurationError: If the home has no state store.
    """
    with state_store(home, state, must_exist=True) as store:
        for row in store.log_rows(agent=agent, since=since):
            try:
                entry = calllog.decode_entry(row.entry)
            except ValueError as exc:
                yield {"seq": row.seq, "undecodable": str(exc)}
                continue
            if (agent is not None and entry["agent"] != agent) or (
                since is not None and entry["time"] < since
            ):
                continue
            yield _plain(entry)
