"""engine/service/policyfile.py and ratelimit.py on their own: reload, fail closed, windows."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import policy
from engine.audit import provenance
from engine.errors import AccessDeniedError, ConfigurationError, denied
from engine.service.policyfile import PolicyFile, check_file
from engine.service.ratelimit import RateLimiter
from engine.state import SQLiteStore


def replace(path: Path, text: str) -> None:
    fresh = path.with_suffix(".new")
    fresh.write_text(text, encoding="utf-8")
    os.replace(fresh, path)


def test_policy_file_loads_reloads_and_hashes(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(policy.DEFAULT_POLICY_TOML)
    source = PolicyFile(path)
    first = source.current()
    assert first.hash == provenance.policy_hash(policy.load(policy.DEFAULT_POLICY_TOML))
    assert source.current() is first  # unchanged file: the same snapshot, no re-read
    replace(path, "[limits]\nfile_bytes = 7\n")
    second = source.current()
    assert second.policy.limits.file_bytes == 7 and second.hash != first.hash
    assert source.last_good is second


def test_policy_file_refuses_to_start_invalid_or_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no policy"):
        PolicyFile(tmp_path / "policy.toml")
    (tmp_path / "policy.toml").write_text("version = 3\n")
    with pytest.raises(ConfigurationError, match="version"):
        PolicyFile(tmp_path / "policy.toml")
    (tmp_path / "policy.toml").write_bytes(b"\xff")
    with pytest.raises(ConfigurationError, match="UTF-8"):
        PolicyFile(tmp_path / "policy.toml")


def test_policy_file_fails_closed_then_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("version = 1\n")
    source = PolicyFile(path)
    good = source.current()
    with caplog.at_level(logging.WARNING, logger="chit.engine"):
        replace(path, "[limits]\nfile_bytes = 0\n")
        for _ in range(3):
            with pytest.raises(AccessDeniedError) as info:
                source.current()
            assert info.value.code == "policy_denied"
            assert info.value.hints == {"rule": "policy"}
        assert source.last_good is good  # kept for start-up facts only, never served
        path.unlink()
        with pytest.raises(AccessDeniedError):
            source.current()
        replace(path, "[limits]\nfile_bytes = 5\n")
        assert source.current().policy.limits.file_bytes == 5
        # Emptied (a truncating write caught half-way): refused, never the default.
        replace(path, "# nothing but a comment\n\n")
        with pytest.raises(AccessDeniedError) as emptied:
            source.current()
        assert emptied.value.code == "policy_denied"
    messages = [r.getMessage() for r in caplog.records]
    assert sum("limits.file_bytes" in m for m in messages) == 1
    assert any("no policy" in m for m in messages)
    assert any("valid again" in m for m in messages)


def test_check_file_reports(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[limits]\nfile_bytes = 0\n")
    report = check_file(path)
    assert report["ok"] is False
    assert report["errors"] == [
        {"location": "limits.file_bytes", "line": 2, "message": "Input should be greater than 0"}
    ]
    path.write_text("version = 1\n")
    report = check_file(path)
    assert report["ok"] is True and report["rules"] == 0
    path.write_text("\n# a comment only\n")
    report = check_file(path)
    assert report["ok"] is False and report["errors"][0]["location"] == "file"
    with pytest.raises(OSError):
        check_file(tmp_path / "missing.toml")


def test_denied_carries_rule_and_retry_after() -> None:
    error = denied(policy.Decision(allowed=False, code="limit_exceeded", rule="rate_limits[1]",
                                   reasons=("slow down",), retry_after=3))
    assert error.to_dict() == {"error": "limit_exceeded", "message": "slow down",
                               "rule": "rate_limits[1]", "retry_after": 3}
    plain = denied(policy.Decision(allowed=False, code="policy_denied", rule="rules[0]"))
    assert plain.to_dict()["rule"] == "rules[0]" and "retry_after" not in plain.to_dict()


LIMITS = policy.load(
    "[[rate_limits]]\nagents = ['a']\ntools = ['log']\ncalls = 2\nper_seconds = 10\n"
    "[[rate_limits]]\ncalls = 3\nper_seconds = 100\n"
)


@pytest.fixture
def limiter(tmp_path: Path) -> Iterator[RateLimiter]:
    """A limiter counting in a real SQLite store (the contract suite runs both stores)."""
    store = SQLiteStore(tmp_path / "state.db")
    yield RateLimiter(store)
    store.close()


def test_sliding_window_at_its_boundary(limiter: RateLimiter) -> None:
    assert limiter.admit(LIMITS, "a", "log", 0.0) is None
    assert limiter.admit(LIMITS, "a", "log", 9.0) is None
    refused = limiter.admit(LIMITS, "a", "log", 9.5)
    assert refused is not None and refused.rule == "rate_limits[0]"
    assert refused.retry_after == 1 and refused.code == "limit_exceeded"
    # At exactly t0 + per_seconds the first call has left the window.
    assert limiter.admit(LIMITS, "a", "log", 10.0) is None
    # Three calls admitted in 100 s by the second entry (all tools together).
    refused = limiter.admit(LIMITS, "a", "status", 11.0)
    assert refused is not None and refused.rule == "rate_limits[1]"
    assert refused.retry_after == 89


def test_a_refused_call_counts_against_no_entry(limiter: RateLimiter) -> None:
    for t in (0.0, 1.0):
        assert limiter.admit(LIMITS, "a", "log", t) is None
    for t in (2.0, 3.0, 4.0):
        assert limiter.admit(LIMITS, "a", "log", t) is not None  # entry 0 full
    assert limiter.admit(LIMITS, "a", "status", 5.0) is None  # entry 1 counted only 2 so far
    assert limiter.admit(LIMITS, "a", "status", 6.0) is not None


def test_budgets_are_per_agent_and_unlimited_calls_are_not_counted(limiter: RateLimiter) -> None:
    unlimited = policy.load("")
    for t in range(100):
        assert limiter.admit(unlimited, "a", "log", float(t)) is None
    # None of those counted: the first limited call finds its window empty.
    assert limiter.admit(LIMITS, "a", "log", 99.0) is None
    assert limiter.admit(LIMITS, "a", "log", 99.5) is None
    for agent in ("b", "c", "d"):
        for t in (0.0, 1.0, 2.0):
            assert limiter.admit(LIMITS, agent, "log", t) is None
        assert limiter.admit(LIMITS, agent, "log", 3.0) is not None


def test_a_clock_set_back_never_asks_for_more_than_the_window(limiter: RateLimiter) -> None:
    for t in (1000.0, 1001.0):
        assert limiter.admit(LIMITS, "a", "log", t) is None
    refused = limiter.admit(LIMITS, "a", "log", 0.0)
    assert refused is not None and refused.retry_after == 10
