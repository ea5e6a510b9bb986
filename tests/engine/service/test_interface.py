"""The engine's interface in-process: the ordered check on every call."""

from __future__ import annotations

import pytest

from engine.auth import token as tokens
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, error


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def test_offer_and_call_share_one_check(engine: Engine, world: World) -> None:
    token = world.mint(ops="read")
    offer = engine.offer(token)
    assert offer["ok"] and {t["name"] for t in offer["tools"]} == {
        "effective_scope",
        "list_conflicts",
        "provenance_graph",
        "status",
        "read_file",
        "list_files",
        "search_text",
        "log",
        "diff",
        "symbol_context",
        "symbol_relations",
        "search_symbols",
        "change_impact",
        "project_context",
    }
    answer = call(engine, token, "write_file", {"path": "src/a.py", "content": "x"})
    assert error(answer) == "tool_not_offered"
    assert "write_file" not in answer["error"]["offered"]  # type: ignore[index]


def test_attenuated_token_narrows_the_offer_and_scope(engine: Engine, world: World) -> None:
    parent = world.mint(ops="read,write,commit", paths="src/**")
    child = tokens.attenuate(parent, operations=["read"], paths=["src/api/**"])
    names = {t["name"] for t in engine.offer(child)["tools"]}
    assert "write_file" not in names and "read_file" in names
    assert error(call(engine, child, "read_file", {"path": "src/app.py"})) == "path_outside_scope"
    assert call(engine, child, "read_file", {"path": "src/api/v1.py"})["ok"]
    # Asking an attenuation for more than the parent holds grants nothing extra.
    wider = tokens.attenuate(parent, operations=["read", "sub-token:issue"], paths=["**"])
    assert (
        error(call(engine, wider, "read_file", {"path": "docs/guide.md"})) == "path_outside_scope"
    )


def test_an_attenuation_cannot_commit_what_a_wider_token_staged(
    engine: Engine, world: World
) -> None:
    """Threat: a narrowed copy of a token, sharing its session, lands paths outside its scope."""
    wide = world.mint(agent="lane-bot", ops="read,write,commit", paths="src/**")
    narrow = tokens.attenuate(wide, operations=["read", "commit"], paths=["src/api/**"])
    assert call(engine, wide, "write_file", {"path": "src/other/out.py", "content": "x"})["ok"]
    assert call(engine, wide, "write_file", {"path": "src/api/in.py", "content": "y"})["ok"]
    refs = world.refs()
    refused = call(engine, narrow, "commit", {"message": "land it"})
    assert error(refused) == "path_outside_scope"
    assert "src/other" not in str(refused)  # outside its scope: not named to it
    assert world.refs() == refs  # nothing landed
    status = call(engine, wide, "status")
    assert {e["path"] for e in status["result"]["staged"]} == {  # type: ignore[index]
        "src/other/out.py", "src/api/in.py"}  # the staged change stands
    landed = call(engine, wide, "commit", {"message": "land it"})
    assert landed["ok"], landed


def test_catalog_changed_blocks_writes_not_reads(engine: Engine, world: World) -> None:
    token = world.mint()
    listed = engine.offer(token)["catalog_hash"]
    stale = "sha256:" + "0" * 64
    assert (
        error(call(engine, token, "write_file", {"path": "src/a.py", "content": "x"}, listed=stale))
        == "catalog_changed"
    )
    assert call(engine, token, "read_file", {"path": "src/app.py"}, listed=stale)["ok"]
    assert call(engine, token, "write_file", {"path": "src/a.py", "content": "x"}, listed=listed)[
        "ok"
    ]
    # Threat: writing without ever having been shown a catalog.
    unlisted = call(engine, token, "commit", {"message": "m"}, listed=None)
    assert error(unlisted) == "catalog_changed"
    assert "list tools first" in unlisted["error"]["message"]  # type: ignore[index]


def test_policy_limits_and_forbidden_paths(world: World) -> None:
    (world.home / "policy.toml").write_text(
        "version = 1\n[limits]\nfile_bytes = 10\nstaged_files = 2\n"
        '[paths]\nforbidden = ["src/secret/**"]\n'
    )
    engine = Engine(world.home, world.repo)
    token = world.mint()
    big = call(engine, token, "write_file", {"path": "src/a.py", "content": "x" * 11})
    assert error(big) == "limit_exceeded"
    assert big["error"]["rule"] == "limits.file_bytes"  # type: ignore[index]
    assert call(engine, token, "write_file", {"path": "src/a.py", "content": "x"})["ok"]
    assert call(engine, token, "write_file", {"path": "src/b.py", "content": "x"})["ok"]
    third = call(engine, token, "write_file", {"path": "src/c.py", "content": "x"})
    assert error(third) == "limit_exceeded"
    status = call(engine, token, "status")["result"]
    assert [e["path"] for e in status["staged"]] == ["src/a.py", "src/b.py"]  # type: ignore[index]
    assert (
        error(call(engine, token, "write_file", {"path": "src/secret/k", "content": "x"}))
        == "path_forbidden"
    )


