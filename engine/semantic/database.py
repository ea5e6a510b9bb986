"""The persisted index's SQLite file: its exact schema, checked before any use.

The file is untrusted, its schema too: SQLite runs what a schema says (a
trigger, a view, an index on an expression), so a file is used only if its
objects are exactly :data:`EXPECTED_SCHEMA`; a foreign one is removed without
following links and made again (docs/semantic.md, "The persisted index").
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.git import private_folder
from engine.limits import LIMITS

__all__ = [
    "EXPECTED_SCHEMA",
    "UntrustedSchemaError",
    "check_schema",
    "is_foreign",
    "open_database",
    "remove_database",
    "transaction",
]

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
_META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
# The meta table records whose the index is (docs/vital-signs.md); a file made
# before it existed (the legacy schema) gains it on opening.
# The outline sits before the payload, and the table has row ids (the key is a
# separate index): reading outlines never reads a payload's pages.


def _schema_of(db: sqlite3.Connection) -> set[tuple[object, ...]]:
    """Every object of a database's schema: ``(type, name, table, SQL text)``."""
    return set(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


def _expected_schema(statements: tuple[str, ...]) -> frozenset[tuple[object, ...]]:
    # The text SQLite keeps for each statement (it may normalise it), and the
    # index it makes for the UNIQUE constraint.
    db = sqlite3.connect(":memory:")
    try:
        for statement in statements:
            db.execute(statement)
        return frozenset(_schema_of(db))
    finally:
        db.close()


EXPECTED_SCHEMA = _expected_schema((*_SCHEMA, _META))
"""The objects of a database this module made: the table, its key, its age index, the meta table."""

_LEGACY_SCHEMA = _expected_schema(_SCHEMA)


class UntrustedSchemaError(Exception):
    """The database's schema is not exactly :data:`EXPECTED_SCHEMA` (nor empty)."""


# SQLite result codes (sqlite3.h); see is_foreign.
_SQLITE_CORRUPT = 11
_SQLITE_CANTOPEN = 14
_SQLITE_NOTADB = 26


def check_schema(
    db: sqlite3.Connection, *, empty_ok: bool = False, legacy_ok: bool = False
) -> tuple[int, bool]:
    """Check the schema is exactly the expected one, within the caller's transaction.

    Reading ``sqlite_master`` parses the schema but runs none of it (no trigger
    fires, no view is evaluated).

    Args:
        db: A connection, inside a transaction.
        empty_ok: Whether a database with no object at all passes.
        legacy_ok: Whether the schema of before the meta table passes.

    Returns:
        ``(schema version, empty)``: the database's ``PRAGMA schema_version``
        and whether it has no object at all.

    Raises:
        UntrustedSchemaError: If any object differs from, is missing from or is
            added to :data:`EXPECTED_SCHEMA` (a trigger, a view, another table or
            index, ``sqlite_stat1``, another column); an empty schema passes
            only with ``empty_ok``.
    """
    (version,) = db.execute("PRAGMA schema_version").fetchone()
    found = _schema_of(db)
    empty = not found
    if found != EXPECTED_SCHEMA and not (empty_ok and empty) and not (
        legacy_ok and found == _LEGACY_SCHEMA
    ):
        raise UntrustedSchemaError
    return int(version), empty


def is_foreign(error: BaseException, path: Path) -> bool:
    """Whether an error on opening says the file at ``path`` is not one this module made.

    A schema not :data:`EXPECTED_SCHEMA`, a file SQLite finds not to be a
    database or malformed, or (SQLite cannot open it) a WAL, shared-memory or
    journal name beside it that is not a regular file, such as a link, which
    SQLite refuses to follow.

    Args:
        error: What opening the file (:func:`open_database`) raised.
        path: The database file.

    Returns:
        True if the file is not one this module made (a foreign file).
    """
    if isinstance(error, UntrustedSchemaError):
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
def transaction(db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    """One transaction (``begin``): committed if the block ends, else rolled back.

    Args:
        db: An autocommit connection (``isolation_level=None``).
        begin: The statement that starts it: ``BEGIN`` to read,
            ``BEGIN IMMEDIATE`` to write.
    """
    db.execute(begin)
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def open_database(path: Path) -> tuple[sqlite3.Connection, int]:
    """Open the file, check its schema before anything else, make the tables if empty.

    Args:
        path: The database file; its folder is made (or tightened to) 0700.

    Returns:
        The connection (autocommit; WAL mode) and the schema version checked.

    Raises:
        UntrustedSchemaError: The schema is not :data:`EXPECTED_SCHEMA` (nor empty).
        OSError: The folder or file is refused (a link, not a regular file,
            another user's folder) or cannot be made.
        sqlite3.Error: SQLite refused the file (``sqlite_errorcode`` says why).
    """
    private_folder(str(path.parent))
    # Created 0600 (and kept so), never through a symbolic link in its place.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    db = sqlite3.connect(path, timeout=LIMITS.sqlite_busy_timeout_seconds, isolation_level=None)
    try:
        # Settings of this connection (they read nothing from the file): no
        # function a view or trigger of the file names may run unless marked
        # innocuous; every b-tree cell's size checked as it is read.
        db.execute("PRAGMA trusted_schema=OFF")
        db.execute("PRAGMA cell_size_check=ON")
        with transaction(db, "BEGIN"):
            cookie, empty = check_schema(db, empty_ok=True, legacy_ok=True)
            legacy = not empty and _schema_of(db) == _LEGACY_SCHEMA
        if empty or legacy:
            with transaction(db):
                cookie, empty = check_schema(db, empty_ok=True, legacy_ok=True)  # meanwhile?
                if empty:
                    for statement in _SCHEMA:
                        db.execute(statement)
                if empty or _schema_of(db) == _LEGACY_SCHEMA:
                    db.execute(_META)
                (cookie,) = db.execute("PRAGMA schema_version").fetchone()
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        db.close()
        raise
    return db, cookie


def remove_database(path: Path) -> None:
    """Unlink a database file and its WAL, shared-memory and journal files.

    Names are unlinked in the folder opened without following a link (and
    checked to be this user's), so neither the folder nor a file that is a
    link is followed.

    Args:
        path: The database file.

    Raises:
        OSError: The folder is refused (a link, not a folder, another
            user's), or a name cannot be unlinked (a folder in a file's place).
    """
    folder = str(path.parent)
    private_folder(folder)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(folder, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError("not this user's folder")
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(path.name + suffix, dir_fd=fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(fd)
