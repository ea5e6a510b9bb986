"""The persisted index: each file's encoded records and outline by ``(path, blob id, version)``.

A new engine process on a tree indexed before reads records from here instead of
parsing (docs/semantic.md, "Building and reuse").

* **Where**: ``<git common dir>/chit/semantic.db`` (beside the lane lock files),
  so every engine process of the repository shares it whatever its chit home,
  and a linked worktree finds the same file. SQLite in WAL mode: readers never
  block, and each batch of writes is one ``BEGIN IMMEDIATE`` transaction, so
  concurrent writers serialise on the database lock and no reader sees half a
  batch.
* **Version**: rows carry :data:`RECORD_VERSION`, a hash of the extractor's source,
  the record codec and every grammar's version; a row of another version is
  never read (a changed extractor re-parses) and is the first to go.
* **Two byte strings per row**: a file's records (``engine.semantic.codec.encode``)
  and their outline (``encode_outline``: what a view's tables need), each with
  its own MAC. A warm start reads outlines only
  (:meth:`PersistedIndex.load_outlines`); a file's records are read
  (:meth:`PersistedIndex.load`) when a query first needs them.
* **Untrusted**: anyone who can write the git directory can write this file. A
  row is used only if its HMAC-SHA256 (keyed by the engine, see :func:`derive_key`)
  verifies over the version, path, blob id and bytes (an outline's MAC over a
  distinct prefix, so neither kind of row passes for the other), and then only
  through :func:`engine.semantic.codec.decode_stored`'s checks (the outline's
  when it is read, each part of the records' at its first use). Anything else
  (a row from another chit home, altered bytes, a corrupt file, a missing
  row) counts as missing: the file is parsed again and its rows rewritten.
* **Bounded**: at most :data:`MAX_ROWS` rows; past that the oldest rows are
  deleted. Bytes over :data:`~engine.semantic.codec.MAX_PAYLOAD_BYTES` are
  neither written nor read.
* **Never protected content**: callers store only files of a commit's tree whose
  path the policy does not protect and whose blob is not sealed
  (engine/semantic/index.py); records of protected files stay in memory.

Every failure of the database is logged and treated as a miss: the index then
works from memory as if nothing were persisted.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engine.semantic.codec import FORMAT, MAX_PAYLOAD_BYTES
from engine.vcs import private_folder

__all__ = ["DB_NAME", "MAX_ROWS", "RECORD_VERSION", "PersistedIndex", "derive_key"]

logger = logging.getLogger("chit.engine.semantic")

DB_NAME = "semantic.db"
MAX_ROWS = 200_000
"""Rows kept; the oldest beyond it are deleted (ten times the files one view indexes)."""
_BATCH = 400  # (path, blob) pairs per SELECT
_KEY_INFO = b"chit-semantic-index/1"
_OUTLINE_TAG = b"chit-semantic-outline\0"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    path TEXT NOT NULL,
    blob TEXT NOT NULL,
    version TEXT NOT NULL,
    stored_at INTEGER NOT NULL,
    outline_mac BLOB,
    outline BLOB,
    mac BLOB NOT NULL,
    payload BLOB NOT NULL,
    UNIQUE (path, blob, version)
);
CREATE INDEX IF NOT EXISTS records_age ON records (stored_at);
"""
# The outline sits before the payload, and the table has row ids (the key is a
# separate index): reading outlines never reads a payload's pages.


def _record_version() -> str:
    here = Path(__file__).parent
    digest = hashlib.sha256(FORMAT.encode())
    for name in ("extract.py", "codec.py", "records.py", "languages.py"):
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    for dist in (
        "tree-sitter",
        "tree-sitter-python",
        "tree-sitter-javascript",
        "tree-sitter-typescript",
        "tree-sitter-go",
        "tree-sitter-rust",
        "tree-sitter-java",
    ):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "?"
        digest.update(f"{dist}={version}\0".encode())
    return digest.hexdigest()[:32]


RECORD_VERSION = _record_version()
"""Names the extractor, codec and grammars that made a row; other rows are ignored."""


