"""Key files on disk, shared by the three kinds of keys: layout, reading, writing, locking.

Each key is one JSON file ``<home>/keys/<kind>/<kid>.json`` (0600, in folders
0700), written atomically and refused on load if group or others may access it,
as OpenSSH does for private keys. Layout and formats: keys/README.md.
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
from pathlib import Path
from typing import Protocol, TypeVar

from engine.errors import ConfigurationError
from engine.limits import LIMITS

__all__ = [
    "FolderWatch",
    "b64",
    "check_key_doc",
    "keys_in",
    "locked",
    "make_key_dirs",
    "new_key_id",
    "next_created",
    "read_key_doc",
    "unb64",
    "write_key_doc",
]

class _Dated(Protocol):
    @property
    def key_id(self) -> str: ...

    @property
    def created(self) -> int: ...


_Key = TypeVar("_Key", bound=_Dated)


def b64(data: bytes) -> str:
    """Unpadded base64url (RFC 4648 §5) of ``data``."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: object) -> bytes:
    """Decode unpadded base64url.

    Raises:
        ValueError: If ``text`` is not a string of base64url characters.
    """
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key_id(prefix: str, created: int) -> str:
    """A fresh key id: ``prefix``, the creation date (UTC ``yyyymmdd``), ``-``, 8 random hex."""
    return prefix + time.strftime("%Y%m%d", time.gmtime(created)) + "-" + secrets.token_hex(4)


def write_key_doc(folder: Path, doc: dict[str, object], *, replace: bool = False) -> None:
    """Write one key file ``<folder>/<kid>.json``, 0600, synced.

    A new file is created with ``O_EXCL`` (never overwriting one); with
    ``replace`` the document goes to a fresh temporary file first and is
    renamed over the old one, so a reader never sees half a key.

    Raises:
        OSError: If the file exists (without ``replace``) or cannot be written.
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


def read_key_doc(path: Path) -> dict[str, object]:
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


def check_key_doc(path: Path, key_id: str, well_formed: bool) -> None:
    """Refuse a key file that is malformed or whose name is not its key id.

    Raises:
        ConfigurationError: If not ``well_formed``, or ``path`` is not ``<key_id>.json``.
    """
    if not well_formed:
        raise ConfigurationError(f"key file {path} is malformed")
    if path.stem != key_id:
        raise ConfigurationError(f"key file {path} does not match its key id")


@contextlib.contextmanager
def locked(home: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on the keyring for a read-check-write (POSIX flock)."""
    lock_path = Path(home) / "keys" / ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def make_key_dirs(home: str | os.PathLike[str], folder: Path) -> None:
    """The home, ``keys`` and ``folder``, each 0700."""
    for d in (Path(home), Path(home) / "keys", folder):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)


def keys_in(folder: Path, load: Callable[[Path], _Key], kind: str) -> list[_Key]:
    """Every key file of one kind in ``folder``, newest first.

    Raises:
        ConfigurationError: If the folder is missing, or ``load`` refuses a file.
    """
    if not folder.is_dir():
        raise ConfigurationError(f"no {kind} keys at {folder}; run `chit init`")
    found = [load(p) for p in sorted(folder.glob("*.json"))]
    return sorted(found, key=lambda k: (k.created, k.key_id), reverse=True)


def next_created(existing: Sequence[_Dated], now: int | None) -> int:
    """A creation time after every existing key's (so the new key sorts newest).

    Args:
        existing: The folder's keys, newest first.
        now: The wanted creation time, unix seconds (default: the clock).
    """
    created = int(time.time()) if now is None else now
    newest = existing[0].created if existing else created - 1
    return max(created, newest + 1)


_Signature = tuple[tuple[str, int, int, int], ...]


class FolderWatch:
    """Tells a loaded keyring when its key folder may have changed.

    Rotation and retirement replace files in the folder, which changes its
    modification time: that single ``stat`` is checked on every call. A full
    re-read of every file's metadata (to notice, say, a ``chmod`` that makes a
    key file readable by others) happens at least every
    ``LIMITS.keyring_full_check_seconds``.

    Args:
        folder: The key folder.
    """

    def __init__(self, folder: Path) -> None:
        self._dir = folder
        self._signature: _Signature = ()
        self._dir_mtime = -1
        self._checked_at = 0.0

    def __repr__(self) -> str:
        return f"FolderWatch({str(self._dir)!r})"

    def changed(self) -> _Signature | None:
        """The folder's files (name, mtime, size, mode) if they changed since :meth:`accept`.

        Returns:
            The new signature to load and then :meth:`accept`, or ``None`` if
            nothing changed or the folder was checked less than a second ago
            and its modification time is the same.

        Raises:
            OSError: If the folder cannot be read.
        """
        now = time.monotonic()
        dir_mtime = self._dir.stat().st_mtime_ns
        recent = now - self._checked_at < LIMITS.keyring_full_check_seconds
        if dir_mtime == self._dir_mtime and recent:
            return None
        self._dir_mtime, self._checked_at = dir_mtime, now
        found = []
        for path in sorted(self._dir.glob("*.json")):
            info = path.stat()
            found.append((path.name, info.st_mtime_ns, info.st_size, info.st_mode))
        signature = tuple(found)
        return None if signature == self._signature else signature

    def accept(self, signature: _Signature) -> None:
        """Record that the keys of ``signature`` loaded (a failed load is retried later)."""
        self._signature = signature
