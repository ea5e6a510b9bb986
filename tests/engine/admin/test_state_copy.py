"""Switching a home's store: ``chit state copy``, and engines that refuse to forget ``state.db``.

Threats: an operator points a home at a new store (``[state] url`` in
``engine.toml``) and starts engines on it, so a revoked token works again and
the call log restarts empty with no hint; a copy into a store already in use;
a database password in the output of either.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from engine import admin
from engine.errors import ConfigurationError
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.audit.test_calllog_legacy import write_v1_log
from tests.engine.engine_calls import call, error, ok
from tests.engine.state.storekit import ROOT, raw
from tests.pgserver import PostgresServer


def chit(world: World, *args: str, state: str | None = None) -> subprocess.CompletedProcess[str]:
    flags = ["--state", state] if state is not None else []
    return subprocess.run([*world.cli(), *flags, *args], capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)


def chit_json(world: World, *args: str, state: str | None = None) -> Any:
    done = chit(world, *args, "--json", state=state)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def old_store(world: World) -> str:
    return f"sqlite://{world.home}/state.db"


def configure(world: World, url: str) -> None:
    (world.home / "engine.toml").write_text(f'[state]\nurl = "{url}"\n', encoding="utf-8")
    (world.home / "engine.toml").chmod(0o600)  # it may hold a password


def serve_refused(world: World) -> subprocess.CompletedProcess[str]:
    """``chit engine serve`` on the home as configured; it must exit at once, refusing."""
    with tempfile.TemporaryDirectory(prefix="chit-") as scratch:
        done = subprocess.run(
            [*world.cli(), "engine", "serve", "--repo", str(world.repo), "--socket",
             f"{scratch}/e.sock"], capture_output=True, text=True, timeout=120, check=False,
            cwd=ROOT)
    assert done.returncode == 2, (done.stdout, done.stderr)
    return done


def test_a_revoked_token_stays_revoked_after_copying_to_postgresql(
    world: World, postgres_url: str
) -> None:
    lead = world.mint(agent="lead", ops="read,sub-token:issue", delegable=True)
    bystander = world.mint(agent="bob", ops="read")
    with Engine(world.home, world.repo) as engine:
        child = ok(call(engine, lead, "issue_sub_token", {
            "agent": "lead.helper", "ops": ["read"], "paths": ["src/**"], "ttl_seconds": 600}))
        assert ok(call(engine, child["token"], "status", {}, "c")) is not None
    done = chit(world, "revoke", admin.inspect_token(lead)["id"])
    assert done.returncode == 0, done.stderr

    # The reviewer's steps: point the home at PostgreSQL and start an engine.
    configure(world, postgres_url)
    with pytest.raises(ConfigurationError) as refused:
        Engine(world.home, world.repo)
    message = str(refused.value)
    assert f"chit state copy --from {old_store(world)}" in message
    assert parse_redacted(postgres_url) in message and old_store(world) in message
    assert "chit state copy --from" in serve_refused(world).stderr
    assert raw(postgres_url, "SELECT COUNT(*) FROM call_log") == [(0,)]  # it wrote nothing

    info = chit_json(world, "state", "copy", "--from", old_store(world))
    assert info["from"] == old_store(world) and info["to"] == parse_redacted(postgres_url)
    assert info["copied"]["revocations"] == 1 and info["copied"]["delegations"] == 1
    entries = raw(old_store(world), "SELECT COUNT(*) FROM call_log")[0][0]
    assert info["copied"]["call_log"] == entries
    assert info["copied"]["call_log"] >= 2
    assert info["announced"] == ["revocation", "freeze"]
    assert "intents" in info["not_copied"] and "the change feed" in info["not_copied"]

    with Engine(world.home, world.repo) as engine:  # engine.toml: the PostgreSQL store
        assert engine.store.location == parse_redacted(postgres_url)
        assert error(call(engine, lead, "status", {}, "a")) == "token_revoked"
        assert error(call(engine, child["token"], "status", {}, "b")) == "token_revoked"
        assert ok(call(engine, bystander, "status", {}, "d")) is not None
        assert [d.child_agent for d in engine.store.delegations()] == ["lead.helper"]


def parse_redacted(url: str) -> str:
    from engine.state import parse_state_url

    return parse_state_url(url).redacted


def test_the_freeze_and_the_replay_cache_come_along(world: World, postgres_url: str) -> None:
    assert chit(world, "freeze", "on", "--reason", "incident 7").returncode == 0
    store = open_store(world.home)
    try:
        store.claim_jti("https://idp.example", "j1", keep_until=2**40, now=1)
    finally:
        store.close()
    done = chit(world, "state", "copy", "--from", old_store(world), state=postgres_url)
    assert done.returncode == 0, done.stderr
    assert "copied " + old_store(world) in done.stdout and "not copied" in done.stdout
    status = chit_json(world, "freeze", "status", state=postgres_url)
    assert status["frozen"] is True and status["reason"] == "incident 7"
    copied = open_store(world.home, postgres_url)
    try:
        assert copied.claim_jti("https://idp.example", "j1", keep_until=2**40, now=2) is False
    finally:
        copied.close()


def test_the_call_log_verifies_after_copying_both_ways(
    world: World, postgres_url: str, tmp_path: Path
) -> None:
    write_v1_log(world, 3)  # signed entries of the first form, and their chain head
    token = world.mint(ops="read")
    with Engine(world.home, world.repo) as engine:
        for n in range(4):
            ok(call(engine, token, "status", {}, f"s{n}"))
    assert chit(world, "freeze", "off").returncode == 0  # an operator entry too
    report = chit_json(world, "audit", "log", "verify")
    checkpoint = chit_json(world, "audit", "log", "checkpoint")
    assert report["ok"] and report["entries"] >= 8 and report["unsigned"] is None

    back = f"sqlite://{tmp_path}/back.db"
    for source, destination in ((old_store(world), postgres_url), (postgres_url, back)):
        done = chit(world, "state", "copy", "--from", source, state=destination)
        assert done.returncode == 0, done.stderr
        assert chit_json(world, "audit", "log", "verify", state=destination) == report
        assert chit_json(world, "audit", "log", "checkpoint", state=destination) == checkpoint
        shown = chit(world, "audit", "log", "show", "--json", state=destination)
        assert shown.stdout == chit(world, "audit", "log", "show", "--json").stdout


def test_copy_refuses_a_store_in_use_and_writes_nothing(world: World, postgres_url: str) -> None:
    """Threat: two histories mixed in one store (two call logs, one tree)."""
    token = world.mint(ops="read")
    with Engine(world.home, world.repo) as engine:
        ok(call(engine, token, "status", {}, "s"))
    # Operator commands on the new store are not refused: this one puts it in use.
    done = chit(world, "revoke", "f" * 32, state=postgres_url)
    assert done.returncode == 0, done.stderr
    tables = ("revocations", "call_log", "call_log_checkpoint", "engine_mode", "changes")
    before = {t: raw(postgres_url, f"SELECT * FROM {t} ORDER BY 1") for t in tables}
    done = chit(world, "state", "copy", "--from", old_store(world), state=postgres_url)
    assert done.returncode == 2 and not done.stdout
    assert "already holds durable state (revocations)" in done.stderr
    assert "copy only into an empty store" in done.stderr
    assert {t: raw(postgres_url, f"SELECT * FROM {t} ORDER BY 1") for t in tables} == before

    for source, reason in ((old_store(world), "the store the copy would write to"),
                           (f"sqlite://{world.home}/missing.db", "no state store at")):
        done = chit(world, "state", "copy", "--from", source)
        assert done.returncode == 2 and reason in done.stderr, done.stderr
    assert not (world.home / "missing.db").exists()
    foreign = world.home / "foreign.db"  # someone else's database: not given chit's tables
    raw(f"sqlite://{foreign}", "CREATE TABLE notes (body TEXT)")
    done = chit(world, "state", "copy", "--from", f"sqlite://{foreign}", state=postgres_url)
    assert done.returncode == 2 and "holds no chit state store" in done.stderr, done.stderr
    assert raw(f"sqlite://{foreign}", "SELECT name FROM sqlite_master") == [("notes",)]
    done = chit(world, "state", "copy", "--from", "/not/a/url")
    assert done.returncode == 2 and "--from" in done.stderr


@pytest.mark.parametrize("left", ["revocation", "delegation", "call log"])
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_engine_refuses_an_empty_store_while_state_db_holds_state(
    world: World, request: pytest.FixtureRequest, tmp_path: Path, left: str, kind: str
) -> None:
    url = (f"sqlite://{tmp_path}/new.db" if kind == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    store = open_store(world.home)
    try:
        if left == "revocation":
            store.revoke("a" * 32, now=1)
        elif left == "delegation":
            from engine.state import Delegation

            store.record_delegation(Delegation("a" * 32, "b" * 32, "x", "x.y", 1, 2, {}))
    finally:
        store.close()
    if left == "call log":
        admin.set_freeze(world.home, False)  # an operator entry, nothing else
    with pytest.raises(ConfigurationError, match="chit state copy --from"):
        Engine(world.home, world.repo, state=url)
    # Once copied, the engine starts on the new store.
    assert chit(world, "state", "copy", "--from", old_store(world), state=url).returncode == 0
    Engine(world.home, world.repo, state=url).close()


def test_no_refusal_without_state_to_lose(world: World, postgres_url: str) -> None:
    token = world.mint(ops="read")
    # No state.db at all.
    assert not (world.home / "state.db").exists()
    with Engine(world.home, world.repo, state=postgres_url) as engine:
        ok(call(engine, token, "status", {}, "s"))
    # A state.db holding only what is not worth keeping: a freeze row, a replay-cache entry.
    store = open_store(world.home)
    try:
        store.set_freeze(False, now=1)
        store.claim_jti("https://idp.example", "j", keep_until=2**40, now=1)
    finally:
        store.close()
    Engine(world.home, world.repo, state=postgres_url).close()
    # The default store is state.db itself, whatever it holds.
    admin.revoke(world.home, "c" * 32)
    with Engine(world.home, world.repo) as engine:
        ok(call(engine, token, "status", {}, "s"))
    # The new store holds state of its own (the entries written above): it is in use.
    Engine(world.home, world.repo, state=postgres_url).close()


def test_the_database_password_is_never_shown(
    world: World, postgres: PostgresServer, postgres_url: str
) -> None:
    """Threat: the password of either store in the copy's output or the engine's refusal."""
    password = "Pw" + secrets.token_hex(12)
    role = "chit_" + secrets.token_hex(4)
    url = postgres.password_role(role, password, postgres_url.rsplit("/", 1)[1])
    admin.revoke(world.home, "a" * 32)
    outputs: list[str] = []
    with pytest.raises(ConfigurationError) as refused:
        Engine(world.home, world.repo, state=url)
    outputs += [str(refused.value), repr(refused.value)]
    configure(world, url)
    outputs.append(serve_refused(world).stderr)
    for flags in (("--json",), ()):  # copied, then refused: the store is in use
        done = chit(world, "state", "copy", "--from", old_store(world), *flags)
        outputs += [done.stdout, done.stderr]
    assert "already holds durable state" in outputs[-1]
    back = f"sqlite://{world.home}/back.db"
    done = chit(world, "-v", "state", "copy", "--from", url, "--json", state=back)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["from"] == url.replace(":" + password, "")
    outputs += [done.stdout, done.stderr]
    for text in outputs:
        assert password not in text
    assert role in outputs[0]  # the store is named, without its password
