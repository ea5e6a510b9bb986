"""The Store contract (engine/state/store.py) on both stores: SQLite and a real PostgreSQL.

Every test runs once per store (the ``store_url`` fixture); what one store
instance writes, another instance (another engine) reads. Intents, the call
log, rate windows and the change feed have their own files.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine.errors import StoreError
from engine.state import (
    MAX_JTI_KEEP_UNTIL,
    SCHEMA_VERSION,
    Delegation,
    FreezeState,
    Store,
)
from tests.engine.state.storekit import MakeStore, raw

ISS = "https://idp.example"


def test_the_store_reports_its_schema_and_location(store: Store, store_url: str) -> None:
    assert store.schema_version() == SCHEMA_VERSION
    assert store.location == store_url
    assert store_url in repr(store)
    store.close()
    store.close()  # idempotent


# --- revocations -----------------------------------------------------------------------


def test_a_revocation_is_recorded_once_and_seen_by_another_store_at_once(
    make_store: MakeStore,
) -> None:
    first, second = make_store(), make_store()
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    assert second.any_revoked([a]) is False
    assert first.revoke(a, now=100, reason="leaked") is True
    assert second.any_revoked([a]) is True  # no cache: the next read sees it
    assert second.call_state([c, a])[0] is True
    assert first.revoke(a, now=200, reason="again") is False
    assert first.revoke(b, now=50) is True
    assert second.revoked() == [
        {"id": b, "revoked_at": 50, "reason": ""},
        {"id": a, "revoked_at": 100, "reason": "leaked"},
    ]
    assert second.any_revoked([]) is False
    assert second.any_revoked([c]) is False


@pytest.mark.parametrize("bad", ["A" * 32, "a" * 31, "a" * 33, "g" * 32, "", "a" * 31 + "\n"])
def test_a_malformed_id_is_refused_and_changes_nothing(store: Store, bad: str) -> None:
    before = store.latest_change()
    with pytest.raises(ValueError):
        store.revoke(bad, now=1)
    assert store.revoked() == []
    assert store.latest_change() == before


def test_revoking_announces_on_the_feed_in_the_same_change(store: Store) -> None:
    start = store.latest_change()
    store.revoke("d" * 32, now=1)
    assert store.latest_change() == start + 1
    store.revoke("d" * 32, now=2)  # nothing new: nothing announced
    assert store.latest_change() == start + 1


def test_call_state_reads_revocation_and_mode_together(make_store: MakeStore) -> None:
    store, other = make_store(), make_store()
    assert store.call_state([]) == (False, FreezeState(False, "", 0))
    assert store.call_state(["e" * 32]) == (False, FreezeState(False, "", 0))
    other.set_freeze(True, now=42, reason="incident")
    other.revoke("e" * 32, now=43)
    assert store.call_state(["f" * 32, "e" * 32]) == (True, FreezeState(True, "incident", 42))
    assert store.call_state([]) == (False, FreezeState(True, "incident", 42))


# --- delegations ------------------------------------------------------------------------


def _delegation(child: str, issued: int, scope: dict[str, Any] | None = None) -> Delegation:
    return Delegation(child * 32, "p" * 32, "lead", f"lead.{child}", issued, issued + 600,
                      scope or {"ops": ["read"], "paths": ["src/**"], "delegable": False})


def test_delegations_are_kept_oldest_first_and_once(make_store: MakeStore) -> None:
    store, other = make_store(), make_store()
    scope = {"ops": ["read", "write"], "paths": ["src/ü/**", "docs/*"], "delegable": True}
    store.record_delegation(_delegation("b", 20, scope))
    store.record_delegation(_delegation("a", 20))
    store.record_delegation(_delegation("c", 10))
    store.record_delegation(_delegation("c", 99))  # idempotent on child_id: the first stays
    got = other.delegations()
    assert [(d.child_id[0], d.issued_at) for d in got] == [("c", 10), ("a", 20), ("b", 20)]
    assert got[2] == _delegation("b", 20, scope)
    assert isinstance(got[0].issued_at, int) and isinstance(got[0].expires_at, int)


# --- the freeze ---------------------------------------------------------------------------


def test_the_freeze_is_shared_announced_and_lifted(make_store: MakeStore) -> None:
    store, other = make_store(), make_store()
    assert other.freeze_state() == FreezeState(False, "", 0)
    start = other.latest_change()
    assert store.set_freeze(True, now=10, reason="audit") == FreezeState(True, "audit", 10)
    assert other.freeze_state() == FreezeState(True, "audit", 10)
    assert other.latest_change() == start + 1
    store.set_freeze(False, now=20)
    assert other.freeze_state() == FreezeState(False, "", 20)
    assert other.latest_change() == start + 2


# --- the replay cache -----------------------------------------------------------------------


def test_a_jti_is_claimed_once_until_released_or_expired(make_store: MakeStore) -> None:
    store, other = make_store(), make_store()
    assert store.claim_jti(ISS, "j1", keep_until=100, now=10) is True
    assert other.claim_jti(ISS, "j1", keep_until=100, now=11) is False  # a replay
    assert other.claim_jti("https://other.example", "j1", keep_until=100, now=11) is True
    store.release_jti(ISS, "j1")  # its exchange minted nothing
    assert other.claim_jti(ISS, "j1", keep_until=100, now=12) is True
    assert store.claim_jti(ISS, "j1", keep_until=200, now=100) is False  # kept through 100
    assert store.claim_jti(ISS, "j2", keep_until=300, now=101) is True  # drops j1 (expired)
    assert store.claim_jti(ISS, "j1", keep_until=300, now=101) is True
    store.release_jti(ISS, "never-claimed")  # harmless


def test_expired_jtis_are_dropped_by_the_next_claim(store: Store, store_url: str) -> None:
    for k in range(5):
        store.claim_jti(ISS, f"old{k}", keep_until=50, now=1)
    store.claim_jti(ISS, "new", keep_until=500, now=51)
    assert raw(store_url, "SELECT jti FROM exchange_jti") == [("new",)]


def test_a_far_keep_until_is_clamped(store: Store, store_url: str) -> None:
    assert store.claim_jti(ISS, "far", keep_until=2**70, now=1) is True
    assert raw(store_url, "SELECT keep_until FROM exchange_jti") == [(MAX_JTI_KEEP_UNTIL,)]
    assert store.claim_jti(ISS, "far", keep_until=2**70, now=2**61) is False


@pytest.mark.parametrize(("issuer", "jti"), [("", "j"), (ISS, ""), (ISS, "\udc80")])
def test_an_unusable_jti_is_refused_and_writes_nothing(
    store: Store, store_url: str, issuer: str, jti: str
) -> None:
    with pytest.raises(ValueError):
        store.claim_jti(issuer, jti, keep_until=10, now=1)
    assert raw(store_url, "SELECT COUNT(*) FROM exchange_jti") == [(0,)]


def test_claims_in_threads_of_many_stores_have_one_winner(make_store: MakeStore) -> None:
    """Threat: a check-then-insert window that lets two claimers of one jti both win."""
    stores = [make_store() for _ in range(6)]
    rounds = 20
    barrier = threading.Barrier(len(stores))
    wins: list[list[bool]] = [[] for _ in range(rounds)]

    def run(store: Store) -> None:
        for n in range(rounds):
            barrier.wait()
            wins[n].append(store.claim_jti(ISS, f"jti-{n}", keep_until=10**6, now=n))

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [w.count(True) for w in wins] == [1] * rounds


# --- where engine sessions are served ----------------------------------------------------------


def test_a_session_is_placed_once_and_moved_only_from_its_owner(make_store: MakeStore) -> None:
    store, other = make_store(), make_store()
    assert store.place_session("s1", "w1", now=1) == "w1"
    assert other.place_session("s1", "w2", now=2) == "w1"  # the first claim stands
    assert other.move_session("s1", "w2", "w3", now=3) is False  # w2 never held it
    assert other.move_session("s1", "w1", "w2", now=3) is True
    assert store.move_session("s1", "w1", "w3", now=4) is False  # it moved on already
    assert store.place_session("s1", "w9", now=5) == "w2"
    assert other.place_session("s2", "w2", now=5) == "w2"
    assert other.place_session("s3", "w2", now=5) == "w2"
    assert store.place_session("s4", "w1", now=5) == "w1"
    assert store.release_sessions("w2", ["s2", "s2", "missing", "s4"]) == 1  # s4 is w1's
    assert store.release_sessions("w2") == 2  # s1, s3
    assert store.release_sessions("w2") == 0
    assert store.place_session("s1", "w5", now=6) == "w5"  # free again
    assert store.release_sessions("w1", []) == 0


def test_concurrent_placements_of_one_session_agree(make_store: MakeStore) -> None:
    stores = [make_store() for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    owners: list[str] = []

    def run(k: int) -> None:
        barrier.wait()
        owners.append(stores[k].place_session("shared", f"w{k}", now=1))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(owners) == len(stores) and len(set(owners)) == 1


# --- a failing store -----------------------------------------------------------------------------


def test_a_failing_store_raises_store_error_naming_it(store: Store, store_url: str) -> None:
    raw(store_url, "DROP TABLE revocations")
    with pytest.raises(StoreError) as info:
        store.revoked()
    assert str(info.value).startswith(f"the state store {store.location} failed (")
    with pytest.raises(StoreError):
        store.revoke("a" * 32, now=1)
    assert store.freeze_state() == FreezeState(False, "", 0)  # the rest still serves