def test_invalid_policy_stops_the_engine(world: World) -> None:
    from engine.errors import ConfigurationError

    (world.home / "policy.toml").write_text("version = 1\n[limits]\nfile_byte = 10\n")
    with pytest.raises(ConfigurationError):
        Engine(world.home, world.repo)


def test_expiry_is_checked_on_every_call(world: World) -> None:
    clock = [1_000_000_000.0]
    token = world.mint(ttl=60)
    # A clock past the token's expiry (mint used the real clock).
    engine = Engine(world.home, world.repo, clock=lambda: clock[0])
    expires = tokens.parse(token).unverified_blocks()[0]["caveats"]
    exp = dict((k, v) for k, v in expires)["exp"]
    clock[0] = exp - 1
    assert call(engine, token, "status")["ok"]
    clock[0] = exp
    assert error(call(engine, token, "status")) == "token_expired"
    assert engine.offer(token)["error"]["error"] == "token_expired"


def test_unexpected_failures_do_not_leak(engine: Engine, world: World) -> None:
    token = world.mint()
    answer = engine.invoke(
        token, "read_file", {"path": "src/app.py"}, session="x" * 500, offered_catalog_hash=None
    )
    assert error(answer) == "invalid_argument"
    assert token not in str(answer)


def test_no_session_overwrites_a_change_it_never_saw(engine: Engine, world: World) -> None:
    """Threat: a lost update. A reads, B changes and commits, A writes from its stale read."""
    token = world.mint()
    seen = call(engine, token, "read_file", {"path": "src/app.py"}, session="A")["result"]
    assert call(engine, token, "write_file", {"path": "src/app.py", "content": "B\n"}, session="B")[
        "ok"
    ]
    assert call(engine, token, "commit", {"message": "B"}, session="B")["ok"]
    stale = call(engine, token, "write_file", {"path": "src/app.py", "content": "A\n"}, session="A")
    assert error(stale) == "conflict"
    # Reading again shows B's version; then A may write.
    again = call(engine, token, "read_file", {"path": "src/app.py"}, session="A")["result"]
    assert again["content"] == "B\n" and seen["content"] != again["content"]  # type: ignore[index]
    assert call(
        engine, token, "write_file", {"path": "src/app.py", "content": "B+A\n"}, session="A"
    )["ok"]
    assert call(engine, token, "commit", {"message": "A"}, session="A")["ok"]


@pytest.mark.parametrize(
    ("tool", "path", "expected"),
    [
        ("log", "src", None),
        ("log", "src/api", None),
        ("diff", "src/app.py", None),
        ("log", "src_old", "path_outside_scope"),
        ("log", "docs/guide.md", "path_outside_scope"),
        ("diff", "src_old/legacy.py", "path_outside_scope"),
        ("log", "src/.env", "path_forbidden"),
        ("log", "src/.ENV", "path_forbidden"),
    ],
)
def test_log_and_diff_filters_cannot_probe_outside_scope(
    engine: Engine, world: World, tool: str, path: str, expected: str | None
) -> None:
    """Threat: learning whether out-of-scope or forbidden files exist from counts."""
    token = world.mint(paths="src/**")
    answer = call(engine, token, tool, {"path": path, "ref": "main"})
    if expected is None:
        assert answer["ok"], answer
    else:
        assert error(answer) == expected


def test_writes_below_a_forbidden_path_do_not_reveal_it(engine: Engine, world: World) -> None:
    """Threat: probing `src/.env` by writing `src/.env/x` (file-to-folder error)."""
    token = world.mint()
    answer = call(engine, token, "write_file", {"path": "src/.env/x", "content": "x"})
    assert error(answer) == "path_forbidden"


def test_a_non_nfc_path_is_refused_before_anything_is_staged(engine: Engine, world: World) -> None:
    """Threat: a path in NFD spelling (two names for one file) is staged, and the
    commit then fails inside the engine because provenance records hold NFC text."""
    token = world.mint()
    refused = call(engine, token, "write_file", {"path": "src/e\u0301.py", "content": "x\n"})
    assert refused["error"]["error"] == "path_invalid"
    status = call(engine, token, "status")["result"]
    assert status["staged"] == []
    assert call(engine, token, "write_file", {"path": "src/\u00e9.py", "content": "x\n"})["ok"]
    assert call(engine, token, "commit", {"message": "nfc name"})["ok"]


