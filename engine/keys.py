"""The engine's keyring: root keys for tokens, kept in files only the owner can read.

Layout (``keys/README.md``)::

    <home>/keys/            0700
    <home>/keys/root/       0700
    <home>/keys/root/<kid>.json   0600  {"kid", "alg", "created", "status", "secret"}

``secret`` is 32 random bytes, unpadded base64url. The newest active key signs;
older active keys only verify; retired keys do neither. Loading refuses key files
that group or others may read, as OpenSSH does for private keys.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ConfigurationError

__all__ = ["ROOT_KEY_BYTES", "Keyring", "RootKey", "create_keyring"]

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
        keys: dict[str, RootKey] = {}
        for path in sorted(self._dir.glob("*.json")):
            key = _load_key_file(path)
            keys[key.key_id] = key
        self._keys = keys
        if not self.active():
            raise ConfigurationError(f"the keyring at {self._dir} holds no active root key")

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
    for d in (Path(home), Path(home) / "keys", root_dir):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)
    if any(root_dir.glob("*.json")):
        return Keyring(home).signing_key()
    created = int(time.time()) if now is None else now
    key = RootKey(
        key_id="r" + time.strftime("%Y%m%d", time.gmtime(created)) + "-" + secrets.token_hex(4),
        created=created,
        status="active",
        secret=secrets.token_bytes(ROOT_KEY_BYTES),
    )
    doc = {
        "kid": key.key_id,
        "alg": _ALG,
        "created": key.created,
        "status": key.status,
        "secret": base64.urlsafe_b64encode(key.secret).rstrip(b"=").decode("ascii"),
    }
    path = root_dir / f"{key.key_id}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
        fh.write("\n")
    return key


def _load_key_file(path: Path) -> RootKey:
    info = path.stat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(f"key file {path} is accessible by group or others; chmod 600 it")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        secret = base64.urlsafe_b64decode(doc["secret"] + "=" * (-len(doc["secret"]) % 4))
        key = RootKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),
            status=str(doc["status"]),
            secret=secret,
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    if (
        doc.get("alg") != _ALG
        or len(secret) != ROOT_KEY_BYTES
        or key.status
        not in (
            "active",
            "retired",
        )
    ):
        raise ConfigurationError(f"key file {path} is malformed")
    if path.stem != key.key_id:
        raise ConfigurationError(f"key file {path} does not match its key id")
    return key
