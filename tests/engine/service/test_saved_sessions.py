"""Sessions that survive (docs/engine-api.md): saved, resumed by their identity only, removed.

Each test stops an engine and opens another on the same home and repository
(real keys, real git, the SQLite store), as a restarted ``chit engine serve``
does; the same behaviour over real transports, with SIGKILL, is in
tests/gateway/test_session_resume.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from engine.auth import token as tokens
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, error, ok

REF = "refs/chit/sessions/"


def restart(engine: Engine, world: World, **kw: Any) -> Engine:
    engine.close()
    return Engine(world.home, world.repo, **kw)


def saved(world: World) -> dict[str, str]:
    return {k[len(REF):]: v for k, v in world.refs().items() if k.startswith(REF)}


def test_a_staged_change_survives_a_restart_and_commits(world: World) -> None:
    token = world.mint()
    engine = Engine(world.home, world.repo)
    ok(call(engine, token, "write_file", {"path": "src/new.py", "content": "NEW\n"}, "s1"))
    ok(call(engine, token, "write_file", {"path": "src/app.py", "content": "app\n"}, "s1"))
    ok(call(engine, token, "delete_file", {"path": "src/api/v1.py"}, "s1"))
    handle = ok(call(engine, token, "effective_scope", {}, "s1"))["session"]
    assert handle == "s1" and set(saved(world)) == {"s1"}

    engine = restart(engine, world)
    status = ok(call(engine, token, "status", {}, "s1"))
    assert status["session"] == "s1"
    assert status["staged"] == [{"path": "src/api/v1.py", "change": "deleted"},
                                {"path": "src/app.py", "change": "modified"},
                                {"path": "src/new.py", "change": "added"}]
    read = ok(call(engine, token, "read_file", {"path": "src/new.py"}, "s1"))
    assert read["content"] == "NEW\n"
    landed = ok(call(engine, token, "commit", {"message": "after a restart"}, "s1"))
    # The lane moved, then the saved change went.
    repo = pygit2.Repository(str(world.repo))
    head = repo.references["refs/heads/agent/alice"].target
    assert str(head) == landed["commit"]
    assert repo[head].peel(pygit2.Tree)["src/new.py"].data == b"NEW\n"
    assert saved(world) == {}
    assert ok(call(engine, token, "status", {}, "s1"))["staged"] == []
    engine.close()


def test_other_tokens_are_refused_a_saved_session(world: World) -> None:
    """Threat: resuming, reading or committing another identity's staged work by its id."""
    lead = world.mint(agent="lead", ops="read,write,commit,sub-token:issue", paths="src/**",
                      delegable=True)
    engine = Engine(world.home, world.repo)
    ok(call(engine, lead, "write_file", {"path": "src/app.py", "content": "secret plan\n"}, "s"))
    helper = ok(call(engine, lead, "issue_sub_token", {
        "agent": "lead.helper", "ops": ["read", "write", "commit"], "paths": ["src/**"],
        "ttl_seconds": 600}, "other"))["token"]
    engine = restart(engine, world)
    before = world.refs()
    strangers = {
        "another agent": world.mint(agent="bob", paths="**"),
        "another token of the same agent": world.mint(agent="lead", paths="src/**"),
        "a sub-token of the owner": helper,
    }
    for who, token in strangers.items():
        for tool, args in [("status", {}), ("read_file", {"path": "src/app.py"}),
                           ("diff", {}), ("commit", {"message": "steal"}), ("discard", {}),
                           ("write_file", {"path": "src/app.py", "content": "mine\n"})]:
            answer = call(engine, token, tool, args, "s")
            assert error(answer) == "session_token_mismatch", (who, tool, answer)
            assert "secret plan" not in str(answer)
    assert world.refs() == before
    # The owner, and an attenuation of its token (same identity), still resume it.
    narrowed = tokens.attenuate(lead, operations=["read"])
    assert ok(call(engine, narrowed, "read_file", {"path": "src/app.py"}, "s"))[
        "content"] == "secret plan\n"
    assert [e["path"] for e in ok(call(engine, lead, "status", {}, "s"))["staged"]] == [
        "src/app.py"]
    engine.close()