def derive_key(secret: bytes) -> bytes:
    """The 32-byte HMAC key of persisted rows, derived from an engine secret.

    HKDF-SHA256 (RFC 5869) with no salt and the info string
    ``chit-semantic-index/1``, so the key says nothing about the secret and is
    used for nothing else. The engine passes its newest sealing key: engines
    sharing a chit home trust each other's rows; a row written under another
    home, or before a key rotation, does not verify and is re-made.

    Args:
        secret: At least 32 bytes of key material.

    Returns:
        32 bytes.

    Raises:
        ValueError: If ``secret`` is shorter than 32 bytes.
    """
    if len(secret) < 32:
        raise ValueError("the key material must be at least 32 bytes")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEY_INFO).derive(secret)


def _old_layout(db: sqlite3.Connection) -> bool:
    columns = {row[1] for row in db.execute("PRAGMA table_info(records)")}
    return bool(columns) and "outline_mac" not in columns


def _migrate(db: sqlite3.Connection) -> None:
    """Drop a ``records`` table of an older layout, then make the tables if missing.

    A table without outlines holds rows of another version only (the layout
    came with a new codec), so nothing is lost.
    """
    if _old_layout(db):
        with _immediate(db):
            if _old_layout(db):  # not already done by another engine
                db.execute("DROP TABLE records")
    db.executescript(_SCHEMA)


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction: committed if the block ends, else rolled back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _mac(key: bytes, path: str, blob: str, payload: bytes, *, outline: bool = False) -> bytes:
    # A records row's MAC input starts with the version (hex), an outline's with
    # _OUTLINE_TAG: the bytes of one kind never verify as the other.
    head = f"{RECORD_VERSION}\0{path}\0{blob}\0".encode()
    mac = hmac.new(key, _OUTLINE_TAG + head if outline else head, hashlib.sha256)
    mac.update(payload)
    return mac.digest()


