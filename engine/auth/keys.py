"""The engine's keyring: root keys, provenance signing keys and content sealing keys.

Root keys (HMAC-SHA256) mint and verify tokens, Ed25519 keys sign provenance
records and AES-256-GCM keys seal protected content.

Layout (``keys/README.md``)::

    <home>/keys/            0700
    <home>/keys/root/       0700
    <home>/keys/root/<kid>.json   0600  {"kid", "alg", "created", "status", "secret"}
    <home>/keys/signing/    0700
    <home>/keys/signing/<kid>.json  0600  {"kid", "alg", "created", "status", "public", "seed"}
    <home>/keys/sealing/    0700
    <home>/keys/sealing/<kid>.json  0600  {"kid", "alg", "created", "status", "secret"}

``secret`` is 32 random bytes, unpadded base64url. The newest active root key
mints; older active keys only verify; retired keys do neither. A signing key's
``seed`` is its 32-byte Ed25519 private key (RFC 8032) and ``public`` its public
key, both unpadded base64url; one key is active and signs provenance records,
retired ones never sign but their public keys are exported so old records
verify. A sealing key's ``secret`` is 32 random bytes (AES-256-GCM, see
``docs/sealing.md``); the newest active one seals, every active one opens, and
none is ever exported. Loading refuses key files that group or others may
read, as OpenSSH does for private keys.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from engine.errors import ConfigurationError

__all__ = [
    "PUBLIC_KEYS_FORMAT",
    "ROOT_KEY_BYTES",
    "SEALING_ALG",
    "SIGNING_ALG",
    "Keyring",
    "RootKey",
    "SealingKey",
    "SealingKeyring",
    "SigningKey",
    "active_signing_key",
    "create_keyring",
    "create_sealing_key",
    "create_signing_key",
    "export_public_keys",
    "load_public_keys",
    "retire_key",
    "rotate_key",
    "rotate_sealing_key",
    "rotate_signing_key",
    "sealing_keys",
    "signing_keys",
]

ROOT_KEY_BYTES = 32
_FULL_CHECK_SECONDS = 1.0
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
        self._signature: tuple[tuple[str, int, int, int], ...] = ()
        self._keys: dict[str, RootKey] = {}
        self._dir_mtime = -1
        self._checked_at = 0.0
        self.refresh()

    def _files_signature(self) -> tuple[tuple[str, int, int, int], ...]:
        found = []
        for path in sorted(self._dir.glob("*.json")):
            info = path.stat()
            found.append((path.name, info.st_mtime_ns, info.st_size, info.st_mode))
        return tuple(found)

    def refresh(self) -> None:
        """Reload the key files if any was added, changed or removed.

        Rotation and retirement by ``chit keys`` take effect on the next call
        of a running engine.

        Rotation and retirement replace files in the key directory, which changes
        its modification time: that single ``stat`` is checked on every call. A
        full re-read of every file's metadata (to notice, say, a ``chmod`` that
        makes a key file readable by others) happens at least once a second.

        Raises:
            ConfigurationError: As for the constructor.
        """
        now = time.monotonic()
        dir_mtime = self._dir.stat().st_mtime_ns
        if dir_mtime == self._dir_mtime and now - self._checked_at < _FULL_CHECK_SECONDS:
            return
        self._dir_mtime, self._checked_at = dir_mtime, now
        signature = self._files_signature()
        if signature == self._signature:
            return
        keys: dict[str, RootKey] = {}
        for name, _mtime, _size, _mode in signature:
            key = _load_key_file(self._dir / name)
            keys[key.key_id] = key
        if not any(k.status == "active" for k in keys.values()):
            raise ConfigurationError(f"the keyring at {self._dir} holds no active root key")
        self._keys, self._signature = keys, signature

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


def _write_key(root_dir: Path, key: RootKey, *, replace: bool = False) -> None:
    _write_key_doc(
        root_dir,
        {
            "kid": key.key_id,
            "alg": _ALG,
            "created": key.created,
            "status": key.status,
            "secret": _b64(key.secret),
        },
        replace=replace,
    )


def _write_key_doc(folder: Path, doc: dict[str, object], *, replace: bool = False) -> None:
    """Write one key file ``<folder>/<kid>.json``, 0600, synced.

    A new file is created with ``O_EXCL`` (never overwriting one); with
    ``replace`` the document goes to a fresh temporary file first and is
    renamed over the old one, so a reader never sees half a key.
    """
    path = folder / f"{doc['kid']}.json"
    target = path.with_suffix(f".{secrets.token_hex(4)}.tmp") if replace else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    if replace:
        os.replace(target, path)


def _read_key_doc(path: Path) -> dict[str, object]:
    """Read one key file's JSON, refusing it if group or others may access it.

    Raises:
        ConfigurationError: If the file is accessible by group or others, or
            is not a JSON object.
    """
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(f"key file {path} is accessible by group or others; chmod 600 it")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise ConfigurationError(f"key file {path} is malformed") from None
    if not isinstance(doc, dict):
        raise ConfigurationError(f"key file {path} is malformed")
    return doc


def _check_key_doc(path: Path, key_id: str, well_formed: bool) -> None:
    """Refuse a key file that is malformed or whose name is not its key id."""
    if not well_formed:
        raise ConfigurationError(f"key file {path} is malformed")
    if path.stem != key_id:
        raise ConfigurationError(f"key file {path} does not match its key id")


def _new_key(created: int) -> RootKey:
    return RootKey(
        key_id="r" + time.strftime("%Y%m%d", time.gmtime(created)) + "-" + secrets.token_hex(4),
        created=created,
        status="active",
        secret=secrets.token_bytes(ROOT_KEY_BYTES),
    )


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
    with _locked(home):
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
    with _locked(home):  # the "never the last active key" check and the write, atomically
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


@contextlib.contextmanager
def _locked(home: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on the keyring for a read-check-write (POSIX flock)."""
    lock_path = Path(home) / "keys" / ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


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
    key = _new_key(int(time.time()) if now is None else now)
    _write_key(root_dir, key)
    return key


