"""Delegation, revocation and key rotation through the engine, with real keys."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.auth import cbor, rootkeys
from engine.auth import token as t
from engine.auth.verify import verify_at_time
from engine.errors import TokenError
from engine.paths import glob_contained, glob_matches
from engine.service import Engine
from engine.state.sqlite import open_store
from tests.conftest import World
from tests.engine.engine_calls import Caller
from tests.engine.engine_calls import error as code


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


call = Caller(session="s").call


def parent(world: World, **kw: Any) -> str:
    args = {"agent": "lead", "ops": "read,write,commit,sub-token:issue", "paths": "src/**",
            "ttl": 3600, "delegable": True}
    args.update(kw)
    return world.mint(**args)


def sub(engine: Engine, token: str, **kw: Any) -> dict[str, Any]:
    args = {"agent": "lead.helper", "ops": ["read", "write"], "paths": ["src/api/**"],
            "ttl_seconds": 600}
    args.update(kw)
    return call(engine, token, "issue_sub_token", args, session=f"s-{secrets.token_hex(4)}")


def test_issue_sub_token_is_offered_only_with_flag_and_operation(engine: Engine,
                                                                  world: World) -> None:
    names = lambda tok: {x["name"] for x in engine.offer(tok)["tools"]}  # noqa: E731
    assert "issue_sub_token" in names(parent(world))
    assert "issue_sub_token" not in names(parent(world, delegable=False,
                                                 ops="read,write,commit"))


def test_child_is_a_new_agent_on_its_own_lane(engine: Engine, world: World) -> None:
    lead = parent(world)
    issued = sub(engine, lead)
    assert issued["ok"], issued
    child = issued["result"]["token"]
    scope = call(engine, child, "effective_scope", session="c")["result"]
    assert scope["agent"] == "lead.helper" and scope["lane"] == "agent/lead.helper"
    assert scope["token_id"] == issued["result"]["token_id"]
    assert scope["operations"] == ["read", "write"] and not scope["delegable"]
    assert "commit" not in scope["tools"] and "issue_sub_token" not in scope["tools"]
    assert code(call(engine, child, "read_file", {"path": "src/app.py"}, session="c")) \
        == "path_outside_scope"
    assert call(engine, child, "read_file", {"path": "src/api/v1.py"}, session="c")["ok"]
    # The delegation is recorded for the provenance graph.
    record = open_store(world.home).delegations()[-1]
    assert (record.parent_agent, record.child_agent, record.child_id) == (
        "lead", "lead.helper", issued["result"]["token_id"])
    assert record.scope == {"ops": ["read", "write"], "paths": ["src/api/**"],
                            "delegable": False}


@pytest.mark.parametrize(
    ("request_", "code_"),
    [
        ({"ops": ["read", "admin"]}, "invalid_argument"),
        ({"paths": ["docs/**"]}, "delegation_widens"),
        ({"paths": ["src/api/../**"]}, "delegation_widens"),
        ({"paths": ["**"]}, "delegation_widens"),
        ({"paths": ["src"]}, "delegation_widens"),
        ({"ttl_seconds": 10_000}, "delegation_widens"),
        ({"agent": "lead"}, "invalid_argument"),
        ({"agent": "helper"}, "invalid_argument"),
        ({"agent": "alice"}, "invalid_argument"),
        ({"agent": "lead.Bad/Name"}, "invalid_argument"),
        ({"agent": "lead.lock"}, "invalid_argument"),
        ({"agent": "other.helper"}, "invalid_argument"),
        ({"paths": ["src/" + "a" * 2000]}, "invalid_argument"),
        ({"paths": ["src/cafe\u0301/**"]}, "invalid_argument"),
        ({"paths": []}, "invalid_argument"),
        ({"delegable": True, "ops": ["read"]}, "invalid_argument"),
    ],
)
def test_widening_and_bad_requests_are_refused(engine: Engine, world: World,
                                               request_: dict[str, Any], code_: str) -> None:
    """Threat: a delegating agent handing out more than it holds."""
    answer = sub(engine, parent(world), **request_)
    assert code(answer) == code_
    if code_ == "delegation_widens":
        assert "asked" in answer["error"] and "held" in answer["error"]
    assert open_store(world.home).delegations() == []


def test_operations_beyond_the_parent_widen(engine: Engine, world: World) -> None:
    narrow = parent(world, ops="read,sub-token:issue")
    answer = sub(engine, narrow, ops=["read", "write"])
    assert code(answer) == "delegation_widens"
    assert answer["error"]["asked"] == ["read", "write"]


def test_star_under_star_py_is_a_widening(engine: Engine, world: World) -> None:
    lead = parent(world, paths="src/*.py")
    assert code(sub(engine, lead, paths=["src/**/*.py"])) == "delegation_widens"
    assert sub(engine, lead, paths=["src/a*.py"])["ok"]


def test_depth_limit(engine: Engine, world: World) -> None:
    token, name = parent(world), "lead"
    for depth in range(1, 4):
        name = f"{name}.d{depth}"
        answer = sub(engine, token, agent=name, ops=["read", "sub-token:issue"],
                     paths=["src/**"], ttl_seconds=600 - depth, delegable=True)
        assert answer["ok"], answer
        token = answer["result"]["token"]
    assert code(sub(engine, token, agent=f"{name}.d4", ops=["read"], paths=["src/**"],
                    ttl_seconds=100)) == "delegation_depth_exceeded"


def test_revoking_a_parent_kills_every_descendant(engine: Engine, world: World) -> None:
    lead = parent(world)
    child = sub(engine, lead, ops=["read", "sub-token:issue"], paths=["src/**"],
                delegable=True)["result"]
    grandchild = sub(engine, child["token"], agent="lead.helper.g", ops=["read"])["result"]
    assert call(engine, grandchild["token"], "status", session="g")["ok"]
    open_store(world.home).revoke(child["token_id"], now=1)
    assert code(call(engine, grandchild["token"], "status", session="g")) == "token_revoked"
    assert code(call(engine, child["token"], "status", session="c")) == "token_revoked"
    assert call(engine, lead, "status", session="l")["ok"]


def test_offline_tampering_with_a_delegation_is_refused(engine: Engine, world: World) -> None:
    """Threat: copying the engine's delegation proof onto a wider block."""
    lead = parent(world)
    child = sub(engine, lead)["result"]["token"]
    parsed = t.parse(child)
    block = cbor.decode(parsed.blocks[-1])
    block["caveats"] = [["ops", ["read", "write", "commit"]], ["paths", ["src/**"]],
                        ["exp", block["caveats"][2][1]], ["deleg", False]]
    raw = cbor.encode(block)
    lead_parsed = t.parse(lead)
    forged = t._emit(parsed.key_id, (*lead_parsed.blocks, raw),
                     t.hmac_sha256(lead_parsed._tag, raw))
    assert code(call(engine, forged, "status", session="f")) == "delegation_not_permitted"


