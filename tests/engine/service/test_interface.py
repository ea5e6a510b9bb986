"""The engine's interface in-process: the ordered check on every call."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from engine.auth import token as tokens
from engine.service import Engine
from tests.conftest import World


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def call(
    engine: Engine,
    token: str,
    tool: str,
    args: dict[str, object] | None = None,
    session: str = "s1",
    listed: str | None = "listed",
) -> dict[str, object]:
    """Invoke as an edge that listed the token's catalog first (unless told otherwise)."""
    if listed == "listed":
        offer = engine.offer(token)
        listed = offer.get("catalog_hash")  # type: ignore[assignment]
    return engine.invoke(token, tool, args or {}, session=session, offered_catalog_hash=listed)


def error(answer: dict[str, object]) -> str:
    assert answer["ok"] is False, answer
    return str(answer["error"]["error"])  # type: ignore[index]


def test_offer_and_call_share_one_check(engine: Engine, world: World) -> None:
    token = world.mint(ops="read")
    offer = engine.offer(token)
    assert offer["ok"] and {t["name"] for t in offer["tools"]} == {
        "effective_scope",
        "list_conflicts",
        "provenance_graph",
        "status",
        "read_file",
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


@pytest.mark.parametrize("resolution", ["ours", "theirs", "content"])
def test_conflicts_resolve_each_way_and_clean_paths_merge(
    engine: Engine, world: World, resolution: str
) -> None:
    """Divergence: two sessions of one agent edit one file; each way of resolving."""
    token = world.mint()
    readme = "line 1\nline 2\nline 3\nline 4\nline 5\n"
    for session in ("A", "B"):  # both sessions start from one shared base
        call(engine, token, "read_file", {"path": "src/app.py"}, session=session)
    assert call(engine, token, "write_file", {"path": "src/merge.txt", "content": readme},
                session="B")["ok"]
    assert call(engine, token, "commit", {"message": "base"}, session="B")["ok"]
    # Disjoint edits of one text file merge cleanly; one line edited twice conflicts.
    assert call(engine, token, "write_file", {"path": "src/merge.txt",
                "content": readme.replace("line 1", "line one")}, session="A")["ok"]
    assert call(engine, token, "write_file", {"path": "src/app.py", "content": "A\n"},
                session="A")["ok"]
    assert call(engine, token, "write_file", {"path": "src/merge.txt",
                "content": readme.replace("line 5", "line five")}, session="B")["ok"]
    assert call(engine, token, "write_file", {"path": "src/app.py", "content": "B\n"},
                session="B")["ok"]
    assert call(engine, token, "commit", {"message": "B"}, session="B")["ok"]
    refused = call(engine, token, "commit", {"message": "A"}, session="A")
    assert error(refused) == "conflict"
    assert refused["error"]["paths"] == ["src/app.py"]
    args: dict[str, Any] = {"path": "src/app.py", "resolution": resolution}
    if resolution == "content":
        args["content"] = "A and B\n"
    assert call(engine, token, "resolve_conflict", args, session="A")["ok"]
    done = call(engine, token, "commit", {"message": "A"}, session="A")
    expected = {"ours": "A\n", "theirs": "B\n", "content": "A and B\n"}[resolution]
    if resolution == "theirs" and not done["ok"]:
        # Only app.py differed and theirs is the lane's: the merge part still lands.
        assert error(done) == "invalid_argument"
    lane = lambda p: call(engine, token, "read_file", {"path": p, "ref": "agent/alice"},  # noqa: E731
                          session="Z")["result"]["content"]
    assert lane("src/app.py") == expected
    assert lane("src/merge.txt") == readme.replace("line 1", "line one").replace(
        "line 5", "line five")


def test_deletes_binary_and_resolution_errors(engine: Engine, world: World) -> None:
    token = world.mint()
    for session in ("A", "B"):
        call(engine, token, "read_file", {"path": "src/data.bin"}, session=session)
    assert call(engine, token, "delete_file", {"path": "src/data.bin"}, session="A")["ok"]
    assert call(engine, token, "write_file", {"path": "src/data.bin", "content": "AAE=",
                                              "encoding": "base64"}, session="B")["ok"]
    assert call(engine, token, "commit", {"message": "B"}, session="B")["ok"]
    assert error(call(engine, token, "commit", {"message": "A"}, session="A")) == "conflict"
    listed = call(engine, token, "list_conflicts", session="A")["result"]["session"]
    assert listed[0]["path"] == "src/data.bin" and listed[0]["ours"] is None
    assert listed[0]["binary"] is True and listed[0]["encoding"] == "base64"
    assert base64.b64decode(listed[0]["theirs"]) == b"\x00\x01"
    assert base64.b64decode(listed[0]["base"]) == bytes(range(256))
    assert error(call(engine, token, "resolve_conflict",
                      {"path": "src/app.py", "resolution": "ours"}, session="A")) == "not_found"
    assert error(call(engine, token, "resolve_conflict",
                      {"path": "src/data.bin", "resolution": "content"}, session="A")) \
        == "invalid_argument"
    assert call(engine, token, "resolve_conflict",
                {"path": "src/data.bin", "resolution": "ours"}, session="A")["ok"]
    assert call(engine, token, "commit", {"message": "A deletes"}, session="A")["ok"]
    gone = call(engine, token, "read_file", {"path": "src/data.bin", "ref": "agent/alice"},
                session="Z")
    assert error(gone) == "not_found"


def test_list_conflicts_reports_the_lane_against_main(world: World) -> None:
    import pygit2

    engine = Engine(world.home, world.repo)
    token = world.mint()
    assert call(engine, token, "write_file", {"path": "src/app.py", "content": "lane\n"})["ok"]
    assert call(engine, token, "commit", {"message": "lane"})["ok"]
    repo = pygit2.Repository(str(world.repo))
    main = repo.references["refs/heads/main"]
    index = pygit2.Index()
    index.read_tree(repo[main.target].tree)
    index.add(pygit2.IndexEntry("src/app.py", repo.create_blob(b"main\n"),
                                pygit2.enums.FileMode.BLOB))
    sig = pygit2.Signature("x", "x@example.com", 1_800_000_000, 0)
    repo.create_commit("refs/heads/main", sig, sig, "main moves", index.write_tree(repo),
                       [main.target])
    before = {r: str(repo.references[r].target) for r in repo.references}
    listed = call(engine, token, "list_conflicts", session="s2")["result"]
    assert listed["with_main"][0]["path"] == "src/app.py"
    assert listed["with_main"][0]["ours"] == "lane\n"
    assert listed["with_main"][0]["theirs"] == "main\n"
    after = {r: str(repo.references[r].target) for r in repo.references}
    assert before == after


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


def _commit_on_lane(world: World, agent: str, entries: dict[str, tuple[bytes, int]]) -> None:
    """Move a lane as another session would, with given file modes (test setup only)."""
    import pygit2

    repo = pygit2.Repository(str(world.repo))
    ref = f"refs/heads/agent/{agent}"
    head = repo.references[ref].target if ref in repo.references else \
        repo.references["refs/heads/main"].target
    index = pygit2.Index()
    index.read_tree(repo[head].tree)
    for path, (data, mode) in entries.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode(mode)))
    sig = pygit2.Signature("other", "other@example.com", 1_800_000_000, 0)
    repo.create_commit(ref, sig, sig, "other session\n", index.write_tree(repo), [head])


