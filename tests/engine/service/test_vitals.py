"""Signs of lag (engine/service/vitals.py, docs/vital-signs.md): what each says, and when silent."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import admin
from engine.audit import calllog, redact, tlog
from engine.limits import LIMITS
from engine.service.coherence import check_pending, check_remote
from engine.service.vitals import call_log_sign, freshness_sign, policy_sign
from engine.state import Store, open_store

A, B = "a" * 40, "b" * 40


@pytest.fixture
def home(tmp_path: Path) -> Path:
    admin.init_home(tmp_path / "home")
    return tmp_path / "home"


def _append(store: Store, home: Path, times: list[int]) -> None:
    records = [calllog.CallRecord(
        time=t, agent="alice", chain=("0" * 32,), session="s", tool="read_file",
        arguments=redact.redact_arguments({}), decision="allowed", code=None,
        policy_hash="sha256:" + "1" * 64, catalog_hash="sha256:" + "2" * 64) for t in times]
    signer = calllog.LogSigner(home)
    tlog.append(store, records, signer, now=max(times), checkpoint_entries=1_000_000)


def test_the_call_log_sign_names_a_tail_older_than_a_checkpoint_takes(home: Path) -> None:
    store = open_store(home)
    assert call_log_sign(store, 10_000) is None  # no log yet: silent
    _append(store, home, [10_000, 10_001])
    assert call_log_sign(store, 10_002).state == "ok"  # type: ignore[union-attr]  # young: a checkpoint is due soon
    bound = LIMITS.calllog_checkpoint_seconds + LIMITS.vital_tail_grace_seconds
    late = call_log_sign(store, 10_000 + int(bound) + 1)
    assert late is not None and late.state == "unsigned_tail"
    assert (late.since, late.age_seconds) == (10_000, int(bound) + 1)
    tlog.checkpoint(store, calllog.LogSigner(home), now=10_100)
    signed = call_log_sign(store, 20_000)
    assert signed is not None and signed.state == "ok"
    _append(store, home, [20_000])  # a new tail is timed from its own first entry
    tail = call_log_sign(store, 20_100)
    assert tail is not None and tail.since == 20_000 and tail.age_seconds == 100
    store.close()


def test_freshness_compares_the_tree_indexed_with_the_base_head() -> None:
    assert freshness_sign(None, A, B) is None
    assert freshness_sign((A, B), A, B).state == "ok"  # type: ignore[union-attr]
    assert freshness_sign((B, B), A, B).state == "ok"  # type: ignore[union-attr]
    stale = freshness_sign((A, A), B, B)
    assert stale is not None and stale.state == "stale"
    assert (stale.expected, stale.found) == (B, A)


def test_the_remote_sign_names_only_the_callers_lane_with_the_oldest_age() -> None:
    report = {"checked_at": 1, "pending": [
        {"lane": "agent/alice", "reason": "x", "since": 900, "age_seconds": 100},
        {"lane": "agent/bob", "reason": "y", "since": 500, "age_seconds": 500}]}
    own = check_pending(report, "agent/alice")
    assert own is not None and own.state == "behind" and own.lanes == ("agent/alice",)
    assert (own.age_seconds, own.since) == (500, 500) and "2 lanes" in own.reason
    other = check_pending(report, "agent/carol")
    assert other is not None and other.lanes == () and "lanes" not in other.as_dict()
    assert check_pending(report).lanes == ("agent/alice", "agent/bob")  # type: ignore[union-attr]
    assert check_pending({"pending": [], "checked_at": None}) is None  # not compared yet
    assert check_pending({"pending": [], "checked_at": 5}).state == "ok"  # type: ignore[union-attr]
    assert check_pending(None) is None
    doctor = check_remote({"reachable": True, "behind": ["agent/bob"]})
    assert doctor is not None and doctor.state == "behind" and doctor.lanes == ("agent/bob",)


def test_the_policy_sign_says_why_and_that_calls_are_refused() -> None:
    assert policy_sign(None).state == "ok"
    bad = policy_sign("invalid policy /h/policy.toml: line 1")
    assert bad.state == "invalid" and bad.reason.startswith("invalid policy") and (
        "refused" in bad.reason)
