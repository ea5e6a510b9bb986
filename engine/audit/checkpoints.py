"""Reading the call log's checkpoints: which ones the engine's keys signed, for this log.

A checkpoint is a C2SP ``tlog-checkpoint`` signed note (engine/audit/note.py)
whose key name is the log's origin. Stored ones and ones an auditor kept are
read the same way; what they sign is compared with the recomputed tree by
engine/audit/logverify.py (docs/audit.md §8).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.audit import note
from engine.limits import LIMITS
from engine.state import LogCheckpoint

__all__ = ["Signed", "SignedCheckpoint", "open_checkpoint", "read_checkpoints"]


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint whose signature verified under one of the engine's keys.

    Attributes:
        origin: The log it names.
        size: The tree size it names.
        root: The root hash it names (32 bytes).
        given: True if it came from outside the store.
        text: The signed note.
    """

    origin: str
    size: int
    root: bytes
    given: bool
    text: str


@dataclass
class Signed:
    """The checkpoints that verified, and what was wrong with the rest."""

    good: list[SignedCheckpoint] = field(default_factory=list)
    problems: list[tuple[int | None, str]] = field(default_factory=list)


def open_checkpoint(
    text: object, public_keys: Mapping[str, Ed25519PublicKey], origin: str | None = None
) -> SignedCheckpoint:
    """Verify one checkpoint note under the engine's keys.

    Args:
        text: The note (untrusted).
        public_keys: Key id to Ed25519 public key (retired keys included).
        origin: The log it must be of; ``None``: whichever its body names.

    Returns:
        The checkpoint (``given`` False).

    Raises:
        note.NoteError: If it is not a checkpoint note, is of another log, or
            no signature of a known key under the log's origin verifies.
    """
    if not isinstance(text, str) or len(text.encode("utf-8", "replace")) > (
        LIMITS.calllog_checkpoint_bytes
    ):
        raise note.NoteError(
            f"not a checkpoint note of at most {LIMITS.calllog_checkpoint_bytes} bytes"
        )
    claimed = note.parse_checkpoint(_unverified_text(text))
    if origin is not None and claimed.origin != origin:
        raise note.NoteError("a checkpoint of another log")
    verifiers = [(claimed.origin, key.public_bytes_raw()) for key in public_keys.values()]
    signed_text, _signers = note.open_note(text, verifiers)
    body = note.parse_checkpoint(signed_text)
    return SignedCheckpoint(body.origin, body.size, body.root, False, text)


def _unverified_text(text: str) -> str:
    """A note's text before its signatures, not yet verified (to learn which log it names)."""
    split = text.rfind("\n\n")
    if split < 0:
        raise note.NoteError("a note must have a blank line before its signatures")
    return text[: split + 1]


def read_checkpoints(
    stored: Iterable[LogCheckpoint],
    given: Sequence[str],
    public_keys: Mapping[str, Ed25519PublicKey],
    origin: str | None,
) -> Signed:
    """Verify the stored checkpoints and the given ones.

    Args:
        stored: The store's checkpoints (untrusted rows).
        given: Notes from elsewhere; each must be of this log.
        public_keys: Key id to Ed25519 public key.
        origin: The log's origin from its tree head; ``None`` if there is
            none (then the first given, or first stored, checkpoint's).

    Returns:
        The verified checkpoints and, for each other one, ``(size or None, reason)``.
    """
    out = Signed()
    rows = list(stored)
    if origin is None:
        for text in [*given, *(r.note for r in rows)]:
            try:
                origin = note.parse_checkpoint(_unverified_text(text)).origin
                break
            except (note.NoteError, TypeError):
                continue
    for row in rows:
        size = row.size if type(row.size) is int else None
        try:
            signed = open_checkpoint(row.note, public_keys, origin)
        except note.NoteError as exc:
            out.problems.append((size, f"the stored checkpoint of {size} entries: {exc}"))
            continue
        if signed.size != size:
            out.problems.append(
                (size, f"the stored checkpoint row of {size} entries holds one of {signed.size}")
            )
            continue
        out.good.append(signed)
    for text in given:
        try:
            signed = open_checkpoint(text, public_keys, origin)
        except note.NoteError as exc:
            out.problems.append((None, f"the given checkpoint: {exc}"))
            continue
        out.good.append(
            SignedCheckpoint(signed.origin, signed.size, signed.root, True, signed.text)
        )
    return out