def test_a_clean_merge_keeps_the_lanes_file_type(engine: Engine, world: World) -> None:
    """Threat: a merge silently undoing another session's executable bit."""
    import pygit2

    token = world.mint()
    call(engine, token, "read_file", {"path": "src/app.py"}, session="A")
    _commit_on_lane(world, "alice", {"src/app.py": (b"def main():\n    return 1\n", 0o100755)})
    # A's edit is on a stale view of app.py, so first read it again...
    call(engine, token, "read_file", {"path": "src/app.py"}, session="A")
    assert call(engine, token, "write_file", {"path": "src/app.py",
                "content": "def main():\n    return 2\n"}, session="A")["ok"]
    assert call(engine, token, "commit", {"message": "A"}, session="A")["ok"]
    repo = pygit2.Repository(str(world.repo))
    tree = repo[repo.references["refs/heads/agent/alice"].target].tree
    assert tree["src/app.py"].filemode == 0o100755
    assert repo[tree["src/app.py"].id].data == b"def main():\n    return 2\n"


def test_symlink_sides_conflict_and_resolution_keeps_the_type(engine: Engine,
                                                              world: World) -> None:
    """Threat: resolving a conflict turning a symlink into a plain file."""
    import pygit2

    token = world.mint()
    assert call(engine, token, "write_file", {"path": "src/y", "content": "plain\n"},
                session="A")["ok"]
    _commit_on_lane(world, "alice", {"src/y": (b"app.py", 0o120000)})
    assert error(call(engine, token, "commit", {"message": "A"}, session="A")) == "conflict"
    # A conflicted path is settled only by resolve_conflict, never by a stray write.
    assert error(call(engine, token, "write_file", {"path": "src/y", "content": "x"},
                      session="A")) == "conflict"
    assert call(engine, token, "resolve_conflict", {"path": "src/y", "resolution": "theirs"},
                session="A")["ok"]
    answer = call(engine, token, "commit", {"message": "A"}, session="A")
    repo = pygit2.Repository(str(world.repo))
    tree = repo[repo.references["refs/heads/agent/alice"].target].tree
    assert tree["src/y"].filemode == 0o120000 and repo[tree["src/y"].id].data == b"app.py"
    assert not answer["ok"]  # theirs is what the lane has: nothing is left to commit


