"""C2SP signed notes with Ed25519 keys, and the tlog-checkpoint text they carry.

A signed note (https://c2sp.org/signed-note) is UTF-8 text, a blank line and
signature lines ``— <key name> <base64(key hash || signature)>``; a checkpoint
(https://c2sp.org/tlog-checkpoint) is a note text naming a log's origin, tree
size and root hash. The call log's transparency form signs its checkpoints so
(docs/audit.md §8), readable by any tool that opens Go's
``golang.org/x/mod/sumdb/note``. Pure: text and keys in, text or a
:class:`NoteError` out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "ALG_ED25519",
    "MAX_SIGNATURES",
    "MAX_TREE_SIZE",
    "Checkpoint",
    "NoteError",
    "Verifier",
    "check_key_name",
    "format_checkpoint",
    "key_hash",
    "open_note",
    "parse_checkpoint",
    "parse_verifier_key",
    "sign_note",
    "verifier_key",
]

ALG_ED25519: Final = 0x01
"""Ed25519's signature type byte in key hashes and verifier keys (signed-note)."""
MAX_SIGNATURES: Final = 100
"""Signature lines a note may have; the spec asks verifiers to accept at least 16, Go takes 100."""
MAX_TREE_SIZE: Final = 2**64 - 1
"""The largest tree size a checkpoint may name (an unsigned 64-bit count, as every log uses)."""
_DASH: Final = "\u2014 "  # em dash, space: the start of every signature line
_CONTROL: Final = re.compile("[\x00-\x09\x0b-\x1f]")  # ASCII controls other than newline
_HEX8: Final = re.compile("[0-9a-f]{8}")
_SIZE: Final = re.compile("0|[1-9][0-9]{0,19}")


class NoteError(ValueError):
    """A malformed or unverifiable note, verifier key or checkpoint.

    Messages say which rule was broken and where (a line number), never key
    material, signatures or hashes.
    """


class Verifier(NamedTuple):
    """A known key: its name and 32-byte Ed25519 public key, as :func:`parse_verifier_key` gives."""

    name: str
    public: bytes


def check_key_name(name: str) -> None:
    """Refuse a key name the signed-note spec does not allow.

    A name is non-empty UTF-8 without Unicode spaces (Go's ``unicode.IsSpace``)
    or ``+``; control characters are refused too, as a note cannot hold them.

    Raises:
        TypeError: If ``name`` is not a str.
        NoteError: If the name is not allowed.
    """
    if not isinstance(name, str):
        raise TypeError("a key name must be a str")
    if not _is_key_name(name):
        raise NoteError("a key name must be non-empty UTF-8 without spaces, '+' or controls")


def key_hash(name: str, public: bytes) -> bytes:
    """The 4-byte key hash, SHA-256(name || 0x0A || 0x01 || public key)[:4] (signed-note).

    Args:
        name: The key name (:func:`check_key_name`).
        public: The 32-byte Ed25519 public key.

    Raises:
        TypeError: If ``name`` is not a str or ``public`` is not bytes.
        NoteError: If the name is not allowed or the key is not 32 bytes.
    """
    check_key_name(name)
    if not isinstance(public, bytes):
        raise TypeError("a public key must be bytes")
    if len(public) != 32:
        raise NoteError("an Ed25519 public key must be 32 bytes")
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public).digest()[:4]


def verifier_key(name: str, public: bytes) -> str:
    """The verifier key text ``<name>+<8 hex key hash>+<base64(0x01 || public key)>``.

    Signed-note, *Verifier keys*.

    Raises:
        TypeError: If ``name`` is not a str or ``public`` is not bytes.
        NoteError: If the name is not allowed or the key is not 32 bytes.
    """
    digest = key_hash(name, public)
    return f"{name}+{digest.hex()}+{_b64(bytes([ALG_ED25519]) + public)}"


