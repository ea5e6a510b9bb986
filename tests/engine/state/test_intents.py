"""Intents in the engine's state store (engine/state/sqlite.py): shared, expiring, bounded.

Threat: an intent outlives its session's token or crowds the store; a tampered
row breaks ``project_context`` for everyone.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest

from engine.limits import LIMITS
from engine.service import Engine
from engine.state import Intent
from engine.state import sqlite_intents as state
from engine.state.sqlite import SQLiteStore
from tests.conftest import World
from tests.engine.engine_calls import Caller


def intent(session: str, expires_at: int, repo: str = "/r", paths: tuple[str, ...] = ("a",)
           ) -> Intent:
    return Intent(repo, session, "t" * 32, "alice", paths, expires_at)


def test_intents_expire_and_replace(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    store.put_intent(intent("s1", 200), now=100)
    store.put_intent(intent("s2", 150, paths=("b", "c")), now=100)
    store.put_intent(intent("s3", 300, repo="/other"), now=100)
    assert [i.session for i in store.intents("/r", now=100)] == ["s1", "s2"]
    assert store.intents("/r", now=100)[1].paths == ("b", "c")
    assert [i.session for i in store.intents("/r", now=150)] == ["s1"]  # s2 expired
    store.put_intent(intent("s1", 400, paths=("z",)), now=160)  # replaces s1's
    assert [(i.session, i.paths) for i in store.intents("/r", now=160)] == [("s1", ("z",))]
    # A second connection (another engine process) sees the same.
    assert len(SQLiteStore(tmp_path / "state.db").intents("/r", now=160)) == 1


def test_intents_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state, "LIMITS", replace(LIMITS, intents_per_repository=3))
    store = SQLiteStore(tmp_path / "state.db")
    for k in range(6):
        store.put_intent(intent(f"s{k}", 1000 + k), now=0)
    assert [i.session for i in store.intents("/r", now=0)] == ["s3", "s4", "s5"]
    with pytest.raises(ValueError):
        store.put_intent(intent("big", 10, paths=tuple(str(k) for k in range(257))), now=0)


def test_one_token_keeps_only_its_latest_intents(tmp_path: Path) -> None:
    """Threat: one agent filling the shared table every peer's project_context reads."""
    store = SQLiteStore(tmp_path / "state.db")
    store.put_intent(Intent("/r", "peer", "p" * 32, "bob", ("a",), 5000), now=0)
    for k in range(LIMITS.intents_per_token + 10):
        store.put_intent(intent(f"flood{k:03d}", 1000 + k), now=0)
    live = store.intents("/r", now=0)
    flood = sorted(i.session for i in live if i.agent == "alice")
    assert flood == [f"flood{k:03d}" for k in range(10, LIMITS.intents_per_token + 10)]
    assert [i.session for i in live if i.agent == "bob"] == ["peer"]  # others untouched


def test_staged_paths_are_kept_apart_from_intents_and_removed_when_empty(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    store.put_intent(intent("s1", 200, paths=("declared",)), now=100)
    store.put_intent(intent("s1", 200, paths=("staged.py",)), now=100, staged=True)
    assert [i.paths for i in store.intents("/r", now=100)] == [("declared",)]
    assert [i.paths for i in store.intents("/r", now=100, staged=True)] == [("staged.py",)]
    store.put_intent(intent("s1", 200, paths=()), now=120, staged=True)  # committed
    assert store.intents("/r", now=120, staged=True) == []
    assert [i.paths for i in store.intents("/r", now=120)] == [("declared",)]


def test_a_malformed_row_is_skipped(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    store.put_intent(intent("good", 10), now=0)
    with sqlite3.connect(tmp_path / "state.db") as db:
        for bad in ("not json", '{"a": 1}', "[1, 2]", "[" + ",".join(['"x"'] * 300) + "]"):
            db.execute("INSERT INTO intents VALUES ('/r', ?, 't', 'eve', ?, 10)", (bad[:9], bad))
    assert [i.session for i in store.intents("/r", now=0)] == ["good"]


call = Caller(per_token=12).ok  # the result of a call that must succeed


def test_an_intent_ends_with_its_token_or_after_an_hour(world: World) -> None:
    now = [1_000_000.0]
    first = Engine(world.home, world.repo, clock=lambda: now[0])
    second = Engine(world.home, world.repo, clock=lambda: now[0])  # another engine
    short = world.mint(agent="alice", ops="read", ttl=600)
    long = world.mint(agent="carol", ops="read", ttl=7200)
    bob = world.mint(agent="bob", ops="read", ttl=7200)
    now[0] = time.time()
    call(first, short, "project_context", {"paths": ["src/app.py"]}, "a")
    call(first, long, "project_context", {"paths": ["src/app.py"]}, "c")
    seen = call(second, bob, "project_context", {"paths": ["src/app.py"]}, "b")
    assert [p["agent"] for p in seen["peers"]] == ["alice", "carol"]
    now[0] += 601  # alice's token expired: so did her intent
    seen = call(second, bob, "project_context", {"paths": ["src/app.py"]}, "b")
    assert [p["agent"] for p in seen["peers"]] == ["carol"]
    now[0] += 3000  # more than an hour after carol declared it
    seen = call(second, bob, "project_context", {"paths": ["src/app.py"]}, "b")
    assert seen["peers"] == []
