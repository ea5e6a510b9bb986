"""The engine's sessions: bound to their token, one staged change each, evicted when idle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.auth import token as tokens
from engine.limits import LIMITS
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, error


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def test_session_is_bound_to_its_token(engine: Engine, world: World) -> None:
    """Threat: acting in another agent's session by presenting its session id."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    assert call(engine, alice, "write_file", {"path": "src/a.py", "content": "a"})["ok"]
    assert error(call(engine, bob, "status")) == "session_token_mismatch"
    assert error(call(engine, bob, "commit", {"message": "steal"})) == "session_token_mismatch"
    # Same agent, a different token: still not this session's token.
    alice2 = world.mint(agent="alice")
    assert error(call(engine, alice2, "status")) == "session_token_mismatch"
    # An attenuation of the same token is the same token id: it may continue.
    narrowed = tokens.attenuate(alice, operations=["read"])
    status = call(engine, narrowed, "status")
    assert status["ok"] and status["result"]["staged"][0]["path"] == "src/a.py"  # type: ignore[index]


def test_sessions_of_one_agent_share_the_lane(engine: Engine, world: World) -> None:
    """Two connections of one agent: each its own staged change, one lane."""
    token = world.mint()
    assert call(engine, token, "write_file", {"path": "src/a.py", "content": "a"}, session="A")[
        "ok"
    ]
    assert call(engine, token, "write_file", {"path": "src/b.py", "content": "b"}, session="B")[
        "ok"
    ]
    b = call(engine, token, "commit", {"message": "b"}, session="B")
    assert b["ok"], b
    # A's change touches nothing B changed: it lands on top of B's commit.
    a = call(engine, token, "commit", {"message": "a"}, session="A")
    assert a["ok"], a
    assert a["result"]["parent"] == b["result"]["commit"]  # type: ignore[index]
    read = call(engine, token, "read_file", {"path": "src/b.py"}, session="A")
    assert read["result"]["content"] == "b"  # type: ignore[index]

    # Both edit one path: the later commit is a conflict and changes nothing.
    assert call(engine, token, "write_file", {"path": "src/app.py", "content": "1"}, session="A")[
        "ok"
    ]
    assert call(engine, token, "write_file", {"path": "src/app.py", "content": "2"}, session="B")[
        "ok"
    ]
    assert call(engine, token, "commit", {"message": "B wins"}, session="B")["ok"]
    refused = call(engine, token, "commit", {"message": "A"}, session="A")
    assert error(refused) == "conflict" and refused["error"]["paths"] == ["src/app.py"]  # type: ignore[index]
    listed = call(engine, token, "list_conflicts", session="A")["result"]
    assert listed["session"] == [  # type: ignore[index]
        {"path": "src/app.py", "base": "def main():\n    return 1\n", "ours": "1",
         "theirs": "2", "binary": False, "encoding": "utf-8"}
    ]
    resolved = call(engine, token, "resolve_conflict",
                    {"path": "src/app.py", "resolution": "content", "content": "1+2"},
                    session="A")
    assert resolved["result"]["remaining"] == 0  # type: ignore[index]
    assert call(engine, token, "commit", {"message": "A after merge"}, session="A")["ok"]
    lane = call(engine, token, "read_file", {"path": "src/app.py", "ref": "agent/alice"},
                session="A")["result"]
    assert lane["content"] == "1+2"  # type: ignore[index]


def test_idle_sessions_make_room_and_busy_ones_are_kept(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: a long-running engine (``chit engine serve``) refuses every new
    connection once it has seen LIMITS.open_sessions sessions, or frees room by dropping
    a session that still holds staged work."""
    from engine.service import sessions as service

    monkeypatch.setattr(service, "LIMITS", replace(LIMITS, open_sessions=16))
    token = world.mint()
    assert call(engine, token, "write_file", {"path": "src/keep.py", "content": "k\n"},
                session="busy")["ok"]
    for n in range(40):  # far more sessions than the cap, each idle once done
        assert call(engine, token, "status", session=f"idle-{n}")["ok"], n
    staged = call(engine, token, "status", session="busy")["result"]["staged"]
    assert [e["path"] for e in staged] == ["src/keep.py"]
    assert call(engine, token, "commit", {"message": "kept"}, session="busy")["ok"]
