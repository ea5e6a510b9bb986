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
* **Schema untrusted too**: before any other statement, the objects in
  ``sqlite_master`` must be exactly :data:`EXPECTED_SCHEMA` (names, types and
  SQL text as this module makes them; no trigger, view, other table or index).
  A file that is not (nor empty), is not a database or is malformed, or has a
  link in place of its WAL, shared-memory or journal file, is made again once:
  those names are unlinked (never through a link) and a fresh 0600 file made.
  Every transaction then compares ``PRAGMA schema_version`` with the one
  checked; a schema changed while the engine runs ends the use of the file
  (memory only) rather than making it again under other connections. The
  connection runs with ``trusted_schema`` off and ``cell_size_check`` on.
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

from engine.git import private_folder
from engine.semantic.codec import FORMAT, MAX_PAYLOAD_BYTES

__all__ = [
    "DB_NAME",
    "EXPECTED_SCHEMA",
    "MAX_ROWS",
    "RECORD_VERSION",
    "PersistedIndex",
    "derive_key",
]

logger = logging.getLogger("chit.engine.semantic")

DB_NAME = "semantic.db"
MAX_ROWS = 200_000
"""Rows kept; the oldest beyond it are deleted (ten times the files one view indexes)."""
_BATCH = 400  # (path, blob) pairs per SELECT
_KEY_INFO = b"chit-semantic-index/1"
_OUTLINE_TAG = b"chit-semantic-outline\0"

_SCHEMA = (
    """CREATE TABLE records (
    path TEXT NOT NULL,
    blob TEXT NOT NULL,
    version TEXT NOT NULL,
    stored_at INTEGER NOT NULL,
    outline_mac BLOB,
    outline BLOB,
    mac BLOB NOT NULL,
    payload BLOB NOT NULL,
    UNIQUE (path, blob, version)
)""",
    "CREATE INDEX records_age ON records (stored_at)",
)
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


