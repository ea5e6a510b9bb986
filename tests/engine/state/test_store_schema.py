"""Schema versions on both stores, ``chit state migrate``, and the database password.

Threats: an engine writing to a schema a newer chit made (losing what it
recorded); a store written by an older chit losing rows when migrated; a
database password leaking into a message, a ``repr``, a log line or the CLI's
output.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import psycopg
import pytest

from engine import admin
from engine.errors import SchemaError, StoreError
from engine.state import (
    SCHEMA_VERSION,
    Store,
    open_store,
    parse_state_url,
    postgres_schema,
    sqlite_schema,
)
from tests.engine.state.storekit import ROOT, MakeStore, raw
from tests.pgserver import PostgresServer

ISS = "https://idp.example"


def chit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "cli-home"
    if not home.exists():
        admin.init_home(home)
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)


def migrate_json(tmp_path: Path, url: str, *flags: str) -> tuple[int, dict[str, object]]:
    done = chit(tmp_path, "state", "migrate", "--json", "--state", url, *flags)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def build_version_1(url: str) -> None:
    """A store as chit wrote it before schema versions: version 1's tables, a few rows."""
    if url.startswith("sqlite://"):
        with sqlite3.connect(url[len("sqlite://"):]) as db:
            for statement in sqlite_schema.MIGRATIONS[1]:
                db.execute(statement)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in postgres_schema.MIGRATIONS[1]:
                conn.execute(statement)
    raw(url, "INSERT INTO revocations (id, revoked_at, reason) VALUES (?, ?, ?)",
        ("a" * 32, 5, "old"))
    raw(url, "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (1, 7, 'alice', ?, ?)",
        (b"entry", b"sig"))
    raw(url, "INSERT INTO exchange_jti (issuer, jti, used_at, keep_until) VALUES (?, ?, 1, 99)",
        (ISS, "j"))


def has_table(url: str, name: str) -> bool:
    if url.startswith("sqlite://"):
        return bool(raw(url, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (name,)))
    return raw(url, "SELECT to_regclass(?) IS NOT NULL", (name,)) == [(True,)]


# --- versions and migrations ----------------------------------------------------------


def test_a_store_written_before_versions_migrates_keeping_its_rows(
    make_store: MakeStore, store_url: str, tmp_path: Path
) -> None:
    build_version_1(store_url)
    status, info = migrate_json(tmp_path, store_url, "--check")
    assert (status, info) == (1, {"store": parse_state_url(store_url).redacted, "before": 1,
                                  "version": 1, "known": SCHEMA_VERSION, "due": True})
    assert make_store(migrate=False).schema_version() == 1
    assert not has_table(store_url, "chit_schema")  # --check and migrate=False wrote nothing
    status, info = migrate_json(tmp_path, store_url)
    assert status == 0
    assert (info["before"], info["version"], info["due"]) == (1, SCHEMA_VERSION, False)
    assert raw(store_url, "SELECT version FROM chit_schema") == [(SCHEMA_VERSION,)]
    store = make_store()
    assert store.schema_version() == SCHEMA_VERSION
    assert store.revoked() == [{"id": "a" * 32, "revoked_at": 5, "reason": "old"}]
    (row,) = store.log_rows()
    assert (row.seq, row.time, row.agent, row.entry, row.sig) == (1, 7, "alice", b"entry", b"sig")
    assert store.claim_jti(ISS, "j", keep_until=99, now=2) is False
    assert store.latest_change() == 0 and store.admit_rate([], now=1.0) is None  # new tables
    done = chit(tmp_path, "state", "migrate", "--state", store_url)
    assert done.returncode == 0 and f"schema {SCHEMA_VERSION} -> {SCHEMA_VERSION}" in done.stdout


def test_a_fresh_store_is_version_0_until_migrated(store_url: str, tmp_path: Path) -> None:
    done = chit(tmp_path, "state", "migrate", "--check", "--state", store_url)
    assert done.returncode == 1
    assert f"schema 0 (this chit: {SCHEMA_VERSION}); a migration is due" in done.stdout
    done = chit(tmp_path, "state", "migrate", "--state", store_url)
    assert done.returncode == 0, done.stderr
    assert f"schema 0 -> {SCHEMA_VERSION}" in done.stdout
    status, info = migrate_json(tmp_path, store_url, "--check")
    assert status == 0 and info["due"] is False and info["version"] == SCHEMA_VERSION


