"""Root keys (HMAC-SHA256): the secrets that mint and verify tokens.

``<home>/keys/root/<kid>.json`` holds ``{"kid", "alg", "created", "status",
"secret"}``, the secret 32 random bytes in unpadded base64url. The newest active
key mints; older active keys only verify; retired keys do neither. Layout and
rotation: keys/README.md.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.auth._keyfiles import (
    FolderWatch,
    b64,
    check_key_doc,
    locked,
    make_key_dirs,
    new_key_id,
    read_key_doc,
    unb64,
    write_key_doc,
)
from engine.errors import ConfigurationError

__all__ = ["ROOT_KEY_BYTES", "Keyring", "RootKey", "create_keyring", "retire_key", "rotate_key"]

ROOT_KEY_BYTES = 32
_ALG = "hmac-sha256"


@dataclass(frozen=True)
class RootKey:
    """One root key. The secret never appears in ``repr``.

    Attributes:
        key_id: Public identifier carried in tokens.
        created: Creation time, unix seconds.
        status: ``active`` or ``retired``.
    """

    key_id: str
    created: int
    status: str
    secret: bytes = field(repr=False)


class Keyring:
    """Root keys loaded from ``<home>/keys/root``.

    Args:
        home: The chit home directory.

    Raises:
        ConfigurationError: If the keyring is missing, holds no active key, or a
            key file is malformed or readable by group or others.
    """

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self._dir = Path(home) / "keys" / "root"
        if not self._dir.is_dir():
            raise ConfigurationError(f"no keyring at {self._dir}; run `chit init` first")
        self._watch = FolderWatch(self._dir)
        self._keys: dict[str, RootKey] = {}
        self.refresh()

    def refresh(self) -> None:
        """Reload the key files if any was added, changed or removed.

        Rotation and retirement by ``chit keys`` take effect on the next call
        of a running engine (:class:`~engine.auth._keyfiles.FolderWatch` says
        how a change is noticed).

        Raises:
            ConfigurationError: As for the constructor.
        """
        signature = self._watch.changed()
        if signature is None:
            return
        keys: dict[str, RootKey] = {}
        for name, _mtime, _size, _mode in signature:
            key = _load_key_file(self._dir / name)
            keys[key.key_id] = key
        if not any(k.status == "active" for k in keys.values()):
            raise ConfigurationError(f"the keyring at {self._dir} holds no active root key")
        self._keys = keys
        self._watch.accept(signature)

    def keys(self) -> list[RootKey]:
        """Every key, newest first."""
        return sorted(self._keys.values(), key=lambda k: (k.created, k.key_id), reverse=True)

    def __repr__(self) -> str:
        return f"Keyring({len(self._keys)} keys)"

    def active(self) -> list[RootKey]:
        """Return active keys, newest first (the first one signs)."""
        found = [k for k in self._keys.values() if k.status == "active"]
        return sorted(found, key=lambda k: (k.created, k.key_id), reverse=True)

    def signing_key(self) -> RootKey:
        """Return the newest active key, the one that mints."""
        return self.active()[0]

    def lookup(self, key_id: str) -> bytes | None:
        """Return the secret of an active key, or ``None`` if unknown or retired."""
        key = self._keys.get(key_id)
        if key is None or key.status != "active":
            return None
        return key.secret


def create_keyring(home: str | os.PathLike[str], *, now: int | None = None) -> RootKey:
    """Create ``<home>/keys/root`` with one fresh root key, if none exists.

    Directories are made 0700 and key files 0600, created with ``O_EXCL`` so an
    existing file is never overwritten.

    Args:
        home: The chit home directory (created if missing).
        now: Creation time, unix seconds (default: the clock).

    Returns:
        The new key, or the current signing key if the keyring already existed.

    Raises:
        ConfigurationError: If an existing keyring cannot be loaded.
    """
    root_dir = Path(home) / "keys" / "root"
    make_key_dirs(home, root_dir)
    if any(root_dir.glob("*.json")):
        return Keyring(home).signing_key()
    key = _new_key(int(time.time()) if now is None else now)
    _write_key(root_dir, key)
    return key


def rotate_key(home: str | os.PathLike[str], *, now: int | None = None) -> RootKey:
    """Add a new root key; it becomes the signing key. Older keys keep verifying.

    Args:
        home: The chit home (its keyring must exist).
        now: Creation time, unix seconds (default: the clock).

    Returns:
        The new key.

    Raises:
        ConfigurationError: If the keyring cannot be loaded.
    """
    with locked(home):
        ring = Keyring(home)
        created = int(time.time()) if now is None else now
        newest = ring.keys()[0].created
        key = _new_key(max(created, newest + 1))
        _write_key(Path(home) / "keys" / "root", key)
    return key


def retire_key(home: str | os.PathLike[str], key_id: str) -> RootKey:
    """Retire a root key: its tokens fail with ``token_unknown_key`` from the next call.

    Args:
        home: The chit home.
        key_id: The key to retire.

    Returns:
        The key as retired.

    Raises:
        ConfigurationError: If the keyring cannot be loaded.
        ValueError: If the key is unknown, already retired, or the last active key.
    """
    with locked(home):  # the "never the last active key" check and the write, atomically
        ring = Keyring(home)
        found = {k.key_id: k for k in ring.keys()}
        key = found.get(key_id)
        if key is None:
            raise ValueError("no such key id in the keyring")
        if key.status == "retired":
            raise ValueError("that key is already retired")
        if [k.key_id for k in ring.active()] == [key_id]:
            raise ValueError("refusing to retire the last active key; rotate first")
        retired = RootKey(key.key_id, key.created, "retired", key.secret)
        _write_key(Path(home) / "keys" / "root", retired, replace=True)
    return retired


def _new_key(created: int) -> RootKey:
    return RootKey(
        key_id=new_key_id("r", created),
        created=created,
        status="active",
        secret=secrets.token_bytes(ROOT_KEY_BYTES),
    )


def _write_key(root_dir: Path, key: RootKey, *, replace: bool = False) -> None:
    write_key_doc(
        root_dir,
        {
            "kid": key.key_id,
            "alg": _ALG,
            "created": key.created,
            "status": key.status,
            "secret": b64(key.secret),
        },
        replace=replace,
    )


def _load_key_file(path: Path) -> RootKey:
    doc = read_key_doc(path)
    try:
        secret = unb64(doc["secret"])
        key = RootKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),  # type: ignore[call-overload]
            status=str(doc["status"]),
            secret=secret,
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    check_key_doc(
        path,
        key.key_id,
        doc.get("alg") == _ALG
        and len(secret) == ROOT_KEY_BYTES
        and key.status in ("active", "retired"),
    )
    return key
