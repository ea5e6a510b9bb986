"""Intents and staged paths in the state store, on both stores: shared, expiring, bounded.

Threat: an intent outlives its session's token or crowds the store; a tampered
row breaks ``project_context`` for everyone.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from engine.limits import LIMITS
from engine.state import Intent, Store, postgres_intents, sqlite_intents
from tests.engine.state.storekit import MakeStore, raw


def intent(session: str, expires_at: int, repo: str = "/r", paths: tuple[str, ...] = ("a",),
           token: str = "t" * 32, agent: str = "alice") -> Intent:
    return Intent(repo, session, token, agent, paths, expires_at)


def test_intents_expire_and_replace(make_store: MakeStore) -> None:
    store = make_store()
    store.put_intent(intent("s1", 200), now=100)
    store.put_intent(intent("s2", 150, paths=("b", "c")), now=100)
    store.put_intent(intent("s3", 300, repo="/other"), now=100)
    assert [i.session for i in store.intents("/r", now=100)] == ["s1", "s2"]
    assert store.intents("/r", now=100)[1].paths == ("b", "c")
    assert [i.session for i in store.intents("/r", now=150)] == ["s1"]  # s2 expired
    store.put_intent(intent("s1", 400, paths=("z",)), now=160)  # replaces s1's
    assert [(i.session, i.paths) for i in store.intents("/r", now=160)] == [("s1", ("z",))]
    # A second instance (another engine process) sees the same.
    assert make_store().intents("/r", now=160) == store.intents("/r", now=160)
    assert [i.session for i in store.intents("/other", now=160)] == ["s3"]


def test_expired_rows_are_deleted_by_a_later_write(store: Store, store_url: str) -> None:
    """Threat: expired intents piling up in the table every peer's lookup reads."""
    store.put_intent(intent("s1", 150), now=100)
    store.put_intent(intent("s2", 160, paths=("b",)), now=100, staged=True)
    store.put_intent(intent("s1", 170), now=110)  # an update of s1's row
    assert raw(store_url, "SELECT COUNT(*) FROM intents") == [(1,)]
    later = 100 + LIMITS.intent_sweep_seconds + 100
    store.put_intent(intent("s3", later + 10), now=later)
    store.put_intent(intent("s4", later + 10, paths=("c",)), now=later, staged=True)
    assert raw(store_url, "SELECT session FROM intents") == [("s3",)]
    assert raw(store_url, "SELECT session FROM staged_paths") == [("s4",)]


def test_intents_are_read_in_bytewise_session_order(store: Store) -> None:
    for session in ("b", "B", "a", "_", "é", "Z"):
        store.put_intent(intent(session, 1000, token=session * 32), now=0)
    assert [i.session for i in store.intents("/r", now=0)] == ["B", "Z", "_", "a", "b", "é"]


def test_intents_are_bounded(make_store: MakeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (sqlite_intents, postgres_intents):
        monkeypatch.setattr(module, "LIMITS", replace(LIMITS, intents_per_repository=3))
    store = make_store()
    for k in range(6):
        store.put_intent(intent(f"s{k}", 1000 + k, token=f"{k}" * 32), now=0)
    assert [i.session for i in store.intents("/r", now=0)] == ["s3", "s4", "s5"]
    with pytest.raises(ValueError):
        store.put_intent(intent("big", 10, paths=tuple(str(k) for k in range(257))), now=0)
    with pytest.raises(ValueError):
        store.put_intent(intent("odd", 10, paths=(1,)), now=0)  # type: ignore[arg-type]
    assert len(store.intents("/r", now=0)) == 3


def test_one_token_keeps_only_its_latest_intents(store: Store) -> None:
    """Threat: one agent filling the shared table every peer's project_context reads."""
    store.put_intent(intent("peer", 5000, token="p" * 32, agent="bob"), now=0)
    for k in range(LIMITS.intents_per_token + 10):
        store.put_intent(intent(f"flood{k:03d}", 1000 + k), now=0)
    live = store.intents("/r", now=0)
    flood = sorted(i.session for i in live if i.agent == "alice")
    assert flood == [f"flood{k:03d}" for k in range(10, LIMITS.intents_per_token + 10)]
    assert [i.session for i in live if i.agent == "bob"] == ["peer"]  # others untouched


def test_staged_paths_are_kept_apart_from_intents_and_removed_when_empty(store: Store) -> None:
    store.put_intent(intent("s1", 200, paths=("declared",)), now=100)
    store.put_intent(intent("s1", 200, paths=("staged.py",)), now=100, staged=True)
    assert [i.paths for i in store.intents("/r", now=100)] == [("declared",)]
    assert [i.paths for i in store.intents("/r", now=100, staged=True)] == [("staged.py",)]
    store.put_intent(intent("s1", 200, paths=()), now=120, staged=True)  # committed
    assert store.intents("/r", now=120, staged=True) == []
    assert [i.paths for i in store.intents("/r", now=120)] == [("declared",)]


def test_a_malformed_row_is_skipped(store: Store, store_url: str) -> None:
    store.put_intent(intent("good", 10), now=0)
    for bad in ("not json", '{"a": 1}', "[1, 2]", "[" + ",".join(['"x"'] * 300) + "]"):
        raw(store_url, "INSERT INTO intents VALUES ('/r', ?, 't', 'eve', ?, 10)", (bad[:9], bad))
    assert [i.session for i in store.intents("/r", now=0)] == ["good"]


def test_concurrent_writers_of_many_repositories_keep_every_bound(make_store: MakeStore) -> None:
    """Writers of several repositories at once, with expired rows to sweep: none fails."""
    stores = [make_store() for _ in range(4)]
    for k in range(40):
        stores[0].put_intent(intent(f"old{k}", 5, repo=f"/r{k % 4}"), now=0)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for n in range(25):
                stores[k].put_intent(intent(f"s{k}-{n}", 1000 + n, repo=f"/r{n % 4}",
                                            token=f"{k}" * 32), now=10)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    for repo in range(4):
        live = stores[0].intents(f"/r{repo}", now=10)
        assert all(not i.session.startswith("old") for i in live)
        per_token: dict[str, int] = {}
        for i in live:
            per_token[i.token_id] = per_token.get(i.token_id, 0) + 1
        assert per_token and all(n <= LIMITS.intents_per_token for n in per_token.values())