def parse_verifier_key(text: str) -> Verifier:
    """A verifier key's name and public key, checked strictly (signed-note, *Verifier keys*).

    The key hash must be 8 lowercase hex digits equal to :func:`key_hash`; the
    key must be canonical standard base64 of ``0x01`` and 32 bytes. The base64
    may itself hold ``+``: the text splits at its first two.

    Raises:
        TypeError: If ``text`` is not a str.
        NoteError: If any part is malformed, not Ed25519, or the hash does not match.
    """
    if not isinstance(text, str):
        raise TypeError("a verifier key must be a str")
    name, _, rest = text.partition("+")
    digest, _, key64 = rest.partition("+")
    check_key_name(name)
    if not _HEX8.fullmatch(digest):
        raise NoteError("a verifier key's hash must be 8 lowercase hex digits")
    raw = _unb64(key64)
    if raw is None or len(raw) != 33:
        raise NoteError("a verifier key must end in base64 of a type byte and a 32-byte key")
    if raw[0] != ALG_ED25519:
        raise NoteError("a verifier key must be of type Ed25519 (0x01)")
    if key_hash(name, raw[1:]).hex() != digest:
        raise NoteError("a verifier key's hash does not match its name and key")
    return Verifier(name, raw[1:])


def sign_note(text: str, name: str, private: Ed25519PrivateKey) -> str:
    r"""The signed note of ``text``: the text, a blank line and one signature line.

    Args:
        text: Non-empty UTF-8 ending in a newline, without control characters
            other than newline; it may hold empty lines (the signatures start
            after the last one, which this adds).
        name: The key name (:func:`check_key_name`).
        private: The Ed25519 signing key.

    Returns:
        ``text + "\n— <name> <base64(key hash || signature)>\n"``, the
        signature over the UTF-8 bytes of ``text`` (RFC 8032, deterministic).

    Raises:
        TypeError: If an argument is of the wrong type.
        NoteError: If the text or the name is not allowed.
    """
    check_key_name(name)
    if not isinstance(text, str):
        raise TypeError("a note text must be a str")
    if not text.endswith("\n"):
        raise NoteError("a note text must be non-empty and end in a newline")
    if _CONTROL.search(text):
        raise NoteError("a note text must not hold control characters other than newline")
    message = _utf8(text, "a note text")
    if not isinstance(private, Ed25519PrivateKey):
        raise TypeError("the signing key must be an Ed25519PrivateKey")
    public = private.public_key().public_bytes_raw()
    signature = key_hash(name, public) + private.sign(message)
    return f"{text}\n{_DASH}{name} {_b64(signature)}\n"


