"""Protected content sealed at rest: the ``chit-seal/1`` blob format (docs/sealing.md).

The functions here seal and open one blob (pure: bytes and keys in, bytes out;
only the random nonce comes from the operating system); :class:`Sealing` binds
them to a key source and the policy's protected paths, for the commit path
(engine/git/commit.py) and every read.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import Final, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engine.errors import RepositoryError

__all__ = [
    "MAGIC",
    "NONCE_BYTES",
    "NO_SEALING",
    "TAG_BYTES",
    "VERSION",
    "KeySource",
    "Sealing",
    "is_sealed",
    "open_sealed",
    "seal",
    "sealed_key_id",
]

MAGIC: Final = b"\x00chit-seal"
"""The first bytes of every sealed blob. The NUL makes git see binary data."""
VERSION: Final = 1
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
KEY_BYTES: Final = 32
_KID = re.compile(rb"[A-Za-z0-9_-]{1,64}")
_UNOPENED: Final = (
    "the sealed content at this path does not open (moved from another path, sealed "
    "under a key this engine does not hold, or altered); it is never shown"
)


def is_sealed(blob: bytes) -> bool:
    """Whether ``blob`` begins with the ``chit-seal`` magic (it claims to be sealed)."""
    return blob.startswith(MAGIC)


def _header(key_id: str) -> bytes:
    raw = key_id.encode("ascii")
    if not _KID.fullmatch(raw):
        raise ValueError("a sealing key id is 1 to 64 of [A-Za-z0-9_-]")
    return MAGIC + bytes([VERSION, len(raw)]) + raw


def _aad(header: bytes, path: str) -> bytes:
    return header + path.encode("utf-8")


def _seal_with_nonce(plaintext: bytes, path: str, key_id: str, key: bytes, nonce: bytes) -> bytes:
    """:func:`seal` with a given nonce: for test vectors only, never for real content."""
    if len(key) != KEY_BYTES or len(nonce) != NONCE_BYTES:
        raise ValueError("AES-256-GCM needs a 32-byte key and a 12-byte nonce")
    header = _header(key_id)
    return header + nonce + AESGCM(key).encrypt(nonce, bytes(plaintext), _aad(header, path))


def seal(plaintext: bytes, path: str, key_id: str, key: bytes) -> bytes:
    """Seal ``plaintext`` for ``path`` under one sealing key (a fresh random nonce).

    Args:
        plaintext: The file's content.
        path: The repository path the blob is written at (validated, NFC).
        key_id: The sealing key's id, recorded in the header.
        key: The 32-byte AES-256 key.

    Returns:
        The sealed blob (header, nonce, ciphertext and tag).

    Raises:
        ValueError: For a malformed key id or key (a configuration bug).
    """
    return _seal_with_nonce(plaintext, path, key_id, key, secrets.token_bytes(NONCE_BYTES))


def sealed_key_id(blob: bytes) -> str | None:
    """The key id a sealed blob's header names (unverified), or ``None`` if malformed."""
    if not is_sealed(blob) or len(blob) < len(MAGIC) + 2 or blob[len(MAGIC)] != VERSION:
        return None
    n = blob[len(MAGIC) + 1]
    start = len(MAGIC) + 2
    raw = blob[start : start + n]
    if len(raw) != n or not _KID.fullmatch(raw) or len(blob) < start + n + NONCE_BYTES + TAG_BYTES:
        return None
    return raw.decode("ascii")


def open_sealed(blob: bytes, path: str, lookup: Callable[[str], bytes | None]) -> bytes:
    """Open a sealed blob found at ``path``.

    Args:
        blob: The blob's bytes as git holds them (must be sealed).
        path: The repository path it was found at.
        lookup: Key id to 32-byte key, ``None`` for a key this engine cannot use.

    Returns:
        The plaintext.

    Raises:
        RepositoryError: ``seal_invalid`` for every way it can fail (bad header,
            unknown key, another path, altered bytes): one opaque error, no oracle.
    """
    key_id = sealed_key_id(blob)
    key = None if key_id is None else lookup(key_id)
    if key_id is None or key is None or len(key) != KEY_BYTES:
        raise RepositoryError("seal_invalid", _UNOPENED)
    header = _header(key_id)
    nonce = blob[len(header) : len(header) + NONCE_BYTES]
    try:
        return AESGCM(key).decrypt(nonce, blob[len(header) + NONCE_BYTES :], _aad(header, path))
    except InvalidTag:
        raise RepositoryError("seal_invalid", _UNOPENED) from None


class KeySource(Protocol):
    """Where :class:`Sealing` gets keys (``engine.auth.sealkeys.SealingKeyring``)."""

    def sealing_key(self) -> tuple[str, bytes]:
        """The ``(key id, key)`` that seals new content."""
        ...

    def lookup(self, key_id: str) -> bytes | None:
        """The key that opens content sealed under ``key_id``, or ``None``."""
        ...


class Sealing:
    """How one engine seals and opens content in a repository.

    A blob is sealed on commit when its path is protected, and also when its
    plaintext itself begins with :data:`MAGIC` (so every blob chit writes that
    starts with the magic is a seal chit made: reads stay unambiguous). A blob
    is opened on read whenever it begins with :data:`MAGIC`, at any path: a path
    the policy stopped protecting still reads as plaintext. A blob without the
    magic is returned as it is, even at a protected path (it was committed
    before the path was protected, outside chit: git already holds it in the
    clear).

    Args:
        keys: The sealing keys, or ``None`` for a repository opened without them
            (an auditor's): then nothing is sealed and sealed blobs never open.
        protected: Whether a repository path is protected (read on every call,
            so a reloaded policy applies at once).
    """

    def __init__(self, keys: KeySource | None, protected: Callable[[str], bool]) -> None:
        self._keys = keys
        self._protected = protected

    def __repr__(self) -> str:
        return "Sealing()"

    def protects(self, path: str) -> bool:
        """Whether ``path`` is protected by the policy now."""
        return self._protected(path)

    def must_seal(self, path: str, plaintext: bytes) -> bool:
        """Whether a blob written at ``path`` with this content is sealed."""
        return self.protects(path) or is_sealed(plaintext)

    def seal(self, path: str, plaintext: bytes) -> bytes:
        """Seal ``plaintext`` for ``path`` under the newest active sealing key.

        Raises:
            RepositoryError: ``seal_invalid`` if this repository has no sealing keys.
        """
        if self._keys is None:
            raise RepositoryError("seal_invalid", "this engine holds no sealing key")
        key_id, key = self._keys.sealing_key()
        return seal(plaintext, path, key_id, key)

    def open(self, path: str, blob: bytes) -> bytes:
        """The plaintext of a blob found at ``path`` (unsealed blobs as they are).

        Raises:
            RepositoryError: ``seal_invalid`` if it is sealed and does not open.
        """
        if not is_sealed(blob):
            return blob
        if self._keys is None:
            raise RepositoryError("seal_invalid", _UNOPENED)
        return open_sealed(blob, path, self._keys.lookup)


NO_SEALING: Final = Sealing(None, lambda _path: False)
"""For a repository opened without keys: seals nothing, opens nothing."""
