"""Sealing keys (AES-256-GCM): they seal protected content at rest.

``<home>/keys/sealing/<kid>.json`` holds ``{"kid", "alg", "created", "status",
"secret"}``, the secret 32 random bytes in unpadded base64url. The newest active
key seals, every active one opens, and none is ever exported. Layout:
keys/README.md; what sealing does with them: docs/sealing.md.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engine.auth._keyfiles import (
    FolderWatch,
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
    "SEALING_ALG",
    "SEALING_KEY_BYTES",
    "SealingKey",
    "SealingKeyring",
    "create_sealing_key",
    "retire_sealing_key",
    "rotate_sealing_key",
    "sealing_keys",
]

SEALING_ALG = "aes-256-gcm"
SEALING_KEY_BYTES = 32


@dataclass(frozen=True)
class SealingKey:
    """One sealing key (AES-256-GCM) for protected content. The secret never appears in ``repr``.

    Attributes:
        key_id: Public identifier written in the header of every blob it seals.
        created: Creation time, unix seconds.
        status: ``active`` (the newest active key seals; every active key opens)
            or ``retired`` (seals and opens nothing).
    """

    key_id: str
    created: int
    status: str
    secret: bytes = field(repr=False)


class SealingKeyring:
    """Sealing keys loaded from ``<home>/keys/sealing``, reloaded when they change.

    The newest active key seals; every active key opens (rotation, like root
    keys). A running engine sees ``chit keys rotate --sealing`` on its next
    call: each use ``stat``s the folder, and re-reads every file's metadata at
    least once a second (as :class:`~engine.auth.rootkeys.Keyring` does).

    Args:
        home: The chit home directory.

    Raises:
        ConfigurationError: If the folder is missing, holds no active key, or a
            key file is malformed or readable by group or others.
    """

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self._home = home
        self._dir = _sealing_dir(home)
        if not self._dir.is_dir():
            raise ConfigurationError(f"no sealing keys at {self._dir}; run `chit init`")
        self._keys: dict[str, SealingKey] = {}
        self._watch = FolderWatch(self._dir)
        self.refresh()

    def __repr__(self) -> str:
        return f"SealingKeyring({len(self._keys)} keys)"

    def refresh(self) -> None:
        """Reload the key files if any was added, changed or removed.

        Raises:
            ConfigurationError: As for the constructor.
        """
        signature = self._watch.changed()
        if signature is None:
            return
        keys = {k.key_id: k for k in sealing_keys(self._home)}
        if not any(k.status == "active" for k in keys.values()):
            raise ConfigurationError(f"{self._dir} holds no active sealing key; run `chit init`")
        self._keys = keys
        self._watch.accept(signature)

    def active(self) -> SealingKey:
        """The newest active key: the one that seals."""
        self.refresh()
        found = [k for k in self._keys.values() if k.status == "active"]
        return max(found, key=lambda k: (k.created, k.key_id))

    def sealing_key(self) -> tuple[str, bytes]:
        """``(key id, secret)`` of the newest active key (``engine.auth.sealing.KeySource``)."""
        key = self.active()
        return key.key_id, key.secret

    def lookup(self, key_id: str) -> bytes | None:
        """The secret of an active key, or ``None`` if unknown or retired."""
        self.refresh()
        key = self._keys.get(key_id)
        if key is None or key.status != "active":
            return None
        return key.secret


def sealing_keys(home: str | os.PathLike[str]) -> list[SealingKey]:
    """Every sealing key in ``<home>/keys/sealing``, newest first.

    Raises:
        ConfigurationError: If the folder is missing, or a key file is malformed
            or readable by group or others.
    """
    return keys_in(_sealing_dir(home), _load_sealing_file, "sealing")


def create_sealing_key(home: str | os.PathLike[str], *, now: int | None = None) -> SealingKey:
    """Create ``<home>/keys/sealing`` with one AES-256 key, if it holds none.

    Returns:
        The new key, or the newest active sealing key if one already existed.

    Raises:
        ConfigurationError: If existing sealing keys cannot be loaded, or none is active.
    """
    folder = _sealing_dir(home)
    make_key_dirs(home, folder)
    with locked(home):
        if not any(folder.glob("*.json")):
            key = _new_sealing_key(int(time.time()) if now is None else now)
            _write_sealing_key(folder, key)
            return key
    return SealingKeyring(home).active()


def rotate_sealing_key(home: str | os.PathLike[str], *, now: int | None = None) -> SealingKey:
    """Add a new sealing key; it seals from now on. Older keys keep opening what they sealed.

    Raises:
        ConfigurationError: If the sealing keys cannot be loaded.
    """
    with locked(home):
        existing = sealing_keys(home)
        key = _new_sealing_key(next_created(existing, now))
        _write_sealing_key(_sealing_dir(home), key)
    return key


def retire_sealing_key(home: str | os.PathLike[str], key_id: str) -> SealingKey:
    """Retire an older sealing key: what it sealed no longer opens (``seal_invalid``).

    For a key thought exposed, once what it sealed was re-written under a
    newer key. The newest active key, the one that seals, is never retired:
    rotate first (``chit keys rotate --sealing``).

    Args:
        home: The chit home.
        key_id: The sealing key's id.

    Returns:
        The key as retired.

    Raises:
        ConfigurationError: If the sealing keys cannot be loaded.
        ValueError: If the key is unknown, already retired, or the one that seals.
    """
    with locked(home):
        existing = {k.key_id: k for k in sealing_keys(home)}
        key = existing.get(key_id)
        if key is None:
            raise ValueError("no such sealing key id")
        if key.status == "retired":
            raise ValueError("that sealing key is already retired")
        active = [k for k in existing.values() if k.status == "active"]
        if max(active, key=lambda k: (k.created, k.key_id)).key_id == key_id:
            raise ValueError("refusing to retire the sealing key that seals; "
                             "run `chit keys rotate --sealing` first")
        retired = SealingKey(key.key_id, key.created, "retired", key.secret)
        _write_sealing_key(_sealing_dir(home), retired, replace=True)
    return retired


def _sealing_dir(home: str | os.PathLike[str]) -> Path:
    return Path(home) / "keys" / "sealing"


def _new_sealing_key(created: int) -> SealingKey:
    return SealingKey(
        key_id=new_key_id("s", created),
        created=created,
        status="active",
        secret=AESGCM.generate_key(bit_length=256),  # os.urandom underneath
    )


def _write_sealing_key(folder: Path, key: SealingKey, *, replace: bool = False) -> None:
    write_key_doc(
        folder,
        {
            "kid": key.key_id,
            "alg": SEALING_ALG,
            "created": key.created,
            "status": key.status,
            "secret": b64(key.secret),
        },
        replace=replace,
    )


def _load_sealing_file(path: Path) -> SealingKey:
    doc = read_key_doc(path)
    try:
        key = SealingKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),  # type: ignore[call-overload]
            status=str(doc["status"]),
            secret=unb64(doc["secret"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    check_key_doc(
        path,
        key.key_id,
        doc.get("alg") == SEALING_ALG
        and len(key.secret) == SEALING_KEY_BYTES
        and key.status in ("active", "retired")
        and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", key.key_id) is not None,
    )
    return key
