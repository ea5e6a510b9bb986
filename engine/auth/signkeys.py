"""Engine signing keys (Ed25519, RFC 8032): they sign provenance records and the call log.

``<home>/keys/signing/<kid>.json`` holds ``{"kid", "alg", "created", "status",
"public", "seed"}``; one key is active and signs, retired ones never sign but
their public keys are exported (``chit-engine-keys/1``) so old records verify.
Layout: keys/README.md; the export: docs/provenance-format.md §6.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from engine.auth._keyfiles import (
    b64,
    check_key_doc,
    keys_in,
    locked,
    make_key_dirs,
    new_key_id,
    next_created,
    read_key_doc,
    unb64,
    write_key_doc,
)
from engine.errors import ConfigurationError

__all__ = [
    "PUBLIC_KEYS_FORMAT",
    "SIGNING_ALG",
    "SigningKey",
    "active_signing_key",
    "create_signing_key",
    "export_public_keys",
    "is_key_id",
    "load_public_keys",
    "rotate_signing_key",
    "signing_keys",
]

SIGNING_ALG = "ed25519"

_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_key_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` has a key id's form: 1 to 64 of ``A-Z a-z 0-9 _ -``.

    The form of every signing key id this home makes (``e<yyyymmdd>-<8 hex>``)
    or imports (a published public key's ``kid``).
    """
    return isinstance(value, str) and _KEY_ID.fullmatch(value) is not None
PUBLIC_KEYS_FORMAT = "chit-engine-keys/1"


@dataclass(frozen=True)
class SigningKey:
    """One engine signing key (Ed25519). The private seed never appears in ``repr``.

    Attributes:
        key_id: Public identifier recorded in every provenance record it signs.
        created: Creation time, unix seconds.
        status: ``active`` (the newest active key signs) or ``retired`` (never
            signs again; its public key still verifies the records it signed).
        public: The 32-byte raw public key (RFC 8032).
    """

    key_id: str
    created: int
    status: str
    public: bytes
    seed: bytes = field(repr=False)

    def sign(self, message: bytes) -> bytes:
        """Sign ``message`` (bytes) with Ed25519; returns the 64-byte signature."""
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


def signing_keys(home: str | os.PathLike[str]) -> list[SigningKey]:
    """Every engine signing key in ``<home>/keys/signing``, newest first.

    Raises:
        ConfigurationError: If the folder is missing, or a key file is malformed
            or readable by group or others.
    """
    return keys_in(_signing_dir(home), _load_signing_file, "signing")


def active_signing_key(home: str | os.PathLike[str]) -> SigningKey:
    """The newest active signing key: the one that signs provenance records.

    Raises:
        ConfigurationError: As for :func:`signing_keys`, or if none is active.
    """
    for key in signing_keys(home):
        if key.status == "active":
            return key
    raise ConfigurationError("the keyring holds no active signing key; run `chit keys rotate`")


def create_signing_key(home: str | os.PathLike[str], *, now: int | None = None) -> SigningKey:
    """Create ``<home>/keys/signing`` with one Ed25519 key, if it holds none.

    Returns:
        The new key, or the active signing key if one already existed.

    Raises:
        ConfigurationError: If existing signing keys cannot be loaded.
    """
    folder = _signing_dir(home)
    make_key_dirs(home, folder)
    with locked(home):
        if any(folder.glob("*.json")):
            return active_signing_key(home)
        key = _new_signing_key(int(time.time()) if now is None else now)
        _write_signing_key(folder, key)
    return key


def rotate_signing_key(home: str | os.PathLike[str], *, now: int | None = None) -> SigningKey:
    """Add a new signing key and retire the others (they keep verifying old records).

    Raises:
        ConfigurationError: If the signing keys cannot be loaded.
    """
    with locked(home):
        existing = signing_keys(home)
        key = _new_signing_key(next_created(existing, now))
        folder = _signing_dir(home)
        _write_signing_key(folder, key)
        for old in existing:
            if old.status == "active":
                retired = SigningKey(old.key_id, old.created, "retired", old.public, old.seed)
                _write_signing_key(folder, retired, replace=True)
    return key