def _load_key_file(path: Path) -> RootKey:
    doc = _read_key_doc(path)
    try:
        secret = _unb64(doc["secret"])
        key = RootKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),  # type: ignore[call-overload]
            status=str(doc["status"]),
            secret=secret,
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    _check_key_doc(
        path,
        key.key_id,
        doc.get("alg") == _ALG
        and len(secret) == ROOT_KEY_BYTES
        and key.status in ("active", "retired"),
    )
    return key


# -- engine signing keys (Ed25519, RFC 8032) -----------------------------------

SIGNING_ALG = "ed25519"
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


def _signing_dir(home: str | os.PathLike[str]) -> Path:
    return Path(home) / "keys" / "signing"


def _new_signing_key(created: int) -> SigningKey:
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SigningKey(
        key_id="e" + time.strftime("%Y%m%d", time.gmtime(created)) + "-" + secrets.token_hex(4),
        created=created,
        status="active",
        public=public,
        seed=seed,
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: object) -> bytes:
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _write_signing_key(folder: Path, key: SigningKey, *, replace: bool = False) -> None:
    _write_key_doc(
        folder,
        {
            "kid": key.key_id,
            "alg": SIGNING_ALG,
            "created": key.created,
            "status": key.status,
            "public": _b64(key.public),
            "seed": _b64(key.seed),
        },
        replace=replace,
    )


def _load_signing_file(path: Path) -> SigningKey:
    doc = _read_key_doc(path)
    try:
        key = SigningKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),  # type: ignore[call-overload]
            status=str(doc["status"]),
            public=_unb64(doc["public"]),
            seed=_unb64(doc["seed"]),
        )
        derived = Ed25519PrivateKey.from_private_bytes(key.seed).public_key()
        matches = derived.public_bytes(Encoding.Raw, PublicFormat.Raw) == key.public
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    _check_key_doc(
        path,
        key.key_id,
        doc.get("alg") == SIGNING_ALG and matches and key.status in ("active", "retired"),
    )
    return key


_Key = TypeVar("_Key", "SigningKey", "SealingKey")


def _keys_in(folder: Path, load: Callable[[Path], _Key], kind: str) -> list[_Key]:
    """Every key file of one kind in ``folder``, newest first (ConfigurationError as below)."""
    if not folder.is_dir():
        raise ConfigurationError(f"no {kind} keys at {folder}; run `chit init`")
    found = [load(p) for p in sorted(folder.glob("*.json"))]
    return sorted(found, key=lambda k: (k.created, k.key_id), reverse=True)


def _make_key_dirs(home: str | os.PathLike[str], folder: Path) -> None:
    """The home, ``keys`` and ``folder``, each 0700."""
    for d in (Path(home), Path(home) / "keys", folder):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)


def _next_created(existing: Sequence[SigningKey | SealingKey], now: int | None) -> int:
    """A creation time after every existing key's (so the new key sorts newest)."""
    created = int(time.time()) if now is None else now
    newest = existing[0].created if existing else created - 1
    return max(created, newest + 1)