def test_binary_conflicts_resolve_with_base64_content(engine: Engine, world: World) -> None:
    import pygit2

    token = world.mint()
    call(engine, token, "read_file", {"path": "src/data.bin"}, session="A")
    assert call(engine, token, "write_file", {"path": "src/data.bin", "content": "/w==",
                                              "encoding": "base64"}, session="A")["ok"]
    _commit_on_lane(world, "alice", {"src/data.bin": (b"\x00\x02", 0o100644)})
    assert error(call(engine, token, "commit", {"message": "A"}, session="A")) == "conflict"
    merged = base64.b64encode(b"\xff\x00\x02").decode()
    assert call(engine, token, "resolve_conflict", {"path": "src/data.bin", "resolution":
                "content", "content": merged, "encoding": "base64"}, session="A")["ok"]
    assert call(engine, token, "commit", {"message": "A"}, session="A")["ok"]
    repo = pygit2.Repository(str(world.repo))
    tree = repo[repo.references["refs/heads/agent/alice"].target].tree
    assert repo[tree["src/data.bin"].id].data == b"\xff\x00\x02"


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


def test_idle_sessions_make_room_and_busy_ones_are_kept(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: a long-running engine (``chit engine serve``) refuses every new
    connection once it has seen MAX_SESSIONS sessions, or frees room by dropping
    a session that still holds staged work."""
    from engine.service import sessions as service

    monkeypatch.setattr(service, "MAX_SESSIONS", 16)
    token = world.mint()
    assert call(engine, token, "write_file", {"path": "src/keep.py", "content": "k\n"},
                session="busy")["ok"]
    for n in range(40):  # far more sessions than the cap, each idle once done
        assert call(engine, token, "status", session=f"idle-{n}")["ok"], n
    staged = call(engine, token, "status", session="busy")["result"]["staged"]
    assert [e["path"] for e in staged] == ["src/keep.py"]
    assert call(engine, token, "commit", {"message": "kept"}, session="busy")["ok"]