def _schema_of(db: sqlite3.Connection) -> set[tuple[object, ...]]:
    """Every object of a database's schema: ``(type, name, table, SQL text)``."""
    return set(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


def _expected_schema() -> frozenset[tuple[object, ...]]:
    # The text SQLite keeps for each statement (it may normalise it), and the
    # index it makes for the UNIQUE constraint.
    db = sqlite3.connect(":memory:")
    try:
        for statement in _SCHEMA:
            db.execute(statement)
        return frozenset(_schema_of(db))
    finally:
        db.close()


EXPECTED_SCHEMA = _expected_schema()
"""The objects of a database this module made: the table, its key and its age index."""


class _Untrusted(Exception):
    """The database's schema is not exactly :data:`EXPECTED_SCHEMA` (nor empty)."""


# SQLite result codes (sqlite3.h); see _foreign.
_SQLITE_CORRUPT = 11
_SQLITE_CANTOPEN = 14
_SQLITE_NOTADB = 26


def _check_schema(db: sqlite3.Connection, *, empty_ok: bool = False) -> tuple[int, bool]:
    """Check the schema is exactly the expected one, within the caller's transaction.

    Reading ``sqlite_master`` parses the schema but runs none of it (no trigger
    fires, no view is evaluated).

    Returns:
        ``(schema version, empty)``: the database's ``PRAGMA schema_version``
        and whether it has no object at all.

    Raises:
        _Untrusted: If any object differs from, is missing from or is added to
            :data:`EXPECTED_SCHEMA` (a trigger, a view, another table or index,
            ``sqlite_stat1``, another column); an empty schema passes only with
            ``empty_ok``.
    """
    (version,) = db.execute("PRAGMA schema_version").fetchone()
    found = _schema_of(db)
    empty = not found
    if found != EXPECTED_SCHEMA and not (empty_ok and empty):
        raise _Untrusted
    return int(version), empty


def _foreign(error: BaseException, path: Path) -> bool:
    """Whether an error on opening says the file at ``path`` is not one this module made.

    A schema not :data:`EXPECTED_SCHEMA`, a file SQLite finds not to be a
    database or malformed, or (SQLite cannot open it) a WAL, shared-memory or
    journal name beside it that is not a regular file, such as a link, which
    SQLite refuses to follow.
    """
    if isinstance(error, _Untrusted):
        return True
    code = getattr(error, "sqlite_errorcode", None) if isinstance(error, sqlite3.Error) else None
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    if code != _SQLITE_CANTOPEN:
        return False
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            mode = os.lstat(f"{path}{suffix}").st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            return True
    return False


@contextmanager
def _transaction(db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    """One transaction (``begin``): committed if the block ends, else rolled back."""
    db.execute(begin)
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
        self._opening = threading.Lock()
        self._opened = False  # a connection was opened and its schema checked
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
        with self._opening:  # one thread at a time checks the file (and makes it again)
            if self._broken:
                return None
            try:
                db = self._open()
            except (_Untrusted, OSError, sqlite3.Error) as error:
                # A foreign file found on first use is made again, once; found after
                # a connection was checked, it changed meanwhile: it is left alone.
                if not _foreign(error, self._path):
                    self._fail("cannot be opened")
                    return None
                if self._opened:
                    self._fail("changed its schema")
                    return None
                logger.warning(
                    "the persisted semantic index %s is not one chit made; making it again",
                    self._path,
                )
                try:
                    self._remove()
                    db = self._open()
                except (_Untrusted, OSError, sqlite3.Error):
                    self._fail("cannot be made again")
                    return None
            self._opened = True
        self._local.db = db
        return db

    def _open(self) -> sqlite3.Connection:
        """Open the file, check its schema before anything else, make the tables if empty.

        Raises:
            _Untrusted: The schema is not :data:`EXPECTED_SCHEMA` (nor empty).
            OSError: The folder or file is refused (a link, not a regular file,
                another user's folder) or cannot be made.
            sqlite3.Error: SQLite refused the file (``sqlite_errorcode`` says why).
        """
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
        try:
            # Settings of this connection (they read nothing from the file): no
            # function a view or trigger of the file names may run unless marked
            # innocuous; every b-tree cell's size checked as it is read.
            db.execute("PRAGMA trusted_schema=OFF")
            db.execute("PRAGMA cell_size_check=ON")
            with _transaction(db, "BEGIN"):
                cookie, empty = _check_schema(db, empty_ok=True)
            if empty:
                with _transaction(db):
                    cookie, empty = _check_schema(db, empty_ok=True)  # made meanwhile?
                    if empty:
                        for statement in _SCHEMA:
                            db.execute(statement)
                        (cookie,) = db.execute("PRAGMA schema_version").fetchone()
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            db.close()
            raise
        self._local.schema = cookie
        return db

    def _remove(self) -> None:
        """Unlink the database and its WAL, shared-memory and journal files.

        Names are unlinked in the folder opened without following a link (and
        checked to be this user's), so neither the folder nor a file that is a
        link is followed; a folder in a file's place is left (``OSError``).
        """
        folder = str(self._path.parent)
        private_folder(folder)
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(folder, flags)
        try:
            info = os.fstat(fd)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                raise OSError("not this user's folder")
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(DB_NAME + suffix, dir_fd=fd)
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)

    def _guard(self, db: sqlite3.Connection) -> None:
        """Within a transaction: the schema is still the one checked on opening.

        ``PRAGMA schema_version`` changes with any change of the schema (by
        anyone who can write the file); the objects are then checked again.

        Raises:
            _Untrusted: The schema is no longer :data:`EXPECTED_SCHEMA`.
        """
        (cookie,) = db.execute("PRAGMA schema_version").fetchone()
        if cookie != getattr(self._local, "schema", None):
            self._local.schema, _empty = _check_schema(db)

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
            with _transaction(db, "BEGIN"):  # one snapshot: the schema checked is the one read
                self._guard(db)
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
        except _Untrusted:
            self._fail("changed its schema")
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
            with _transaction(db):
                self._guard(db)
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
        except _Untrusted:
            self._fail("changed its schema")
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
            with _transaction(db):
                self._guard(db)
                self._prune(db)
        except _Untrusted:
            self._fail("changed its schema")
        except sqlite3.Error:
            self._fail("cannot be written")
