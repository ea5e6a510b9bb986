"""Operators and approvals in the store contract, on SQLite and a real PostgreSQL.

What one store instance writes another (another engine) reads at once; each
state change of an approval is won by exactly one of racing writers.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from engine.limits import LIMITS
from engine.state import Store
from engine.state.approvals import Approval, Operator
from tests.engine.state.storekit import MakeStore


def _operator(name: str = "alice", key: str = "a", groups: tuple[str, ...] = ()) -> Operator:
    return Operator(name, key * 32, bytes([ord(key)]) * 32, groups, 100)


def _approval(n: int = 1, *, request: str | None = None, token: str = "f" * 32,
              created: int = 1000, ttl: int = 600) -> Approval:
    return Approval(
        id=f"apr_{n:026d}".replace("0", "a").replace("1", "b")[:30],
        request=request or f"{n:064x}",
        tool="commit", agent="docs-bot", token_id=token, session="s1", repo="app",
        asked={"tool": "commit", "paths": ["deploy/x"], "summary": "1 changed"},
        approvers=("alice", "group:release"), reason="deployments", rule="approval[0]",
        created_at=created, expires_at=created + ttl,
    )


def test_operators_are_registered_once_by_name_and_seen_by_another_store(
    make_store: MakeStore,
) -> None:
    first, second = make_store(), make_store()
    assert first.add_operator(_operator(groups=("release", "ops"))) is True
    assert first.add_operator(_operator(key="b")) is False  # the name is taken
    (seen,) = second.operators()
    assert (seen.name, seen.key_id, seen.groups) == ("alice", "a" * 32, ("ops", "release"))
    assert second.operator_key("alice", "a" * 32) == b"a" * 32
    assert second.operator_key("alice", "b" * 32) is None
    assert second.operator_key("bob", "a" * 32) is None


def test_a_removed_operator_no_longer_listed_but_its_key_still_verifies(store: Store) -> None:
    """Threat: removing an operator erasing the evidence of what it approved."""
    store.add_operator(_operator())
    assert store.remove_operator("alice", now=200) is True
    assert store.remove_operator("alice", now=201) is False
    assert store.operators() == []
    (removed,) = store.operators(removed=True)
    assert removed.removed_at == 200
    assert store.operator_key("alice", "a" * 32) == b"a" * 32
    # The name can be registered again, with a new key; the old one stays known.
    assert store.add_operator(_operator(key="c")) is True
    assert [o.key_id for o in store.operators()] == ["c" * 32]
    assert store.operator_key("alice", "a" * 32) == b"a" * 32


@pytest.mark.parametrize(
    "bad",
    [
        _operator(name="Alice"),
        _operator(name=""),
        _operator(name="a" * 65),
        _operator(groups=("Release",)),
        _operator(groups=tuple(f"g{i}" for i in range(LIMITS.operator_groups + 1))),
        dataclasses.replace(_operator(), public=b"short"),
        dataclasses.replace(_operator(), key_id="XYZ"),
    ],
)
def test_a_malformed_operator_is_refused_and_nothing_is_written(
    store: Store, bad: Operator
) -> None:
    with pytest.raises(ValueError):
        store.add_operator(bad)
    assert store.operators(removed=True) == []


def test_an_approval_is_created_once_per_live_request(make_store: MakeStore) -> None:
    first, second = make_store(), make_store()
    made = first.create_approval(_approval(1), now=1000)
    assert made == _approval(1)
    # Another engine asking for the same request gets the same approval.
    again = second.create_approval(dataclasses.replace(_approval(2), request=f"{1:064x}"),
                                   now=1001)
    assert again is not None and again.id == made.id
    assert second.approval(made.id) == made
    assert second.approval_for_request(f"{1:064x}") == made
    assert second.approval("apr_" + "z" * 26) is None


def test_racing_creations_make_one_approval(make_store: MakeStore) -> None:
    """Threat: two engines each creating an approval for one request (two to decide)."""
    stores = [make_store() for _ in range(4)]
    results: list[Approval | None] = []
    lock = threading.Lock()

    def create(i: int) -> None:
        made = stores[i].create_approval(
            dataclasses.replace(_approval(i + 1), request="e" * 64), now=1000
        )
        with lock:
            results.append(made)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.id for r in results if r is not None}) == 1
    assert len(stores[0].approvals(now=1000, pending=False)) == 1


def test_pending_approvals_per_token_are_bounded(store: Store) -> None:
    """Threat: one agent filling the operators' queue with requests."""
    for n in range(LIMITS.approvals_pending_per_token):
        assert store.create_approval(_approval(n + 1), now=1000) is not None
    assert store.create_approval(_approval(999), now=1000) is None
    assert store.create_approval(_approval(998, token="e" * 32), now=1000) is not None
    # Expired ones no longer count.
    assert store.create_approval(_approval(997, created=5000), now=2000) is not None


