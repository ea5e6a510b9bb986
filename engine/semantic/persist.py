"""The persisted index: each file's encoded records and outline by ``(path, blob id, version)``.

A new engine process on a tree indexed before reads records from here instead
of parsing. The file (``<git common dir>/chit/semantic.db``, SQLite in WAL
mode; engine/semantic/database.py) is untrusted: a row is used only if its MAC
verifies under the engine's key and then only through the codec's checks;
anything else, and every failure of the database, counts as a miss. See
docs/semantic.md, "The persisted index".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engine.limits import LIMITS
from engine.semantic.codec import FORMAT
from engine.semantic.database import (
    UntrustedSchemaError,
    check_schema,
    is_foreign,
    open_database,
    remove_database,
    transaction,
)

__all__ = [
    "DB_NAME",
    "RECORD_VERSION",
    "PersistedIndex",
    "derive_key",
    "read_indexed",
    "read_owner",
]

logger = logging.getLogger("chit.engine.semantic")

DB_NAME = "semantic.db"
_BATCH = 400  # (path, blob) pairs per SELECT
_KEY_INFO = b"chit-semantic-index/1"
_OUTLINE_TAG = b"chit-semantic-outline\0"

_SOURCES = (
    "extract.py",
    "walk.py",
    "packed.py",
    "rules/base.py",
    "rules/python.py",
    "rules/ecmascript.py",
    "rules/go.py",
    "rules/rust.py",
    "rules/java.py",
    "codec/__init__.py",
    "codec/_checks.py",
    "codec/_row.py",
    "codec/file.py",
    "codec/outline.py",
    "records.py",
    "fileindex.py",
    "languages.py",
)
"""The modules (under engine/semantic/) whose code decides a row's bytes (and :data:`LIMITS`)."""


