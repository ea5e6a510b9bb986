"""Calls held by ``[[approval]]`` tables, on a real engine, store, repository and keys.

The engine's clock is injected, so expiry needs no sleeping; decisions are
made through engine.admin (what ``chit approve`` runs) with real operator keys.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from engine import admin
from engine.admin.approvals import ApprovalRefusedError
from engine.auth import discharge, signkeys
from engine.errors import ConfigurationError
from engine.limits import LIMITS
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.engine_calls import call, ok, refusal

POLICY = """
version = 1

[[approval]]
tools = ["commit"]
paths = ["deploy/**"]
approvers = ["alice", "group:release"]
ttl = 600
reason = "deployments need a release manager"

[[approval]]
tools = ["issue_sub_token"]
paths = ["deploy/**"]
approvers = ["bob"]
ttl = 600
"""


class Clock:
    """The engine's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = int(time.time())

    def __call__(self) -> float:
        return float(self.now)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def home(world: World) -> Path:
    admin.add_operator(world.home, "alice")
    admin.add_operator(world.home, "bob")
    admin.add_operator(world.home, "rel", groups=("release",))
    admin.add_operator(world.home, "carol", groups=("ops",))
    (world.home / "policy.toml").write_text(POLICY)
    return world.home


@pytest.fixture
def engine(world: World, home: Path, clock: Clock) -> Any:
    with Engine(home, world.repo, clock=clock) as running:
        yield running


def _token(world: World, **kw: Any) -> str:
    kw.setdefault("ops", "read,write,commit,sub-token:issue")
    kw.setdefault("paths", "**")
    return world.mint(ttl=7200, delegable=True, **kw)


def _stage(engine: Engine, token: str, files: dict[str, str], session: str = "s1") -> None:
    for path, content in files.items():
        ok(call(engine, token, "write_file", {"path": path, "content": content}, session))


def _commit(engine: Engine, token: str, message: str = "Deploy", session: str = "s1",
            approval: str | None = None) -> Any:
    listed = engine.offer(token).get("catalog_hash")
    return engine.invoke(token, "commit", {"message": message}, session=session,
                         offered_catalog_hash=listed, approval=approval)


def _decide(home: Path, approval: str, operator: str = "alice", *, approve: bool = True,
            clock: Clock, **kw: Any) -> dict[str, Any]:
    return admin.decide_approval(home, approval, operator=operator, approve=approve,
                                 now=clock.now, **kw)