class PersistedIndex:
    """Encoded records in SQLite, shared by the engine processes of one repository.

    Thread-safe (one connection per thread). Nothing here raises on a database
    failure: it is logged once and the call answers as if nothing were stored.

    Args:
        folder: The folder to keep :data:`DB_NAME` in (created 0700 if missing);
            ``Repository.chit_dir``.
        key: Returns the current HMAC key (:func:`derive_key`), called once per
            batch so a rotated key applies at once.
    """

    def __init__(self, folder: str | os.PathLike[str], key: Callable[[], bytes]) -> None:
        self._path = Path(folder) / DB_NAME
        self._key = key
        self._local = threading.local()
        self._broken = False
        self._writes = 0
        self.hits = 0  # rows used (tests and benchmarks read them)
        self.rejected = 0  # rows present but not trusted

    def __repr__(self) -> str:
        return f"PersistedIndex({str(self._path)!r})"

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _connect(self) -> sqlite3.Connection | None:
        if self._broken:
            return None
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            return db
        try:
            private_folder(str(self._path.parent))
            # Created 0600 (and kept so), never through a symbolic link in its place.
            flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(self._path, flags, 0o600)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError("not a regular file")
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
            db = sqlite3.connect(self._path, timeout=10.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            _migrate(db)
        except (OSError, sqlite3.Error):
            self._fail("cannot be opened")
            return None
        self._local.db = db
        return db

    def _fail(self, what: str) -> None:
        if not self._broken:
            logger.warning("the persisted semantic index %s; indexing from memory only", what)
        self._broken = True

    def load(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        """Records rows for some ``(path, blob id)`` pairs whose MAC verifies.

        Args:
            keys: ``(repository path, blob id hex)`` pairs.

        Returns:
            The verified bytes by pair (still to be decoded, as untrusted input);
            pairs with no row, or a row that does not verify, are left out.
        """
        return self._verified(
            "SELECT path, blob, mac, payload FROM records WHERE version = ?"
            " AND length(payload) <= ? AND (path, blob) IN (VALUES {marks})",
            keys,
            outline=False,
        )

    def load_outlines(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        """Outline rows for some ``(path, blob id)`` pairs whose MAC verifies.

        The records beside them are neither read nor verified here
        (:meth:`load` does, when the file's records are needed).

        Args:
            keys: ``(repository path, blob id hex)`` pairs.

        Returns:
            The verified outline bytes by pair (still to be decoded, as
            untrusted input); others are left out.
        """
        return self._verified(
            "SELECT path, blob, outline_mac, outline FROM records WHERE version = ?"
            " AND length(outline) <= ? AND (path, blob) IN (VALUES {marks})",
            keys,
            outline=True,
        )

    def _verified(
        self, query: str, keys: Iterable[tuple[str, str]], *, outline: bool
    ) -> dict[tuple[str, str], bytes]:
        db = self._connect()
        wanted = list(keys)
        found: dict[tuple[str, str], bytes] = {}
        if db is None or not wanted:
            return found
        try:
            key = self._key()
        except Exception:  # no key, no trust: parse instead
            logger.warning("no key for the persisted semantic index; parsing instead")
            return found
        try:
            for at in range(0, len(wanted), _BATCH):
                chunk = wanted[at : at + _BATCH]
                marks = ",".join("(?,?)" for _ in chunk)
                rows = db.execute(
                    query.format(marks=marks),
                    (RECORD_VERSION, MAX_PAYLOAD_BYTES, *(x for pair in chunk for x in pair)),
                ).fetchall()
                for path, blob, mac, payload in rows:
                    if (
                        type(path) is str
                        and type(blob) is str
                        and type(mac) is bytes
                        and type(payload) is bytes
                        and hmac.compare_digest(
                            mac, _mac(key, path, blob, payload, outline=outline)
                        )
                    ):
                        found[(path, blob)] = payload
                    else:
                        self.rejected += 1
        except sqlite3.Error:
            self._fail("cannot be read")
        self.hits += len(found)
        return found

    def store(
        self, rows: Iterable[tuple[str, str, bytes, bytes]], *, now: int | None = None
    ) -> None:
        """Store encoded records and their outlines, one transaction for the batch.

        Args:
            rows: ``(path, blob id hex, outline, records)``: the bytes of
                ``engine.semantic.codec.encode_outline`` and ``encode`` of one
                file's records; rows with either over
                :data:`~engine.semantic.codec.MAX_PAYLOAD_BYTES` are skipped.
            now: Unix seconds recorded as the rows' age (default: the clock).
        """
        batch = [
            r for r in rows if len(r[2]) <= MAX_PAYLOAD_BYTES and len(r[3]) <= MAX_PAYLOAD_BYTES
        ]
        db = self._connect()
        if db is None or not batch:
            return
        try:
            key = self._key()
        except Exception:  # no key: nothing is stored
            return
        stamp = int(time.time()) if now is None else now
        try:
            with _immediate(db):
                db.executemany(
                    "INSERT OR REPLACE INTO records (path, blob, version, stored_at, outline_mac,"
                    " outline, mac, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            path,
                            blob,
                            RECORD_VERSION,
                            stamp,
                            _mac(key, path, blob, outline, outline=True),
                            outline,
                            _mac(key, path, blob, data),
                            data,
                        )
                        for path, blob, outline, data in batch
                    ],
                )
                self._writes += len(batch)
                if self._writes >= MAX_ROWS // 10:
                    self._writes = 0
                    self._prune(db)
        except sqlite3.Error:
            self._fail("cannot be written")

    def _prune(self, db: sqlite3.Connection) -> None:
        """Delete rows of other versions, then the oldest beyond :data:`MAX_ROWS`."""
        db.execute("DELETE FROM records WHERE version != ?", (RECORD_VERSION,))
        (count,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
        extra = int(count) - MAX_ROWS
        if extra > 0:
            db.execute(
                "DELETE FROM records WHERE rowid IN (SELECT rowid FROM records"
                " ORDER BY stored_at LIMIT ?)",
                (extra,),
            )

    def prune(self) -> None:
        """Apply the bounds now (they are otherwise applied every tenth of them written)."""
        db = self._connect()
        if db is None:
            return
        try:
            with _immediate(db):
                self._prune(db)
        except sqlite3.Error:
            self._fail("cannot be written")