def test_a_decision_wins_once_and_only_while_pending_and_unexpired(
    make_store: MakeStore,
) -> None:
    """Threat: a denial overwritten by a later approval, or an expired request approved."""
    first, second = make_store(), make_store()
    made = first.create_approval(_approval(1), now=1000)
    assert made is not None
    decide = {"decision": b"signed", "decided_by": "alice", "note": "ok"}
    assert second.decide_approval(made.id, state="denied", decided_at=1100, **decide) is True
    assert first.decide_approval(made.id, state="approved", decided_at=1101, **decide) is False
    seen = first.approval(made.id)
    assert seen is not None and (seen.state, seen.decision, seen.decided_at) == (
        "denied", b"signed", 1100
    )
    late = first.create_approval(_approval(2), now=1000)
    assert late is not None
    assert first.decide_approval(late.id, state="approved", decided_at=1600, **decide) is False
    with pytest.raises(ValueError):
        first.decide_approval(late.id, state="used", decided_at=1100, **decide)


def test_an_approval_is_used_once_and_can_be_put_back(make_store: MakeStore) -> None:
    """Threat: one approval running its call twice (two engines racing on the retry)."""
    stores = [make_store() for _ in range(4)]
    made = stores[0].create_approval(_approval(1), now=1000)
    assert made is not None
    stores[0].decide_approval(made.id, state="approved", decision=b"d", decided_by="alice",
                              decided_at=1100, note="")
    wins: list[bool] = []
    lock = threading.Lock()

    def use(i: int) -> None:
        won = stores[i].use_approval(made.id, now=1200)
        with lock:
            wins.append(won)

    threads = [threading.Thread(target=use, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False, False, False, True]
    used = stores[1].approval(made.id)
    assert used is not None and (used.state, used.used_at) == ("used", 1200)
    # A used approval is no longer live: the same request asks anew.
    fresh = stores[1].create_approval(dataclasses.replace(_approval(2), request=made.request),
                                      now=1300)
    assert fresh is not None and fresh.id != made.id
    assert stores[1].approval_for_request(made.request) == fresh
    assert stores[2].restore_approval(made.id) is True
    assert stores[2].restore_approval(made.id) is False
    assert stores[3].use_approval(made.id, now=1601) is False  # expired by then


def test_expiry_is_recorded_once(store: Store) -> None:
    made = store.create_approval(_approval(1), now=1000)
    assert made is not None
    assert store.expire_approval(made.id, now=1599) is False  # not yet
    assert store.expire_approval(made.id, now=1600) is True
    assert store.expire_approval(made.id, now=1601) is False
    gone = store.approval(made.id)
    assert gone is not None and gone.state == "expired"


def test_listings(store: Store) -> None:
    for n in (1, 2, 3):
        store.create_approval(_approval(n, created=1000 + n), now=1000)
    other = dataclasses.replace(_approval(4, created=1010), session="s2")
    store.create_approval(other, now=1000)
    store.expire_approval(_approval(1).id, now=2000)
    assert [a.id for a in store.approvals(now=1100)] == [
        _approval(4).id, _approval(3).id, _approval(2).id
    ]
    assert [a.id for a in store.approvals(now=1100, session=("s1", "app"))] == [
        _approval(3).id, _approval(2).id
    ]
    assert store.approvals(now=1100, session=("s1", "web")) == []
    assert len(store.approvals(now=5000, pending=False)) == 4
    assert store.approvals(now=5000) == []  # every pending one expired by then
