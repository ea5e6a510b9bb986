"""Sessions across engine workers: placed in the shared store, forwarded, taken over, released.

Two (or three) real engines share one state store (SQLite, and a real
PostgreSQL), as the workers of one ``chit engine serve --workers N`` do; the HTTP
forwarding between them is tested with real processes in
tests/gateway/test_engine_workers.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from engine import admin
from engine.limits import LIMITS
from engine.service import Engine, SessionElsewhere
from tests.conftest import World
from tests.engine.engine_calls import call, error, ok
from tests.engine.state.storekit import raw

GROUP = "host:/run/chit-a"


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: pytest.FixtureRequest, world: World) -> str:
    if request.param == "sqlite":
        return f"sqlite://{world.home}/state.db"
    return str(request.getfixturevalue("postgres_url"))


def _owners(state: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw(state, "SELECT session, owner FROM engine_sessions")}


@pytest.fixture
def pair(world: World, state: str) -> Iterator[tuple[Engine, Engine]]:
    one = Engine(world.home, world.repo, state=state)
    two = Engine(world.home, world.repo, state=state)
    one.place_sessions(group=GROUP, owner="/run/chit-a/w0.sock")
    two.place_sessions(group=GROUP, owner="/run/chit-a/w1.sock")
    with one, two:
        yield one, two


def test_a_session_held_by_another_worker_is_named_not_served(
    pair: tuple[Engine, Engine], world: World, state: str
) -> None:
    """Threat: two workers each keeping a half of one session's staged change."""
    one, two = pair
    token = world.mint()
    ok(call(one, token, "write_file", {"path": "src/a.py", "content": "a\n"}, session="S"))
    one.flush_log()
    before = sum(1 for _ in admin.call_log_entries(world.home, state=state))
    with pytest.raises(SessionElsewhere) as elsewhere:
        call(two, token, "write_file", {"path": "src/b.py", "content": "b\n"}, session="S")
    assert elsewhere.value.owner == "/run/chit-a/w0.sock"
    assert elsewhere.value.repo == "repo"  # keyed by its repository: placements never mix
    two.flush_log()
    entries = sum(1 for _ in admin.call_log_entries(world.home, state=state))
    assert entries == before  # the holder records it
    assert _owners(state) == {f"{GROUP}|repo|S": "/run/chit-a/w0.sock"}
    # A call the check refuses is answered (and recorded) wherever it lands.
    assert error(call(two, token + "x", "status", session="S")) == "token_malformed"
    staged = ok(call(one, token, "status", session="S"))["staged"]
    assert [entry["path"] for entry in staged] == ["src/a.py"]


def test_a_gone_workers_session_is_taken_over_with_its_saved_work(
    pair: tuple[Engine, Engine], world: World, state: str
) -> None:
    one, two = pair
    token = world.mint()
    ok(call(one, token, "write_file", {"path": "src/a.py", "content": "a\n"}, session="S"))
    placement = two.place_sessions(group=GROUP, owner="/run/chit-a/w1.sock")
    assert placement.take_over("S", "/run/chit-a/w0.sock", repo="repo")
    assert not placement.take_over("S", "/run/chit-a/w0.sock", repo="repo")  # only once
    # Read back from refs/chit/sessions/S, as after a restart.
    staged = ok(call(two, token, "status", session="S"))["staged"]
    assert [entry["path"] for entry in staged] == ["src/a.py"]
    assert _owners(state) == {f"{GROUP}|repo|S": "/run/chit-a/w1.sock"}


def test_separate_engines_on_one_store_never_see_each_others_sessions(
    pair: tuple[Engine, Engine], world: World, state: str
) -> None:
    """Threat: one ``chit engine serve`` taking, or forwarding to, another one's sessions."""
    one, _two = pair
    token = world.mint()
    ok(call(one, token, "write_file", {"path": "src/a.py", "content": "a\n"}, session="S"))
    with Engine(world.home, world.repo, state=state) as other:
        other.place_sessions(group="host:/run/chit-b", owner="/run/chit-b/w0.sock")
        # Never forwarded to a's worker: b serves the session itself, from the
        # repository's saved reference (the same token identity may resume it anywhere).
        staged = ok(call(other, token, "status", session="S"))["staged"]
        assert [entry["path"] for entry in staged] == ["src/a.py"]
        assert error(call(other, world.mint(agent="bob"), "status", session="S")) == (
            "session_token_mismatch")
    assert _owners(state) == {f"{GROUP}|repo|S": "/run/chit-a/w0.sock"}  # b's row went at close


def test_rows_go_with_the_sessions_a_worker_forgets_and_when_it_stops(
    world: World, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: the store's placements growing without bound on a long-running engine."""
    from engine.service import sessions as service

    monkeypatch.setattr(service, "LIMITS", replace(LIMITS, open_sessions=16))
    token = world.mint()
    engine = Engine(world.home, world.repo, state=state)
    engine.place_sessions(group=GROUP, owner="/run/chit-a/w0.sock")
    for n in range(40):
        ok(call(engine, token, "status", session=f"idle-{n}"))
    assert 0 < len(_owners(state)) <= 16
    assert f"{GROUP}|repo|idle-39" in _owners(state)
    # A predecessor's rows (a worker of the same socket that died without
    # closing) are let go when its successor starts.
    with Engine(world.home, world.repo, state=state) as successor:
        successor.place_sessions(group=GROUP, owner="/run/chit-a/w0.sock")
        assert _owners(state) == {}
        ok(call(successor, token, "status", session="fresh"))
        assert list(_owners(state)) == [f"{GROUP}|repo|fresh"]
    assert _owners(state) == {}  # a worker that stops releases its own
    engine.close()
