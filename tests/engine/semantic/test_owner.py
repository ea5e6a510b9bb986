"""Whose a persisted semantic index is (engine/semantic/persist.py, docs/vital-signs.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.semantic import database
from engine.semantic.persist import DB_NAME, PersistedIndex, read_owner

KEY = b"k" * 32
ROW = ("src/a.py", "0" * 40, b"outline", b"records")


def test_the_first_rows_record_the_owner_once(tmp_path: Path) -> None:
    index = PersistedIndex(tmp_path, lambda: KEY, lambda: {"name": "app"})
    assert index.recorded_owner() is None and read_owner(tmp_path) is None  # no file yet
    index.store([ROW])
    assert index.recorded_owner() == {"name": "app"}
    other = PersistedIndex(tmp_path, lambda: KEY, lambda: {"name": "other"})
    other.store([ROW])
    assert other.recorded_owner() == {"name": "app"} == read_owner(tmp_path)  # first stays


def test_an_index_from_before_records_is_kept_and_silent(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_NAME)
    for statement in database._SCHEMA:
        db.execute(statement)
    db.execute("INSERT INTO records VALUES ('p', 'b', 'v', 1, NULL, NULL, x'00', x'00')")
    db.commit()
    db.close()
    assert read_owner(tmp_path) is None  # the legacy schema is not the one read
    index = PersistedIndex(tmp_path, lambda: KEY)
    assert index.recorded_owner() is None  # gains the meta table, says nothing
    check = sqlite3.connect(tmp_path / DB_NAME)
    assert check.execute("SELECT count(*) FROM records").fetchone() == (1,)  # rows kept
    check.close()


def test_a_malformed_or_oversized_record_is_no_record(tmp_path: Path) -> None:
    PersistedIndex(tmp_path, lambda: KEY, lambda: {"name": "x" * 10_000}).store([ROW])
    assert read_owner(tmp_path) is None
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute("UPDATE meta SET value = '{not json' WHERE key = 'owner'")
    db.commit()
    db.close()
    assert read_owner(tmp_path) is None
    assert PersistedIndex(tmp_path, lambda: KEY).recorded_owner() is None