def signing_keys(home: str | os.PathLike[str]) -> list[SigningKey]:
    """Every engine signing key in ``<home>/keys/signing``, newest first.

    Raises:
        ConfigurationError: If the folder is missing, or a key file is malformed
            or readable by group or others.
    """
    return _keys_in(_signing_dir(home), _load_signing_file, "signing")


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
    _make_key_dirs(home, folder)
    with _locked(home):
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
    with _locked(home):
        existing = signing_keys(home)
        key = _new_signing_key(_next_created(existing, now))
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
                "public": _b64(k.public),
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
        if not isinstance(kid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", kid):
            raise ValueError("every key needs a kid of letters, digits, '-' or '_'")
        raw = _unb64(entry.get("public"))
        if len(raw) != 32:
            raise ValueError(f"key {kid}: an Ed25519 public key is 32 bytes")
        if _weak_ed25519_key(raw):
            raise ValueError(f"key {kid}: not a usable Ed25519 public key (small order or "
                             "non-canonical encoding)")
        if kid in out:
            raise ValueError(f"key {kid} appears twice")
        out[kid] = Ed25519PublicKey.from_public_bytes(raw)
    return out


# -- sealing keys (AES-256-GCM, protected content at rest) ----------------------

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


def _sealing_dir(home: str | os.PathLike[str]) -> Path:
    return Path(home) / "keys" / "sealing"


def _new_sealing_key(created: int) -> SealingKey:
    return SealingKey(
        key_id="s" + time.strftime("%Y%m%d", time.gmtime(created)) + "-" + secrets.token_hex(4),
        created=created,
        status="active",
        secret=AESGCM.generate_key(bit_length=256),  # os.urandom underneath
    )


def _write_sealing_key(folder: Path, key: SealingKey) -> None:
    _write_key_doc(
        folder,
        {
            "kid": key.key_id,
            "alg": SEALING_ALG,
            "created": key.created,
            "status": key.status,
            "secret": _b64(key.secret),
        },
    )


def _load_sealing_file(path: Path) -> SealingKey:
    doc = _read_key_doc(path)
    try:
        key = SealingKey(
            key_id=str(doc["kid"]),
            created=int(doc["created"]),  # type: ignore[call-overload]
            status=str(doc["status"]),
            secret=_unb64(doc["secret"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"key file {path} is malformed") from None
    _check_key_doc(
        path,
        key.key_id,
        doc.get("alg") == SEALING_ALG
        and len(key.secret) == SEALING_KEY_BYTES
        and key.status in ("active", "retired")
        and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", key.key_id) is not None,
    )
    return key


def sealing_keys(home: str | os.PathLike[str]) -> list[SealingKey]:
    """Every sealing key in ``<home>/keys/sealing``, newest first.

    Raises:
        ConfigurationError: If the folder is missing, or a key file is malformed
            or readable by group or others.
    """
    return _keys_in(_sealing_dir(home), _load_sealing_file, "sealing")


def create_sealing_key(home: str | os.PathLike[str], *, now: int | None = None) -> SealingKey:
    """Create ``<home>/keys/sealing`` with one AES-256 key, if it holds none.

    Returns:
        The new key, or the newest active sealing key if one already existed.

    Raises:
        ConfigurationError: If existing sealing keys cannot be loaded, or none is active.
    """
    folder = _sealing_dir(home)
    _make_key_dirs(home, folder)
    with _locked(home):
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
    with _locked(home):
        existing = sealing_keys(home)
        key = _new_sealing_key(_next_created(existing, now))
        _write_sealing_key(_sealing_dir(home), key)
    return key


class SealingKeyring:
    """Sealing keys loaded from ``<home>/keys/sealing``, reloaded when they change.

    The newest active key seals; every active key opens (rotation, like root
    keys). A running engine sees ``chit keys rotate --sealing`` on its next
    call: each use ``stat``s the folder, and re-reads every file's metadata at
    least once a second (as :class:`Keyring` does).

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
        self._signature: tuple[tuple[str, int, int, int], ...] = ()
        self._dir_mtime = -1
        self._checked_at = 0.0
        self.refresh()

    def __repr__(self) -> str:
        return f"SealingKeyring({len(self._keys)} keys)"

    def refresh(self) -> None:
        """Reload the key files if any was added, changed or removed.

        Raises:
            ConfigurationError: As for the constructor.
        """
        now = time.monotonic()
        dir_mtime = self._dir.stat().st_mtime_ns
        if dir_mtime == self._dir_mtime and now - self._checked_at < _FULL_CHECK_SECONDS:
            return
        self._dir_mtime, self._checked_at = dir_mtime, now
        signature = tuple(
            (p.name, s.st_mtime_ns, s.st_size, s.st_mode)
            for p in sorted(self._dir.glob("*.json"))
            for s in (p.stat(),)
        )
        if signature == self._signature:
            return
        keys = {k.key_id: k for k in sealing_keys(self._home)}
        if not any(k.status == "active" for k in keys.values()):
            raise ConfigurationError(f"{self._dir} holds no active sealing key; run `chit init`")
        self._keys, self._signature = keys, signature

    def active(self) -> SealingKey:
        """The newest active key: the one that seals."""
        self.refresh()
        found = [k for k in self._keys.values() if k.status == "active"]
        return max(found, key=lambda k: (k.created, k.key_id))

    def sealing_key(self) -> tuple[str, bytes]:
        """``(key id, secret)`` of the newest active key (``engine.sealing.KeySource``)."""
        key = self.active()
        return key.key_id, key.secret

    def lookup(self, key_id: str) -> bytes | None:
        """The secret of an active key, or ``None`` if unknown or retired."""
        self.refresh()
        key = self._keys.get(key_id)
        if key is None or key.status != "active":
            return None
        return key.secret


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