def export_public_keys(home: str | os.PathLike[str]) -> dict[str, object]:
    """The engine's public keys as a ``chit-engine-keys/1`` document (no secret).

    Returns:
        ``{"format": "chit-engine-keys/1", "keys": [{"kid", "alg", "created",
        "status", "public"}]}``, newest first; ``public`` is the raw 32-byte
        Ed25519 key, unpadded base64url. Retired keys are included: they
        verify the records they signed.

    Raises:
        ConfigurationError: As for :func:`signing_keys`.
    """
    return {
        "format": PUBLIC_KEYS_FORMAT,
        "keys": [
            {
                "kid": k.key_id,
                "alg": SIGNING_ALG,
                "created": k.created,
                "status": k.status,
                "public": b64(k.public),
            }
            for k in signing_keys(home)
        ],
    }


def load_public_keys(doc: object) -> dict[str, Ed25519PublicKey]:
    """Parse a ``chit-engine-keys/1`` document (untrusted JSON) into verifying keys.

    Args:
        doc: The decoded JSON document.

    Returns:
        Key id to public key.

    Raises:
        ValueError: If the document is not a well-formed ``chit-engine-keys/1``.
    """
    if not isinstance(doc, dict) or doc.get("format") != PUBLIC_KEYS_FORMAT:
        raise ValueError(f"not a {PUBLIC_KEYS_FORMAT} document")
    entries = doc.get("keys")
    if not isinstance(entries, list):
        raise ValueError("'keys' must be a list")
    out: dict[str, Ed25519PublicKey] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("alg") != SIGNING_ALG:
            raise ValueError("every key needs alg 'ed25519'")
        kid = entry.get("kid")
        if not is_key_id(kid):
            raise ValueError("every key needs a kid of letters, digits, '-' or '_'")
        raw = unb64(entry.get("public"))
        if len(raw) != 32:
            raise ValueError(f"key {kid}: an Ed25519 public key is 32 bytes")
        if _weak_ed25519_key(raw):
            raise ValueError(f"key {kid}: not a usable Ed25519 public key (small order or "
                             "non-canonical encoding)")
        if kid in out:
            raise ValueError(f"key {kid} appears twice")
        out[kid] = Ed25519PublicKey.from_public_bytes(raw)
    return out


def _signing_dir(home: str | os.PathLike[str]) -> Path:
    return Path(home) / "keys" / "signing"


def _new_signing_key(created: int) -> SigningKey:
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SigningKey(
        key_id=new_key_id("e", created),
        created=created,
        status="active",
        public=public,
        seed=seed,
    )


def _write_signing_key(folder: Path, key: SigningKey, *, replace: bool = False) -> None:
    write_key_doc(
        folder,
        {
            "kid": key.key_id,
            "alg": SIGNING_ALG,
            "created": key.created,
            "status": key.status,
            "public": b64(key.public),
            "seed": b64(key.seed),
        },
        replace=replace,
    )


def _load_signing_file(path: Path) -> SigningKey:
    doc = read_key_doc(path)
    try:
        key = SigningKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),  # type: ignore[call-overload]
            status=str(doc["status"]),
            public=unb64(doc["public"]),
            seed=unb64(doc["seed"]),
        )
        derived = Ed25519PrivateKey.from_private_bytes(key.seed).public_key()
        matches = derived.public_bytes(Encoding.Raw, PublicFormat.Raw) == key.public
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    check_key_doc(
        path,
        key.key_id,
        doc.get("alg") == SIGNING_ALG and matches and key.status in ("active", "retired"),
    )
    return key


_P25519 = 2**255 - 19


def _weak_ed25519_key(raw: bytes) -> bool:
    """True for an Ed25519 public key no honest signer has (RFC 8032 §5.1.3).

    Refused: a non-canonical y (y >= p), the identity, and every point of small
    order: for those, signatures like (R = identity, S = 0) verify on many
    messages, so anyone could sign as that "key". The small-order test maps the
    point to Montgomery form (u = (1 + y) / (1 - y)) and runs X25519 with a
    clamped scalar (a multiple of 8): the result is all zero exactly when the
    point's order divides 8, which ``cryptography`` refuses with ``ValueError``.
    """
    y = int.from_bytes(raw, "little") & ((1 << 255) - 1)
    if y >= _P25519 or y == 1:
        return True
    u = (1 + y) * pow(1 - y, -1, _P25519) % _P25519
    probe = X25519PrivateKey.from_private_bytes(bytes([9]) + bytes(31))
    try:
        probe.exchange(X25519PublicKey.from_public_bytes(u.to_bytes(32, "little")))
    except ValueError:
        return True
    return False