def _record_version() -> str:
    here = Path(__file__).parent
    digest = hashlib.sha256(FORMAT.encode())
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    # The extractor's and codec's bounds decide a row's bytes too; they live in
    # engine/limits.py with the others, so all of them are named here by value.
    digest.update(repr(LIMITS).encode() + b"\0")
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
        owner: Returns whose the index is (a JSON-ready object,
            docs/vital-signs.md), recorded with the first rows a file gets;
            ``None``: nothing is recorded.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        key: Callable[[], bytes],
        owner: Callable[[], object] | None = None,
    ) -> None:
        self._path = Path(folder) / DB_NAME
        self._key = key
        self._owner = owner
        self._owner_written = False
        self._indexed: str | None = None  # the 'indexed' record last written
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

    def _open(self) -> sqlite3.Connection:
        """Open the file checked (:func:`~engine.semantic.database.open_database`)."""
        db, self._local.schema = open_database(self._path)
        return db

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
            except (UntrustedSchemaError, OSError, sqlite3.Error) as error:
                # A foreign file found on first use is made again, once; found after
                # a connection was checked, it changed meanwhile: it is left alone.
                if not is_foreign(error, self._path):
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
                    remove_database(self._path)
                    db = self._open()
                except (UntrustedSchemaError, OSError, sqlite3.Error):
                    self._fail("cannot be made again")
                    return None
            self._opened = True
        self._local.db = db
        return db

    def _guard(self, db: sqlite3.Connection) -> None:
        """Within a transaction: the schema is still the one checked on opening.

        ``PRAGMA schema_version`` changes with any change of the schema (by
        anyone who can write the file); the objects are then checked again.

        Raises:
            UntrustedSchemaError: The schema is no longer
                :data:`~engine.semantic.database.EXPECTED_SCHEMA`.
        """
        (cookie,) = db.execute("PRAGMA schema_version").fetchone()
        if cookie != getattr(self._local, "schema", None):
            self._local.schema, _empty = check_schema(db)

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
            with transaction(db, "BEGIN"):  # one snapshot: the schema checked is the one read
                self._guard(db)
                for at in range(0, len(wanted), _BATCH):
                    chunk = wanted[at : at + _BATCH]
                    marks = ",".join("(?,?)" for _ in chunk)
                    rows = db.execute(
                        query.format(marks=marks),
                        (
                            RECORD_VERSION,
                            LIMITS.semantic_payload_bytes,
                            *(x for pair in chunk for x in pair),
                        ),
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
        except UntrustedSchemaError:
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
                ``LIMITS.semantic_payload_bytes`` are skipped.
            now: Unix seconds recorded as the rows' age (default: the clock).
        """
        most = LIMITS.semantic_payload_bytes
        batch = [r for r in rows if len(r[2]) <= most and len(r[3]) <= most]
        db = self._connect()
        if db is None or not batch:
            return
        try:
            key = self._key()
        except Exception:  # no key: nothing is stored
            return
        stamp = int(time.time()) if now is None else now
        try:
            with transaction(db):
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
                if self._owner is not None and not self._owner_written:
                    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('owner', ?)",
                               (json.dumps(self._owner(), sort_keys=True),))
                    self._owner_written = True
                self._writes += len(batch)
                if self._writes >= LIMITS.semantic_rows // 10:
                    self._writes = 0
                    self._prune(db)
        except UntrustedSchemaError:
            self._fail("changed its schema")
        except sqlite3.Error:
            self._fail("cannot be written")

    def recorded_owner(self) -> object | None:
        """Whose the file says the index is (untrusted JSON), without making the file.

        Returns:
            The decoded record, or ``None`` when there is no file, no record
            (a file made before records existed), or it cannot be read (over
            ``LIMITS.identity_record_bytes``, not JSON, a failing database).
        """
        if not self._path.is_file():
            return None
        db = self._connect()
        if db is None:
            return None
        try:
            with transaction(db, "BEGIN"):
                self._guard(db)
                row = db.execute("SELECT value FROM meta WHERE key = 'owner' AND"
                                 " length(value) <= ?",
                                 (LIMITS.identity_record_bytes,)).fetchone()
        except (UntrustedSchemaError, sqlite3.Error):
            return None
        if row is None or not isinstance(row[0], str):
            return None
        try:
            record: object = json.loads(row[0])
        except ValueError:
            return None
        return record

    def record_indexed(self, commit: str, tree: str) -> None:
        """Record that the base branch's head ``commit`` (its ``tree``) was indexed.

        Read back by :func:`read_indexed` for the index's freshness sign
        (docs/vital-signs.md). Written only when it changes, and only into a
        file that exists (the first rows make it); a failure is ignored.

        Args:
            commit: The base head's commit id (hex).
            tree: Its tree id (hex): what the index's rows are of.
        """
        value = json.dumps({"commit": commit, "tree": tree}, sort_keys=True)
        if self._indexed == value or not self._path.is_file():
            return
        db = self._connect()
        if db is None:
            return
        try:
            with transaction(db):
                self._guard(db)
                db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('indexed', ?)",
                           (value,))
            self._indexed = value
        except (UntrustedSchemaError, sqlite3.Error):
            return

    def recorded_indexed(self) -> tuple[str, str] | None:
        """The base head last indexed, ``(commit, tree)``, or ``None`` (as :func:`read_indexed`)."""
        if not self._path.is_file():
            return None
        db = self._connect()
        if db is None:
            return None
        try:
            with transaction(db, "BEGIN"):
                self._guard(db)
                row = db.execute(_INDEXED).fetchone()
        except (UntrustedSchemaError, sqlite3.Error):
            return None
        return _indexed(row)

    def _prune(self, db: sqlite3.Connection) -> None:
        """Delete rows of other versions, then the oldest beyond ``LIMITS.semantic_rows``."""
        db.execute("DELETE FROM records WHERE version != ?", (RECORD_VERSION,))
        (count,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
        extra = int(count) - LIMITS.semantic_rows
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
            with transaction(db):
                self._guard(db)
                self._prune(db)
        except UntrustedSchemaError:
            self._fail("changed its schema")
        except sqlite3.Error:
            self._fail("cannot be written")


def read_owner(folder: str | os.PathLike[str]) -> object | None:
    """Whose the index in ``folder`` says it is, read only (for ``chit doctor``).

    The file is opened read-only and its schema checked first; nothing is made,
    migrated or removed.

    Args:
        folder: ``Repository.chit_dir``.

    Returns:
        The decoded record (untrusted), or ``None``: no file, no record, a
        foreign schema, a record over ``LIMITS.identity_record_bytes``, not JSON.
    """
    row = _read_meta(folder, "SELECT value FROM meta WHERE key = 'owner' AND length(value) <= ?",
                     (LIMITS.identity_record_bytes,))
    if row is None or not isinstance(row[0], str):
        return None
    try:
        record: object = json.loads(row[0])
    except ValueError:
        return None
    return record


def _read_meta(
    folder: str | os.PathLike[str], sql: str, params: tuple[object, ...] = ()
) -> tuple[object, ...] | None:
    """One row of ``sql`` over the index in ``folder``, opened read only; ``None`` if unreadable.

    Nothing is made, migrated or removed; the schema is checked before the
    query (a foreign schema, a missing file or any SQLite error: ``None``).
    """
    path = Path(folder) / DB_NAME
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True,
                             timeout=LIMITS.sqlite_busy_timeout_seconds)
    except sqlite3.Error:
        return None
    try:
        db.execute("PRAGMA trusted_schema=OFF")
        check_schema(db)
        row = db.execute(sql, params).fetchone()
    except (UntrustedSchemaError, sqlite3.Error):
        return None
    finally:
        db.close()
    return None if row is None else tuple(row)


_INDEXED = "SELECT value FROM meta WHERE key = 'indexed' AND length(value) <= 256"


def _indexed(row: object) -> tuple[str, str] | None:
    """``(commit, tree)`` from an untrusted ``indexed`` row, or ``None`` if malformed."""
    if not isinstance(row, tuple) or not row or not isinstance(row[0], str):
        return None
    try:
        record = json.loads(row[0])
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    commit, tree = record.get("commit"), record.get("tree")
    hexdigits = frozenset("0123456789abcdef")
    for value in (commit, tree):
        if not isinstance(value, str) or not 40 <= len(value) <= 64 or set(value) - hexdigits:
            return None
    return str(commit), str(tree)


def read_indexed(folder: str | os.PathLike[str]) -> tuple[str, str] | None:
    """The base head the index in ``folder`` last indexed, read only (for ``chit doctor``).

    Args:
        folder: ``Repository.chit_dir``.

    Returns:
        ``(commit, tree)`` (hex, untrusted but well formed), or ``None``: no
        file, no record (nothing indexed the base head yet, or a file made
        before the record existed), a foreign schema, a malformed record.
    """
    return _indexed(_read_meta(folder, _INDEXED))
