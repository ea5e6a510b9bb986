"""The conflict tools: sessions whose lane moved, listed and resolved each way."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, error


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


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