def open_note(
    note: str | bytes, verifiers: Mapping[str, bytes] | Iterable[tuple[str, bytes]]
) -> tuple[str, list[str]]:
    """The text of a signed note and who of ``verifiers`` signed it (signed-note, *Signatures*).

    Signatures whose name and key hash match no known key are ignored; each
    that does is verified, and one that fails refuses the whole note. At least
    one must verify. Stricter than Go's ``note.Open`` in two ways a signer
    never trips: base64 must be canonical, and every signature of a known key
    is checked, not only its first.

    Args:
        note: The note, as text or UTF-8 bytes (untrusted).
        verifiers: The known keys: a mapping of name to 32-byte public key, or
            ``(name, public key)`` pairs (:class:`Verifier`) when a name has
            several keys.

    Returns:
        ``(text, signers)``: the signed text, ending in a newline, and the names
        of the known keys whose signatures verified, in note order, each once.

    Raises:
        TypeError: If ``note`` or ``verifiers`` is of the wrong type.
        NoteError: If a verifier key is malformed or two share a name and key
            hash; if the note is not UTF-8, holds control characters, has no
            blank line before its signatures or a malformed or excess (over
            :data:`MAX_SIGNATURES`) signature line; if a known key's signature
            does not verify; or if no known key signed it.
    """
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("a note must be UTF-8") from None
    elif not isinstance(note, str):
        raise TypeError("a note must be str or bytes")
    known = _known(verifiers)
    _utf8(note, "a note")
    if _CONTROL.search(note):
        raise NoteError("a note must not hold control characters other than newline")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("a note must have a blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block.endswith("\n"):
        raise NoteError("a note must end in a signature line and a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"a note may have at most {MAX_SIGNATURES} signature lines")
    message = text.encode("utf-8")
    signers: list[str] = []
    for number, line in enumerate(lines, 1):
        name, digest, signature = _signature_line(line, number)
        public = known.get((name, digest))
        if public is None:
            continue
        try:
            public.verify(signature, message)
        except InvalidSignature:
            raise NoteError(
                f"signature line {number} is by a known key and does not verify"
            ) from None
        if name not in signers:
            signers.append(name)
    if not signers:
        raise NoteError("no signature of the note is by a known key")
    return text, signers


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's checkpoint (tlog-checkpoint, *Note text*); invalid ones cannot be built.

    Attributes:
        origin: The log's identity, a non-empty line.
        size: The tree size, 0 to :data:`MAX_TREE_SIZE`.
        root: The 32-byte RFC 6962 root hash at that size.
        extensions: Extension lines, each non-empty (opaque to this module).

    Raises:
        TypeError: If a field is of the wrong type.
        NoteError: If a field breaks a rule above.
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Check every field; store ``extensions`` as a tuple."""
        _check_line(self.origin, "the origin")
        if type(self.size) is not int:
            raise TypeError("a tree size must be an int")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise NoteError("a tree size must be between 0 and 2**64 - 1")
        if not isinstance(self.root, bytes):
            raise TypeError("a root hash must be bytes")
        if len(self.root) != 32:
            raise NoteError("a root hash must be 32 bytes")
        if not isinstance(self.extensions, tuple | list):
            raise TypeError("extensions must be a sequence of lines")
        object.__setattr__(self, "extensions", tuple(self.extensions))
        for line in self.extensions:
            _check_line(line, "an extension line")


def format_checkpoint(origin: str, size: int, root: bytes, extensions: Sequence[str] = ()) -> str:
    r"""The checkpoint text ``origin\nsize\nbase64(root)\n`` and any extension lines.

    Raises:
        TypeError: If an argument is of the wrong type.
        NoteError: If an argument breaks a :class:`Checkpoint` rule.
    """
    if isinstance(extensions, str):
        raise TypeError("extensions must be a sequence of lines, not one str")
    checkpoint = Checkpoint(origin, size, root, tuple(extensions))
    lines = [checkpoint.origin, str(checkpoint.size), _b64(checkpoint.root), *checkpoint.extensions]
    return "".join(line + "\n" for line in lines)


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint a note text holds, read strictly (tlog-checkpoint, *Note text*).

    Args:
        text: The signed text (:func:`open_note`): at least three lines, each
            ending in a newline: the origin, the size in decimal without leading
            zeros, the root hash in canonical standard base64, then any
            non-empty extension lines.

    Raises:
        TypeError: If ``text`` is not a str.
        NoteError: If the text breaks a rule above.
    """
    if not isinstance(text, str):
        raise TypeError("a checkpoint must be a str")
    if not text.endswith("\n"):
        raise NoteError("a checkpoint must end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise NoteError("a checkpoint has at least three lines: origin, tree size, root hash")
    origin, size, root, *extensions = lines
    if not _SIZE.fullmatch(size):
        raise NoteError("a checkpoint's tree size must be decimal digits without leading zeros")
    raw = _unb64(root)
    if raw is None:
        raise NoteError("a checkpoint's root hash must be canonical standard base64")
    return Checkpoint(origin, int(size), raw, tuple(extensions))


def _is_key_name(name: str) -> bool:
    if not name or "+" in name or _CONTROL.search(name) or any(c.isspace() for c in name):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _known(
    verifiers: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
) -> dict[tuple[str, bytes], Ed25519PublicKey]:
    """The known keys by ``(name, key hash)``, each checked."""
    pairs = verifiers.items() if isinstance(verifiers, Mapping) else verifiers
    raw: dict[tuple[str, bytes], bytes] = {}
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError("each verifier must be a (name, public key) pair")
        name, public = pair
        index = (name, key_hash(name, public))
        if raw.setdefault(index, public) != public:
            raise NoteError("two verifier keys share a name and key hash")
    return {index: Ed25519PublicKey.from_public_bytes(public) for index, public in raw.items()}


def _signature_line(line: str, number: int) -> tuple[str, bytes, bytes]:
    """``(name, key hash, signature)`` of one signature line (signed-note, *Format*)."""
    name, _, encoded = line.removeprefix(_DASH).partition(" ")
    raw = _unb64(encoded) if line.startswith(_DASH) and _is_key_name(name) else None
    if raw is None or len(raw) < 5:
        raise NoteError(f"signature line {number} is malformed")
    return name, raw[:4], raw[4:]


def _check_line(line: str, what: str) -> None:
    if not isinstance(line, str):
        raise TypeError(f"{what} must be a str")
    if not line or "\n" in line or _CONTROL.search(line):
        raise NoteError(f"{what} must be one non-empty line without control characters")
    _utf8(line, what)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise NoteError(f"{what} must be valid UTF-8") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes | None:
    """The bytes of canonical, padded standard base64 ``text``, or None."""
    if not text:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if _b64(raw) == text else None