def test_key_rotation_and_retirement(engine: Engine, world: World) -> None:
    old = world.mint()
    old_kid = t.parse(old).key_id
    new_key = rootkeys.rotate_key(world.home)
    new = world.mint()
    assert t.parse(new).key_id == new_key.key_id != old_kid
    assert call(engine, old, "status", session="o")["ok"]  # older keys keep verifying
    rootkeys.retire_key(world.home, old_kid)
    assert code(call(engine, old, "status", session="o2")) == "token_unknown_key"
    assert call(engine, new, "status", session="n")["ok"]
    with pytest.raises(ValueError):
        rootkeys.retire_key(world.home, new_key.key_id)  # the last active key


GLOBS = ["**", "src/**", "src/*", "src/*.py", "src/a*.py", "src/api/**", "src/?.py",
         "src/**/*.py", "src/**/x", "*/api/**", "src/api/v1.py", "docs/**", "src_old/**",
         "src/*/v1.py", "src/a*"]
PATHS = ["src/a.py", "src/ab.py", "src/api/v1.py", "src/api/x/y.py", "src/x", "src/b/x",
         "docs/a.md", "src_old/a.py", "src", "a.py", "src/api", "src/x.py", "x/api/z"]


@settings(max_examples=400)
@given(inner=st.sampled_from(GLOBS), outer=st.sampled_from(GLOBS))
def test_glob_containment_is_sound(inner: str, outer: str) -> None:
    """Property: if containment is claimed, no sampled path matches inner but not outer."""
    if glob_contained(inner, outer):
        for path in PATHS:
            if glob_matches(inner, path):
                assert glob_matches(outer, path), (inner, outer, path)


# The world (home, repository, state) is shared across examples on purpose: every
# example mints its own parent and names fresh agents.
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_chain_of_attenuations_and_delegations_stays_within_its_parent(
    data: st.DataObject, world: World
) -> None:
    """Property: each hop's authority is contained in the one before it."""
    engine = Engine(world.home, world.repo)
    ops_all = ["read", "write", "commit", "sub-token:issue"]
    token = parent(world, ops=",".join(ops_all), paths="**")
    for _hop in range(data.draw(st.integers(1, 4))):
        before = verify_at_time(token, rootkeys.Keyring(world.home).lookup, _now())
        ops = data.draw(st.lists(st.sampled_from(ops_all), min_size=1, unique=True))
        paths = data.draw(st.lists(st.sampled_from(GLOBS), min_size=1, max_size=2))
        if data.draw(st.booleans()):
            token = t.attenuate(token, operations=ops, paths=paths)
        else:
            answer = sub(engine, token, agent=f"{before.agent}.h{secrets.token_hex(2)}", ops=ops,
                         paths=paths, ttl_seconds=60, delegable="sub-token:issue" in ops)
            if not answer["ok"]:
                assert answer["error"]["error"] in {"delegation_widens", "invalid_argument",
                                                    "tool_not_offered",
                                                    "delegation_depth_exceeded"}
                continue
            token = answer["result"]["token"]
        try:
            after = verify_at_time(token, rootkeys.Keyring(world.home).lookup, _now())
        except TokenError:
            break
        assert after.operations <= before.operations
        assert after.expires_at <= before.expires_at
        assert after.delegable <= before.delegable
        for path in PATHS:
            if after.allows_path(path):
                assert before.allows_path(path)
        if not before.operations & {"sub-token:issue"}:
            assert after.agent == before.agent


def _now() -> int:
    import time

    return int(time.time())


def test_effective_scope_shows_the_chain(engine: Engine, world: World) -> None:
    child = sub(engine, parent(world))["result"]["token"]
    scope = call(engine, child, "effective_scope", session="x")["result"]
    assert scope["chain"] == ["lead", "lead.helper"]


def test_a_delegation_cannot_take_over_another_agents_lane(engine: Engine, world: World) -> None:
    """Threat: a delegating agent naming its helper after an existing root agent."""
    world.mint(agent="alice")  # minted, no lane yet
    answer = sub(engine, parent(world), agent="alice")
    assert code(answer) == "invalid_argument"
    assert "lead.<label>" in answer["error"]["message"]