def test_a_newer_schema_is_refused_and_left_alone(
    make_store: MakeStore, store_url: str, tmp_path: Path
) -> None:
    make_store().close()
    raw(store_url, "UPDATE chit_schema SET version = 99")
    for migrate in (True, False):
        with pytest.raises(SchemaError) as info:
            open_store(tmp_path, store_url, migrate=migrate)
        assert "schema version 99" in str(info.value) and "upgrade chit" in str(info.value)
    for flags in ((), ("--check",), ("--json",)):
        done = chit(tmp_path, "state", "migrate", "--state", store_url, *flags)
        assert done.returncode == 5  # internal: the store cannot be used by this chit
        if "--json" in flags:
            assert json.loads(done.stdout)["error"] == "store_unavailable"
            assert "upgrade chit" in json.loads(done.stdout)["message"] and not done.stderr
        else:
            assert "upgrade chit" in done.stderr and not done.stdout
    done = chit(tmp_path, "revoke", "b" * 32, "--state", store_url)
    assert done.returncode == 5 and "upgrade chit" in done.stderr
    assert raw(store_url, "SELECT version FROM chit_schema") == [(99,)]
    assert raw(store_url, "SELECT COUNT(*) FROM revocations") == [(0,)]


def test_engines_opening_a_new_store_together_migrate_it_once(
    store_url: str, tmp_path: Path
) -> None:
    stores: list[Store] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def run() -> None:
        barrier.wait()
        try:
            stores.append(open_store(tmp_path, store_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        assert errors == []
        assert [s.schema_version() for s in stores] == [SCHEMA_VERSION] * 6
        assert raw(store_url, "SELECT id, version FROM chit_schema") == [(1, SCHEMA_VERSION)]
    finally:
        for store in stores:
            store.close()


# --- the password -------------------------------------------------------------------------


def test_the_database_password_is_never_shown(
    postgres: PostgresServer, postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Threat: the store's password in a message, a repr, a traceback, a log line or CLI output."""
    caplog.set_level(logging.DEBUG)
    password, wrong = "Pw" + secrets.token_hex(12), "Wr" + secrets.token_hex(12)
    role = "chit_" + secrets.token_hex(4)
    url = postgres.password_role(role, password, postgres_url.rsplit("/", 1)[1])
    redacted = url.replace(":" + password, "")
    shown: list[str] = []

    store = open_store(tmp_path, url)
    try:
        store.revoke("c" * 32, now=1)
        store.wait_change(-1, 0)  # the listener connects with the password too
        shown += [repr(store), str(store.location), repr(parse_state_url(url)),
                  str(parse_state_url(url))]
        assert store.location == redacted
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # the server goes away
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE usename = %s", (role,))
        raw(postgres_url, "DROP TABLE revocations")
        with pytest.raises(StoreError) as failed:
            store.revoked()
        shown += [str(failed.value), repr(failed.value),
                  "".join(traceback.format_exception(failed.value))]
    finally:
        store.close()

    attempts = {  # what is presented, and the reason given
        url.replace(password, wrong): "authentication failed",
        url.replace(password, password + "%zz"): "not a valid connection URL",
        url.replace(f":{postgres.port}/", ":1/"): "connection refused",
    }
    for bad, reason in attempts.items():
        with pytest.raises(StoreError) as refused:
            open_store(tmp_path, bad)
        assert str(refused.value).startswith(f"cannot open the state store postgresql://{role}@")
        assert str(refused.value).endswith(f"({reason})")
        shown += [str(refused.value), repr(refused.value),
                  "".join(traceback.format_exception(refused.value))]
        done = chit(tmp_path, "-v", "state", "migrate", "--check", "--state", bad)
        assert done.returncode == 5 and reason in done.stderr
        shown += [done.stdout, done.stderr]
    done = chit(tmp_path, "-v", "state", "migrate", "--json", "--state", url)
    shown += [done.stdout, done.stderr]
    assert json.loads(done.stdout)["store"] == redacted
    shown.append(caplog.text)
    for text in shown:
        assert password not in text and wrong not in text
