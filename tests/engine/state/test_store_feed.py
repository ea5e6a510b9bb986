"""The change feed, rate windows and lane locks on both stores: what engines coordinate on.

No timing is asserted: a waiter either woke with the new position within a
generous bound (its own timeout) or the test fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import psycopg
import pytest

from engine.errors import StoreError
from engine.limits import LIMITS
from engine.state import RateWindow, Store, _postgres, postgres_shared, sqlite_shared
from tests.engine.state.storekit import MakeStore, raw

WAKE = 5.0  # seconds a waiter may take to learn of a change before the test fails


def later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` in a thread after ``seconds``."""

    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# --- the change feed -----------------------------------------------------------------------


def test_announcements_take_rising_positions(make_store: MakeStore) -> None:
    store, other = make_store(), make_store()
    assert store.latest_change() == 0
    positions = [store.announce(kind, now=1) for kind in ("keys", "policy")]
    positions.append(other.announce("keys", now=2))
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert store.latest_change() == other.latest_change() == positions[-1]
    with pytest.raises(ValueError):
        store.announce("everything", now=3)
    assert store.latest_change() == positions[-1]


def test_waiting_answers_at_once_or_after_its_timeout(store: Store) -> None:
    position = store.announce("policy", now=1)
    assert store.wait_change(-1, 10) == position  # -1: answer at once
    assert store.wait_change(position - 1, 10) == position  # already past
    assert store.wait_change(position, 0.2) == position  # nothing new: times out


def test_a_waiter_in_another_store_wakes_with_the_new_position(make_store: MakeStore) -> None:
    waiter, announcer = make_store(), make_store()
    start = waiter.wait_change(-1, 0)
    got: list[int] = []
    thread = threading.Thread(target=lambda: got.append(waiter.wait_change(start, WAKE)))
    thread.start()
    time.sleep(0.3)  # most likely waiting by now; either way it must see the change
    position = announcer.announce("keys", now=1)
    thread.join(WAKE + 5)
    assert got == [position]
    revoked = later(0.3, lambda: announcer.revoke("a" * 32, now=2))
    assert waiter.wait_change(position, WAKE) == position + 1
    revoked.join()
    frozen = later(0.3, lambda: announcer.set_freeze(True, now=3))
    assert waiter.wait_change(position + 1, WAKE) == position + 2
    frozen.join()


def test_closing_a_store_wakes_its_waiters(store: Store) -> None:
    start = store.wait_change(-1, 0)
    got: list[int] = []
    thread = threading.Thread(target=lambda: got.append(store.wait_change(start, 20)))
    thread.start()
    time.sleep(0.2)
    store.close()
    thread.join(WAKE)
    assert not thread.is_alive() and got == [start]