def test_discard_drops_the_change_and_its_reference(world: World) -> None:
    token = world.mint()
    engine = Engine(world.home, world.repo)
    ok(call(engine, token, "write_file", {"path": "src/app.py", "content": "x\n"}, "s"))
    ok(call(engine, token, "write_file", {"path": "src/b.py", "content": "b\n"}, "s"))
    assert "s" in saved(world)
    dropped = ok(call(engine, token, "discard", {}, "s"))
    assert dropped == {"session": "s", "files": 2, "conflicts": 0}
    assert saved(world) == {}
    assert ok(call(engine, token, "status", {}, "s"))["staged"] == []
    assert ok(call(engine, token, "read_file", {"path": "src/app.py"}, "s"))[
        "content"] == "def main():\n    return 1\n"
    assert ok(call(engine, token, "discard", {}, "s")) == {"session": "s", "files": 0,
                                                            "conflicts": 0}
    # A read-only token holds no write: discard is not offered to it.
    reader = world.mint(agent="reader", ops="read")
    assert error(call(engine, reader, "discard", {}, "r")) == "tool_not_offered"
    engine = restart(engine, world)
    assert ok(call(engine, token, "status", {}, "s"))["staged"] == []
    engine.close()


def test_discard_by_a_narrower_attenuation_is_refused(world: World) -> None:
    """Threat: a narrowed token shared with a helper throws away work outside its scope."""
    token = world.mint(paths="src/**")
    engine = Engine(world.home, world.repo)
    ok(call(engine, token, "write_file", {"path": "src/app.py", "content": "x\n"}, "s"))
    narrowed = tokens.attenuate(token, paths=["src/api/**"])
    refused = call(engine, narrowed, "discard", {}, "s")
    assert error(refused) == "path_outside_scope" and refused["error"]["outside"] == 1
    assert "src/app.py" not in str(refused)
    assert "s" in saved(world)
    engine.close()


def test_conflicts_survive_a_restart(world: World) -> None:
    token = world.mint()
    engine = Engine(world.home, world.repo)
    ok(call(engine, token, "write_file", {"path": "src/app.py", "content": "A\n"}, "a"))
    ok(call(engine, token, "write_file", {"path": "src/app.py", "content": "B\n"}, "b"))
    ok(call(engine, token, "commit", {"message": "b"}, "b"))
    assert error(call(engine, token, "commit", {"message": "a"}, "a")) == "conflict"
    engine = restart(engine, world)
    listed = ok(call(engine, token, "list_conflicts", {}, "a"))["session"]
    assert [(c["path"], c["ours"], c["theirs"]) for c in listed] == [("src/app.py", "A\n", "B\n")]
    ok(call(engine, token, "resolve_conflict",
            {"path": "src/app.py", "resolution": "content", "content": "A+B\n"}, "a"))
    engine = restart(engine, world)
    ok(call(engine, token, "commit", {"message": "a"}, "a"))
    assert saved(world) == {}
    engine.close()


def test_a_write_that_restores_the_base_removes_the_reference(world: World) -> None:
    token = world.mint()
    engine = Engine(world.home, world.repo)
    ok(call(engine, token, "write_file", {"path": "src/app.py", "content": "x\n"}, "s"))
    assert "s" in saved(world)
    ok(call(engine, token, "write_file",
            {"path": "src/app.py", "content": "def main():\n    return 1\n"}, "s"))
    assert saved(world) == {}
    engine.close()


def test_an_expired_sessions_reference_is_swept(world: World) -> None:
    now = [time.time()]
    engine = Engine(world.home, world.repo, clock=lambda: now[0])
    short, long_ = world.mint(ttl=60), world.mint(agent="bob", paths="**", ttl=7200)
    ok(call(engine, short, "write_file", {"path": "src/a.py", "content": "a\n"}, "short"))
    ok(call(engine, long_, "write_file", {"path": "src/b.py", "content": "b\n"}, "long"))
    engine.close()
    # A restarted engine sweeps at start: nothing has expired yet.
    engine = Engine(world.home, world.repo, clock=lambda: now[0])
    assert set(saved(world)) == {"short", "long"}
    engine.close()
    now[0] += 3600  # past the short token's expiry, not the long one's
    engine = Engine(world.home, world.repo, clock=lambda: now[0])
    assert set(saved(world)) == {"long"}
    # A running engine sweeps again once session_sweep_seconds passed, on a call.
    now[0] += 7200
    assert error(call(engine, long_, "status", {}, "long")) == "token_expired"
    other = world.mint(agent="carol", ttl=600 + 10_800)  # minted now: valid at the fake time
    call(engine, other, "status", {}, "c")
    assert saved(world) == {}
    engine.close()


