"""The call log as a transparency log: appends to the Merkle tree, and signed checkpoints.

Entries (engine/audit/calllog.py) are the leaves of an RFC 6962 tree whose
frontier lives in the store's one tree-head row; every append is one transaction
serialised on that row. The log's state is published as C2SP ``tlog-checkpoint``
signed notes made with the engine's Ed25519 key. The format, the cadence and
the vectors: docs/audit.md §8, *How it is protected*.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Final

from engine.audit import merkle, note
from engine.audit.calllog import CallRecord, LogSigner, encode_entry
from engine.limits import LIMITS
from engine.state import GENESIS, LogBatch, LogCheckpoint, LogEntry, LogTree, Store

__all__ = ["ORIGIN_PREFIX", "append", "checkpoint", "checkpoint_note", "verifier_keys"]

ORIGIN_PREFIX: Final = "chit/call-log/"
"""A new log's origin is this and 16 random hex digits, fixed at its first entry."""


def _new_origin() -> str:
    return ORIGIN_PREFIX + secrets.token_hex(8)


def _start(store: Store) -> LogTree:
    """The tree head of a log that has none yet: empty, or entries of the first form.

    Entries written before checkpoints (``chit-call-log/1``, each signed) become
    the tree's first leaves, so one tree covers the whole log; the next entry's
    ``prev`` continues from their signed chain head. With no chain head (lost,
    or a log of the second form whose tree head was deleted) the next entry
    starts a new chain (``prev`` = 32 zero bytes), which verification names.
    """
    frontier: tuple[bytes, ...] = ()
    size = 0
    for row in store.log_rows():
        data = row.entry if isinstance(row.entry, bytes) else b""
        frontier = merkle.frontier_append(frontier, size, merkle.leaf_hash(data))
        size += 1
    last = GENESIS
    head = store.log_head()
    if head is not None and isinstance(head[1], bytes) and len(head[1]) == 32:
        last = head[1]
    return LogTree(_new_origin(), size, last, merkle.encode_frontier(frontier), 0, 0)


def checkpoint_note(tree: LogTree, root: bytes, signer: LogSigner) -> str:
    """The signed checkpoint of ``tree``: a C2SP ``tlog-checkpoint`` signed note.

    The note's key name is the log's origin; its signature is Ed25519 by the
    engine's active signing key.

    Args:
        tree: The tree head to sign.
        root: Its root hash (32 bytes).
        signer: The engine's signing key cache.

    Returns:
        The note text: the origin, size and base64 root lines, a blank line
        and the signature line ``— <origin> <base64 key hash and signature>``.
    """
    _kid, private = signer.current()
    body = note.format_checkpoint(tree.origin, tree.size, root)
    return note.sign_note(body, tree.origin, private)


def _signed(tree: LogTree, frontier: tuple[bytes, ...], signer: LogSigner, now: int) -> LogBatch:
    root = merkle.frontier_root(frontier, tree.size)
    text = checkpoint_note(tree, root, signer)
    head = LogTree(tree.origin, tree.size, tree.last, tree.frontier, tree.size, now)
    return LogBatch((), head, LogCheckpoint(tree.size, now, text))


def append(
    store: Store,
    records: Sequence[CallRecord],
    signer: LogSigner,
    *,
    now: int,
    checkpoint_entries: int | None = None,
) -> LogTree:
    """Append calls to the log in one transaction, with a checkpoint when one is due by count.

    Each record becomes the next ``chit-call-log/2`` entry (``seq`` and ``prev``
    from the tree head) and the next leaf. If, after them, more than
    ``checkpoint_entries`` entries are unsigned, the same transaction adds a
    checkpoint of the new tree.

    Args:
        store: The engine's state store.
        records: The calls, in call order.
        signer: The engine's signing key cache (used only for a checkpoint).
        now: Unix seconds, for a checkpoint's time.
        checkpoint_entries: Unsigned entries allowed before a checkpoint
            (default :attr:`~engine.limits.Limits.calllog_checkpoint_entries`).

    Returns:
        The tree head after the append.

    Raises:
        ProfileError: If a record is outside ``chit-det/1`` (a programming error).
        ValueError: If the stored tree head is malformed (its frontier does not
            fit its size); nothing is appended.
        sqlite3.Error: If the store fails; nothing is appended.
    """
    every = checkpoint_entries or LIMITS.calllog_checkpoint_entries

    def compose(tree: LogTree | None) -> LogBatch:
        head = tree if tree is not None else _start(store)
        frontier = merkle.decode_frontier(head.frontier, head.size)
        size, last = head.size, head.last
        entries = []
        for record in records:
            size += 1
            data = encode_entry(size, last, record)
            entries.append(LogEntry(size, record.time, record.agent, data))
            frontier = merkle.frontier_append(frontier, size - 1, merkle.leaf_hash(data))
            last = hashlib.sha256(data).digest()
        moved = LogTree(
            head.origin, size, last, merkle.encode_frontier(frontier), head.signed, head.signed_at
        )
        if size - moved.signed >= every:
            signed = _signed(moved, frontier, signer, now)
            return LogBatch(tuple(entries), signed.tree, signed.checkpoint)
        return LogBatch(tuple(entries), moved)

    tree = store.append_log(compose)
    if tree is None:  # compose always returns a batch
        raise RuntimeError("the call log's append wrote nothing")
    return tree


def checkpoint(store: Store, signer: LogSigner, *, now: int) -> LogTree | None:
    """Sign a checkpoint of the log if entries were appended since the last one.

    Args:
        store: The engine's state store.
        signer: The engine's signing key cache.
        now: Unix seconds, the checkpoint's time.

    Returns:
        The tree head (``None`` for a log with no tree head yet).

    Raises:
        ValueError: If the stored tree head is malformed.
        sqlite3.Error: If the store fails; nothing is written.
    """

    def compose(tree: LogTree | None) -> LogBatch | None:
        if tree is None or tree.size == tree.signed:
            return None
        return _signed(tree, merkle.decode_frontier(tree.frontier, tree.size), signer, now)

    return store.append_log(compose)


def verifier_keys(origin: str, public_keys: dict[str, bytes]) -> list[str]:
    """The log's verifier keys in the C2SP note form ``<origin>+<key hash>+<base64 key>``.

    Args:
        origin: The log's origin (the checkpoints' key name).
        public_keys: Key id to raw 32-byte Ed25519 public key.

    Returns:
        One verifier key per signing key, in the order given.
    """
    return [note.verifier_key(origin, public) for public in public_keys.values()]