def test_only_the_newest_changes_are_kept(
    make_store: MakeStore, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (sqlite_shared, postgres_shared):
        monkeypatch.setattr(module, "LIMITS", replace(LIMITS, changes_kept=3))
    store = make_store()
    for _ in range(7):
        last = store.announce("policy", now=1)
    assert raw(store_url, "SELECT id FROM changes ORDER BY id") == [
        (last - 2,), (last - 1,), (last,)
    ]
    assert store.latest_change() == last


def test_a_forged_notification_moves_no_waiter(
    make_pg_store: MakeStore, postgres_url: str
) -> None:
    """Threat: any role that may connect sends NOTIFY chit_changes with a made-up position."""
    waiter = make_pg_store()
    start = waiter.wait_change(-1, 0)

    def forge() -> None:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("NOTIFY chit_changes, '999999999'")

    thread = later(0.2, forge)
    assert waiter.wait_change(start, 1.0) == start
    thread.join()
    position = make_pg_store().announce("keys", now=1)
    assert waiter.wait_change(start, WAKE) == position  # and the real feed still works


def test_the_listener_and_the_pool_come_back_after_their_connections_die(
    make_pg_store: MakeStore, postgres_url: str
) -> None:
    waiter, announcer = make_pg_store(), make_pg_store()
    start = waiter.wait_change(-1, 0)
    listening = ("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
                 " AND application_name = 'chit changes'")
    deadline = time.monotonic() + WAKE
    while raw(postgres_url, listening) != [(1,)]:
        assert time.monotonic() < deadline, "the listener never connected"
        time.sleep(0.05)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert ("chit changes", True) in killed and ("chit", True) in killed
    position = announcer.announce("policy", now=1)  # made while no one listened
    assert waiter.wait_change(start, WAKE + LIMITS.change_retry_seconds) == position
    assert waiter.latest_change() == position  # the pool replaced its broken connections


def test_a_call_on_a_connection_the_server_just_ended_is_made_again(
    make_pg_store: MakeStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: a server restart or an administrator ending connections fails a live call.

    The idle check of a pooled connection can miss a termination that arrives
    just after it; the call then meets ``57P01`` and is made once more on a
    fresh connection (nothing of it ran). Here the idle check is made to miss it.
    """
    store = make_pg_store()
    store.announce("keys", now=1)  # the pool holds a connection
    real, missed = _postgres._alive, []

    def misses_once(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
        if not missed:
            missed.append(conn)
            return True
        return real(conn)

    monkeypatch.setattr(_postgres, "_alive", misses_once)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    deadline = time.monotonic() + WAKE
    while raw(postgres_url, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname ="
              " current_database() AND application_name = 'chit'") != [(0,)]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert store.announce("policy", now=2) == 2
    assert missed and missed[0].closed  # the first try met the ended connection


# --- rate windows --------------------------------------------------------------------------


def test_a_window_admits_its_calls_then_refuses_until_it_slides(
    make_store: MakeStore, store_url: str
) -> None:
    store, other = make_store(), make_store()
    window = [RateWindow("w" * 64, 3, 10)]
    assert [store.admit_rate(window, now=100.0 + k) for k in range(3)] == [None] * 3
    assert other.admit_rate(window, now=105.5) == (0, 100.0)  # full; oldest at 100
    assert other.admit_rate(window, now=110.0) is None  # 100 has left: room for one
    assert raw(store_url, "SELECT COUNT(*) FROM rate_events") == [(3,)]  # and is swept
    assert store.admit_rate(window, now=110.5) == (0, 101.0)


def test_a_call_counts_in_every_window_or_in_none(store: Store, store_url: str) -> None:
    minute, hour = RateWindow("minute", 5, 60), RateWindow("hour", 2, 3600)
    assert store.admit_rate([minute, hour], now=1.0) is None
    assert store.admit_rate([minute, hour], now=2.0) is None
    assert store.admit_rate([minute, hour], now=3.5) == (1, 1.0)  # the hour is full
    counts = raw(store_url, "SELECT key, COUNT(*) FROM rate_events GROUP BY key ORDER BY key")
    assert counts == [("hour", 2), ("minute", 2)]  # the refused call counted nowhere
    assert store.admit_rate([minute], now=4.0) is None  # the minute alone has room


def test_threads_of_several_stores_get_exactly_the_room_there_is(make_store: MakeStore) -> None:
    """Threat: a read-then-insert window that lets concurrent engines exceed a rate limit."""
    stores = [make_store() for _ in range(4)]
    window = [RateWindow("shared", 17, 3600)]
    barrier = threading.Barrier(len(stores))
    admitted: list[int] = []

    def run(store: Store) -> None:
        barrier.wait()
        admitted.append(sum(store.admit_rate(window, now=time.time()) is None for _ in range(10)))

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(admitted) == len(stores) and sum(admitted) == 17


# --- lane locks ------------------------------------------------------------------------------


def test_lane_locks_exclude_across_stores_and_release_on_errors(
    make_store: MakeStore, store_url: str
) -> None:
    store, other = make_store(), make_store()
    if store_url.startswith("sqlite://"):
        assert store.lane_lock("repo:agent/a") is None  # a host's lane locks are files
        return
    held = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        lock = store.lane_lock("repo:agent/a")
        assert lock is not None
        with lock:
            order.append("first in")
            held.set()
            release.wait(WAKE)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(WAKE)
    unrelated = other.lane_lock("repo:agent/b")
    assert unrelated is not None
    with unrelated:  # another lane is free
        order.append("other lane")
    later(0.3, release.set)
    lock = other.lane_lock("repo:agent/a")
    assert lock is not None
    with lock:
        order.append("second in")
    thread.join(WAKE)
    assert order == ["first in", "other lane", "first out", "second in"]
    with pytest.raises(RuntimeError):
        with other.lane_lock("repo:agent/a"):  # type: ignore[union-attr]
            raise RuntimeError("the commit failed")
    with store.lane_lock("repo:agent/a"):  # type: ignore[union-attr]
        pass  # released by the failure


def test_a_lane_lock_whose_connection_dies_is_gone_and_leaves_quietly(
    make_pg_store: MakeStore, postgres_url: str
) -> None:
    store, other = make_pg_store(), make_pg_store()
    lock = store.lane_lock("repo:agent/c")
    assert lock is not None
    with lock:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_locks"
                         " WHERE locktype = 'advisory' AND pid <> pg_backend_pid()")
        again = other.lane_lock("repo:agent/c")
        assert again is not None
        with again:  # the dead session's lock went with it
            pass
    with store.lane_lock("repo:agent/c"):  # type: ignore[union-attr]
        pass


def test_a_closed_store_refuses_a_lane_lock(make_store: MakeStore, store_url: str) -> None:
    store = make_store()
    store.close()
    lock = store.lane_lock("x")
    if lock is None:
        return
    with pytest.raises(StoreError), lock:
        pass