@pytest.mark.parametrize("bad", ["..", "a..b", "../../HEAD", "x/../../y", "a\0b", "x" * 129,
                                 "s.lock", "s.", "a:b", ""])
def test_hostile_session_ids_are_refused_without_touching_refs(world: World, bad: str) -> None:
    """Threat: a session id that climbs out of refs/chit/sessions/ or names a lock file."""
    engine = Engine(world.home, world.repo)
    token = world.mint()
    before = world.refs()
    for tool, args in [("status", {}), ("write_file", {"path": "src/a.py", "content": "a"}),
                       ("discard", {})]:
        assert error(call(engine, token, tool, args, bad)) == "invalid_argument", (bad, tool)
    assert world.refs() == before
    assert not (Path(world.repo) / ".git" / "refs" / "chit" / "sessions").exists()
    engine.close()


def test_a_session_changed_by_another_engine_is_read_again(world: World) -> None:
    """Two edges resuming one session at once: the stale one never overwrites the other."""
    token = world.mint()
    one, two = Engine(world.home, world.repo), Engine(world.home, world.repo)
    ok(call(one, token, "write_file", {"path": "src/a.py", "content": "1\n"}, "s"))
    ok(call(two, token, "write_file", {"path": "src/b.py", "content": "2\n"}, "s"))
    refused = call(one, token, "write_file", {"path": "src/c.py", "content": "3\n"}, "s")
    assert error(refused) == "conflict"
    staged = [e["path"] for e in ok(call(one, token, "status", {}, "s"))["staged"]]
    assert staged == ["src/a.py", "src/b.py"]
    ok(call(one, token, "write_file", {"path": "src/c.py", "content": "3\n"}, "s"))
    ok(call(one, token, "commit", {"message": "all three"}, "s"))
    assert saved(world) == {}
    one.close()
    two.close()


def test_sessions_holding_work_make_room_and_come_back(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: a long-running engine refusing new sessions once its memory is full of work."""
    from dataclasses import replace

    from engine.limits import LIMITS
    from engine.service import sessions as service

    monkeypatch.setattr(service, "LIMITS", replace(LIMITS, open_sessions=8))
    token = world.mint()
    engine = Engine(world.home, world.repo)
    for n in range(24):
        ok(call(engine, token, "write_file", {"path": f"src/f{n}.py", "content": f"{n}\n"},
                f"w{n}"))
    for n in range(24):
        staged = ok(call(engine, token, "status", {}, f"w{n}"))["staged"]
        assert [e["path"] for e in staged] == [f"src/f{n}.py"], n
    engine.close()


def test_a_session_belongs_to_one_repository(world: World, tmp_path: Path) -> None:
    """Threat: a session id resuming staged work of another repository of the engine."""
    from engine.admin.seed import create_repository
    from engine.service.repos import RepoSpec
    from tests.conftest import FILES

    app, lib = tmp_path / "app", tmp_path / "lib"
    create_repository(app, FILES)
    create_repository(lib, FILES)
    specs = [RepoSpec("app", app), RepoSpec("lib", lib)]
    token = world.mint(repos=["*"])

    def run(engine: Engine, tool: str, args: dict[str, Any], repo: str) -> Any:
        listed = engine.offer(token, repo=repo).get("catalog_hash")
        return engine.invoke(token, tool, args, session="s", offered_catalog_hash=listed,
                             repo=repo)

    def session_refs(path: Path) -> list[str]:
        return [r for r in pygit2.Repository(str(path)).references if r.startswith(REF)]

    engine = Engine(world.home, specs)
    ok(run(engine, "write_file", {"path": "src/app.py", "content": "in app\n"}, "app"))
    engine.close()
    engine = Engine(world.home, specs)
    assert ok(run(engine, "status", {}, "lib"))["staged"] == []
    assert [e["path"] for e in ok(run(engine, "status", {}, "app"))["staged"]] == ["src/app.py"]
    assert session_refs(app) == [REF + "s"] and session_refs(lib) == []
    ok(run(engine, "commit", {"message": "app"}, "app"))
    assert session_refs(app) == []
    engine.close()