def test_required_then_approved_then_the_retry_lands_once(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    token = _token(world)
    _stage(engine, token, {"deploy/prod.toml": "replicas = 3\n", "src/app.py": "x = 1\n"})
    asked = refusal(_commit(engine, token))
    assert asked["error"] == "approval_required"
    shown = asked["approval"]
    assert shown["tool"] == "commit" and shown["paths"] == ["deploy/prod.toml", "src/app.py"]
    assert shown["approvers"] == ["alice", "group:release"]
    assert shown["reason"] == "deployments need a release manager"
    assert shown["expires_at"] == clock.now + 600 and "2 path(s)" in shown["summary"]
    assert asked["waits"] == f"chit approve {shown['id']}"
    assert world.refs().get("refs/heads/agent/alice") is None  # nothing landed
    # Waiting: the same id, and status lists it.
    assert refusal(_commit(engine, token))["approval"]["id"] == shown["id"]
    status = ok(call(engine, token, "status", {}, "s1"))
    assert status["approvals"] == [{"id": shown["id"], "tool": "commit",
                                    "expires_at": shown["expires_at"]}]
    clock.now += 30
    decided = _decide(home, shown["id"], "rel", clock=clock, note="window 14:00")
    assert decided["decision"] == "approved" and decided["logged"] is True
    landed = ok(_commit(engine, token, approval=shown["id"]))
    assert world.refs()["refs/heads/agent/alice"] == landed["commit"]
    with closing(open_store(home, None)) as store:
        used = store.approval(shown["id"])
        assert used is not None and (used.state, used.used_at) == ("used", clock.now)
        # The stored discharge verifies under the operator's and the engine's keys.
        body = discharge.verify_discharge(
            discharge.decode_discharge(used.decision), store.operator_key,
            signkeys.load_public_keys(signkeys.export_public_keys(home)),
        )
        assert (body.decision, body.operator, body.note) == ("approved", "rel", "window 14:00")
        assert body.request.hex() == used.request
        entries = [r for r in store.log_rows(agent="(operator)")]
    assert len(entries) == 1
    assert ok(call(engine, token, "status", {}, "s1"))["approvals"] == []


def test_an_approval_runs_one_call_only(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    """Threat: one approval reused for a second, identical request."""
    token = _token(world)
    grant = {"agent": "alice.helper", "ops": ["read"], "paths": ["deploy/**"],
             "ttl_seconds": 600}
    first = refusal(call(engine, token, "issue_sub_token", grant, "s1"))["approval"]["id"]
    _decide(home, first, "bob", clock=clock)
    ok(call(engine, token, "issue_sub_token", grant, "s1"))
    again = refusal(call(engine, token, "issue_sub_token", grant, "s1"))
    assert again["error"] == "approval_required" and again["approval"]["id"] != first


def test_denied_then_expired_once_then_asked_anew(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    token = _token(world)
    _stage(engine, token, {"deploy/a.toml": "a\n"})
    first = refusal(_commit(engine, token))["approval"]["id"]
    _decide(home, first, "alice", approve=False, clock=clock, note="not during the freeze")
    denied = refusal(_commit(engine, token))
    assert denied["error"] == "approval_denied"
    assert denied["approval"] == {"id": first, "note": "not during the freeze",
                                  "decided_by": "alice"}
    clock.now += 600
    assert refusal(_commit(engine, token))["error"] == "approval_expired"
    fresh = refusal(_commit(engine, token))
    assert fresh["error"] == "approval_required" and fresh["approval"]["id"] != first
    assert world.refs().get("refs/heads/agent/alice") is None


def test_a_pending_approval_expires(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    token = _token(world)
    _stage(engine, token, {"deploy/a.toml": "a\n"})
    first = refusal(_commit(engine, token))["approval"]["id"]
    clock.now += 600
    expired = refusal(_commit(engine, token))
    assert expired["error"] == "approval_expired" and expired["approval"]["id"] == first
    with pytest.raises(ApprovalRefusedError, match=r"refused \(expired\)"):
        _decide(home, first, clock=clock)


def test_an_approved_but_expired_approval_does_not_run(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    """Threat: an approval used after the time the operator agreed to."""
    token = _token(world)
    _stage(engine, token, {"deploy/a.toml": "a\n"})
    first = refusal(_commit(engine, token))["approval"]["id"]
    _decide(home, first, clock=clock)
    clock.now += 601
    assert refusal(_commit(engine, token))["error"] == "approval_expired"
    assert world.refs().get("refs/heads/agent/alice") is None


def test_replays_with_other_arguments_change_session_or_token_are_refused(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    """Threat: an approval replayed for another request (the discharge binds exactly one)."""
    token = _token(world)
    _stage(engine, token, {"deploy/a.toml": "a\n"})
    approved = refusal(_commit(engine, token, "Deploy"))["approval"]["id"]
    _decide(home, approved, clock=clock)
    # Other arguments: another message; the approved id echoed as a hint changes nothing.
    other = refusal(_commit(engine, token, "Deploy now", approval=approved))
    assert other["error"] == "approval_required" and other["approval"]["id"] != approved
    # Another staged change: one more file staged after the approval.
    _stage(engine, token, {"deploy/b.toml": "b\n"})
    more = refusal(_commit(engine, token, "Deploy", approval=approved))
    assert more["approval"]["id"] not in (approved, other["approval"]["id"])
    ok(call(engine, token, "discard", {}, "s1"))
    _stage(engine, token, {"deploy/a.toml": "a\n"})
    # Another session of the same token, staging the same content.
    _stage(engine, token, {"deploy/a.toml": "a\n"}, session="s2")
    elsewhere = refusal(_commit(engine, token, "Deploy", "s2", approval=approved))
    assert elsewhere["approval"]["id"] != approved
    # Another token of the same agent, in the same session name.
    second = _token(world)
    ok(call(engine, second, "status", {}, "s3"))
    _stage(engine, second, {"deploy/a.toml": "a\n"}, session="s3")
    assert refusal(_commit(engine, second, "Deploy", "s3", approval=approved))[
        "approval"]["id"] != approved
    assert world.refs().get("refs/heads/agent/alice") is None
    # The approved request itself still runs, once.
    ok(_commit(engine, token, "Deploy"))


def test_a_call_no_table_matches_runs_as_before(world: World, engine: Engine) -> None:
    token = _token(world)
    _stage(engine, token, {"src/app.py": "x = 2\n"})
    ok(_commit(engine, token))


def test_a_delegation_is_matched_by_its_requested_scope(
    world: World, home: Path, engine: Engine, clock: Clock
) -> None:
    token = _token(world)
    grant = {"agent": "alice.helper", "ops": ["read", "write"], "paths": ["**"],
             "ttl_seconds": 600}
    asked = refusal(call(engine, token, "issue_sub_token", grant, "s1"))
    assert asked["error"] == "approval_required"
    assert asked["approval"]["grant"]["paths"] == ["**"]
    assert asked["approval"]["approvers"] == ["bob"]
    with pytest.raises(ApprovalRefusedError, match=r"refused \(not_an_approver\)"):
        _decide(home, asked["approval"]["id"], "alice", clock=clock)
    _decide(home, asked["approval"]["id"], "bob", clock=clock)
    assert ok(call(engine, token, "issue_sub_token", grant, "s1"))["agent"] == "alice.helper"
    narrow = dict(grant, paths=["src/**"])
    assert ok(call(engine, token, "issue_sub_token", narrow, "s1"))["agent"] == "alice.helper"


def test_a_refusing_handler_puts_the_approval_back(
    world: World, home: Path, clock: Clock
) -> None:
    """The approval is consumed only by a call that ran: a refused one keeps it."""
    (home / "policy.toml").write_text(POLICY + '\n[commit]\nmessage_pattern = "ok: .+"\n')
    with Engine(home, world.repo, clock=clock) as engine:
        token = _token(world)
        _stage(engine, token, {"deploy/a.toml": "a\n"})
        first = refusal(_commit(engine, token, "bad"))["approval"]["id"]
        _decide(home, first, clock=clock)
        assert refusal(_commit(engine, token, "bad"))["error"] == "policy_denied"
        with closing(open_store(home, None)) as store:
            back = store.approval(first)
        assert back is not None and back.state == "approved" and back.used_at == 0


def test_an_approval_survives_an_engine_restart(
    world: World, home: Path, clock: Clock
) -> None:
    token = _token(world)
    with Engine(home, world.repo, clock=clock) as engine:
        _stage(engine, token, {"deploy/a.toml": "a\n"})
        first = refusal(_commit(engine, token))["approval"]["id"]
    _decide(home, first, clock=clock)
    with Engine(home, world.repo, clock=clock) as engine:  # resumes the saved session
        ok(_commit(engine, token))
    assert "refs/heads/agent/alice" in world.refs()


def test_decisions_are_refused_for_the_wrong_operator_key_or_state(
    world: World, home: Path, engine: Engine, clock: Clock, tmp_path: Path
) -> None:
    """Threats: an operator the policy does not list, a removed one, a stolen name."""
    token = _token(world)
    _stage(engine, token, {"deploy/a.toml": "a\n"})
    first = refusal(_commit(engine, token))["approval"]["id"]
    for who, reason in (("carol", "not_an_approver"), ("dave", "unknown_operator")):
        with pytest.raises(ApprovalRefusedError, match=rf"refused \({reason}\)"):
            _decide(home, first, who, clock=clock)
    # alice's name with bob's key.
    with pytest.raises(ApprovalRefusedError, match=r"refused \(wrong_key\)"):
        _decide(home, first, "alice", clock=clock, key=home / "operators" / "bob.key")
    with pytest.raises(ApprovalRefusedError, match=r"refused \(unknown_approval\)"):
        _decide(home, "apr_" + "a" * 26, clock=clock)
    admin.remove_operator(home, "rel")
    with pytest.raises(ApprovalRefusedError, match=r"refused \(unknown_operator\)"):
        _decide(home, first, "rel", clock=clock)
    _decide(home, first, "alice", approve=False, clock=clock)
    with pytest.raises(ApprovalRefusedError, match=r"refused \(already_decided\)"):
        _decide(home, first, "alice", clock=clock)
    with closing(open_store(home, None)) as store:
        decided = store.approval(first)
    assert decided is not None and decided.state == "denied"
    assert refusal(_commit(engine, token))["error"] == "approval_denied"


def test_pending_approvals_per_token_are_bounded(
    world: World, home: Path, engine: Engine
) -> None:
    """Threat: one agent flooding the operators with requests."""
    token = _token(world)
    for n in range(LIMITS.approvals_pending_per_token):
        _stage(engine, token, {"deploy/a.toml": f"{n}\n"})
        assert refusal(_commit(engine, token))["error"] == "approval_required"
    _stage(engine, token, {"deploy/a.toml": "last\n"})
    assert refusal(_commit(engine, token))["error"] == "limit_exceeded"


def test_a_policy_naming_an_unknown_approver_is_refused(world: World, home: Path) -> None:
    """Fail closed: an approval nobody can give is a configuration error, as an unknown tool."""
    (home / "policy.toml").write_text(POLICY.replace('"bob"', '"zoe"'))
    with pytest.raises(ConfigurationError, match=r"approval\[1\].approvers\[0\].*'zoe'"):
        Engine(home, world.repo)
    (home / "policy.toml").write_text(POLICY.replace('"group:release"', '"group:sre"'))
    with pytest.raises(ConfigurationError, match="group 'sre'"):
        Engine(home, world.repo)


def test_a_narrower_token_of_the_session_learns_no_path_outside_its_scope(
    world: World, home: Path, engine: Engine
) -> None:
    """Threat: an approval request naming paths a narrower token may not see."""
    wide = _token(world)
    _stage(engine, wide, {"deploy/secret-plan.toml": "a\n", "src/app.py": "x = 3\n"})
    narrow = str(admin.attenuate_token(wide, paths=["src/**"])["token"])
    answer = refusal(_commit(engine, narrow))
    assert answer["error"] == "path_outside_scope"
    assert "deploy" not in str(answer)
    with closing(open_store(home, None)) as store:
        assert store.approvals(now=int(time.time()), pending=False) == []


def test_two_engines_on_one_postgresql_store_share_approvals(
    world: World, clock: Clock, postgres_url: str
) -> None:
    """An approval asked through one engine is decided from the CLI and used by another."""
    admin.add_operator(world.home, "alice", state=postgres_url)
    (world.home / "policy.toml").write_text(POLICY.replace('"bob"', '"alice"').replace(
        ', "group:release"', ""))
    token = _token(world)
    with Engine(world.home, world.repo, clock=clock, state=postgres_url) as first:
        _stage(first, token, {"deploy/a.toml": "a\n"})
        asked = refusal(_commit(first, token))["approval"]["id"]
    admin.decide_approval(world.home, asked, operator="alice", approve=True, now=clock.now,
                          state=postgres_url)
    with Engine(world.home, world.repo, clock=clock, state=postgres_url) as second:
        ok(_commit(second, token))
        assert refusal(_commit(second, token))["error"] == "invalid_argument"  # nothing staged
        with closing(open_store(world.home, postgres_url)) as store:
            used = store.approval(asked)
    assert used is not None and used.state == "used"
