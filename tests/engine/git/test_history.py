"""Tests for engine/git/history.py: log, diff and commit trailers."""

from __future__ import annotations

import pygit2
import pytest

from engine.errors import InvalidRequestError
from engine.git import MAIN, MODE_FILE, MODE_SYMLINK, Repository, StagedChange, commit_trailers
from tests.engine.git.repo_helpers import BASE_FILES, EVERYTHING, T0, _commit, _commit_files

# -- log and diff -------------------------------------------------------------


def _history(git_repo: pygit2.Repository) -> list[pygit2.Oid]:
    main = git_repo.references[MAIN].target
    files = dict(BASE_FILES)
    ids = []
    steps = [
        ("secret/key.txt", b"rotated\n", "rotate secret\n"),
        ("src/app.py", b"v2\n", "app v2\n\nBody text.\n\nChit-Agent: alice\nChit-Session: s1\n"),
        ("secret/other.txt", b"x\n", "another secret\n"),
        ("docs/guide.md", b"guide\n", "docs\n"),
    ]
    parent = main
    for n, (path, data, msg) in enumerate(steps, start=1):
        files[path] = (MODE_FILE, data)
        parent = _commit_files(git_repo, MAIN, files, [parent], msg, when=T0 + n)
        ids.append(parent)
    return ids


def test_log_prunes_invisible_commits(vcs: Repository, git_repo: pygit2.Repository) -> None:
    # Threat: log leaking messages of commits that only touched forbidden paths.
    ids = _history(git_repo)
    visible = lambda p: not p.startswith("secret/")  # noqa: E731
    log = vcs.log(None, "alice", None, 50, visible)
    assert [c["id"] for c in log["commits"]] == [
        str(ids[3]),
        str(ids[1]),
        str(git_repo[ids[0]].peel(pygit2.Commit).parent_ids[0]),
    ]
    assert log["pruned"] == 2 and log["truncated"] is False
    root = log["commits"][-1]
    assert "secret/key.txt" not in root["paths"] and "README.md" in root["paths"]
    app = log["commits"][1]
    assert app["summary"] == "app v2"
    assert app["trailers"] == {"Chit-Agent": "alice", "Chit-Session": "s1"}
    assert app["paths"] == ["src/app.py"] and app["author"] == "Main Dev"
    assert app["time"] == T0 + 2


def test_log_path_limit_and_truncation(vcs: Repository, git_repo: pygit2.Repository) -> None:
    ids = _history(git_repo)
    log = vcs.log("main", "alice", "src", 50, EVERYTHING)
    assert log["commits"][0]["id"] == str(ids[1])
    assert len(log["commits"]) == 2 and log["pruned"] == 0
    log = vcs.log(None, "alice", "secret", 50, lambda p: not p.startswith("secret/"))
    assert log["commits"] == [] and log["pruned"] == 3
    log = vcs.log(str(ids[3])[:10], "alice", None, 2, EVERYTHING)
    assert len(log["commits"]) == 2 and log["truncated"] is True
    log = vcs.log(None, "alice", None, 5, EVERYTHING)
    assert len(log["commits"]) == 5 and log["truncated"] is False
    for bad in [0, 201, True]:
        with pytest.raises(InvalidRequestError):
            vcs.log(None, "alice", None, bad, EVERYTHING)
    with pytest.raises(InvalidRequestError):
        vcs.log("main~1", "alice", None, 5, EVERYTHING)


def test_diff_staged_change_with_binary(vcs: Repository) -> None:
    staged = StagedChange()
    assert vcs.diff("alice", None, None, None, EVERYTHING) == {"files": [], "pruned": 0}
    vcs.stage_write("alice", staged, "README.md", b"hello\nworld\n")
    vcs.stage_write("alice", staged, "blob.bin", b"\x00\x01\x02binary")
    vcs.stage_delete("alice", staged, "src/app.py")
    vcs.stage_write("alice", staged, "secret/key.txt", b"leak?\n")
    result = vcs.diff("alice", staged, None, None, lambda p: not p.startswith("secret/"))
    assert result["pruned"] == 1
    by_path = {f["path"]: f for f in result["files"]}
    assert list(by_path) == ["README.md", "blob.bin", "src/app.py"]
    assert by_path["README.md"]["change"] == "modified"
    assert "+world" in by_path["README.md"]["patch"]
    assert by_path["blob.bin"] == {
        "path": "blob.bin",
        "change": "added",
        "old_mode": None,
        "new_mode": MODE_FILE,
        "binary": True,
        "patch": None,
    }
    assert by_path["src/app.py"]["change"] == "deleted"
    assert "-print('hi')" in by_path["src/app.py"]["patch"]
    only_src = vcs.diff("alice", staged, None, "src", EVERYTHING)
    assert [f["path"] for f in only_src["files"]] == ["src/app.py"]
    assert all("leak" not in (f["patch"] or "") for f in result["files"])


def test_diff_against_revision(vcs: Repository, git_repo: pygit2.Repository) -> None:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a\n")
    _commit(vcs, "alice", staged)
    vcs.stage_write("alice", staged, "b.txt", b"b\n")
    vcs.stage_move("alice", staged, "link", "link2")
    result = vcs.diff("alice", staged, "main", None, EVERYTHING)
    assert [(f["path"], f["change"]) for f in result["files"]] == [
        ("a.txt", "added"),
        ("b.txt", "added"),
        ("link", "deleted"),
        ("link2", "added"),
    ]
    assert result["files"][3]["new_mode"] == MODE_SYMLINK
    lane_only = vcs.diff("alice", staged, "agent/alice", None, EVERYTHING)
    assert [f["path"] for f in lane_only["files"]] == ["b.txt", "link", "link2"]
    assert vcs.diff("alice", None, "main", "a.txt", EVERYTHING)["files"][0]["path"] == "a.txt"


# -- trailers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("title\n\nKey: v\nOther-Key: w x\n", {"Key": "v", "Other-Key": "w x"}),
        ("Key: v\n", {}),
        ("title\n\nbody text\n", {}),
        ("title\n\nKey: v\nnot a trailer\n", {}),
        ("title\n\nKey: v\n  continued\n", {"Key": "v continued"}),
        ("title\n\nKey: first\nKey: second\n", {"Key": "first"}),
        ("title\n\nA: 1\n\nbody\n\nB: 2\n", {"B": "2"}),
        ("title\r\n\r\nKey: v\r\n", {"Key": "v"}),
        ("", {}),
    ],
)
def test_commit_trailers(message: str, expected: dict[str, str]) -> None:
    assert commit_trailers(message) == expected
