"""Tests for engine/git/commit.py: landing staged changes on a lane, in object space only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from engine.errors import InvalidRequestError, RepositoryError
from engine.git import MAIN, MODE_FILE, Repository, StagedChange, lane_ref
from tests.engine.git.repo_helpers import (
    BASE_FILES,
    T0,
    _code,
    _commit,
    _commit_files,
    _flatten,
    _lane_head,
    _sig,
)


def test_first_and_second_commit_land_on_lane(vcs: Repository, git_repo: pygit2.Repository) -> None:
    main_before = git_repo.references[MAIN].target
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/new.py", b"new\n")
    assert staged.base == main_before
    first = _commit(vcs, "alice", staged, "first\n\nChit-Agent: alice\n")
    assert _lane_head(git_repo, "alice") == first
    commit = git_repo[first].peel(pygit2.Commit)
    assert commit.parent_ids == [main_before]
    assert commit.author.name == "Agent" and commit.committer.email == "agent@example.org"
    assert commit.author.time == T0 + 60 and commit.author.offset == 0
    assert staged == StagedChange(base=first)

    vcs.stage_write("alice", staged, "src/new.py", b"newer\n")
    second = _commit(vcs, "alice", staged)
    assert git_repo[second].peel(pygit2.Commit).parent_ids == [first]
    assert vcs.read_at("agent/alice", "src/new.py") == b"newer\n"
    assert git_repo.references[MAIN].target == main_before
    assert vcs.read_at("main", "README.md") == b"hello\n"
    assert [c.id for c in vcs.lane_commits("alice")] == [second, first]
    assert vcs.lanes() == ["alice"]
    status = vcs.status("alice", staged)
    assert status["ahead"] == 2 and status["behind"] == 0
    assert status["lane_head"] == str(second) and status["base"] == str(second)


def test_commit_keeps_untouched_entries_and_modes(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "README.md", b"changed\n")
    new = _commit(vcs, "alice", staged)
    files = _flatten(git_repo, git_repo[new].peel(pygit2.Commit).tree)
    expected = dict(BASE_FILES)
    expected["README.md"] = (MODE_FILE, b"changed\n")
    assert files == expected


def test_nothing_staged_is_refused(vcs: Repository, git_repo: pygit2.Repository) -> None:
    staged = StagedChange()
    with pytest.raises(InvalidRequestError) as exc:
        _commit(vcs, "alice", staged)
    assert _code(exc) == "invalid_argument"
    # A write restoring the base content cancels out.
    vcs.stage_write("alice", staged, "README.md", b"other\n")
    vcs.stage_write("alice", staged, "README.md", b"hello\n")
    vcs.stage_write("alice", staged, "tmp.txt", b"x")
    vcs.stage_delete("alice", staged, "tmp.txt")
    assert staged.is_empty()
    with pytest.raises(InvalidRequestError):
        _commit(vcs, "alice", staged)
    assert _lane_head(git_repo, "alice") is None


def test_commit_message_with_nul_is_refused(vcs: Repository) -> None:
    # Threat: NUL truncating the message in libgit2 and hiding its tail.
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    before = StagedChange(staged.base, dict(staged.changes), dict(staged.modes))
    for message in ["", "  \n", "ok\0hidden"]:
        with pytest.raises(InvalidRequestError):
            _commit(vcs, "alice", staged, message)
    assert staged == before


def _snapshot_worktree(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = Path(dirpath) / name
            stat = full.lstat()
            data = os.readlink(full).encode() if full.is_symlink() else full.read_bytes()
            out[str(full.relative_to(root))] = (stat.st_mode, data)
    return out


def test_working_tree_and_index_file_untouched(tmp_path: Path) -> None:
    # Threat: the engine writing into a developer's checkout or index.
    root = tmp_path / "work"
    repo = pygit2.init_repository(str(root), bare=False, initial_head="main")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_bytes(b"print(1)\n")
    (root / "README.md").write_bytes(b"readme\n")
    os.symlink("src", root / "linkdir")
    repo.index.add_all()
    repo.index.write()
    tree = repo.index.write_tree()
    repo.create_commit(MAIN, _sig(), _sig(), "init\n", tree, [])
    (root / "uncommitted.txt").write_bytes(b"local edit\n")
    index_bytes = (root / ".git" / "index").read_bytes()
    worktree = _snapshot_worktree(root)
    head = (root / ".git" / "HEAD").read_bytes()
    main = repo.references[MAIN].target

    vcs = Repository(root)
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/app.py", b"print(2)\n")
    vcs.stage_write("alice", staged, "docs/new.md", b"doc\n")
    vcs.stage_delete("alice", staged, "README.md")
    vcs.stage_move("alice", staged, "linkdir", "linkdir2")
    with pytest.raises(InvalidRequestError):
        vcs.stage_write("alice", staged, "linkdir2/x", b"x")
    _commit(vcs, "alice", staged)
    vcs.put_blob_in_store("refs/chit/catalogs", "a" * 64, b"catalog", now=T0)

    assert (root / ".git" / "index").read_bytes() == index_bytes
    assert _snapshot_worktree(root) == worktree
    assert (root / ".git" / "HEAD").read_bytes() == head
    assert pygit2.Repository(str(root)).references[MAIN].target == main
    assert vcs.read_at("agent/alice", "linkdir2") == b"src"


def test_conflict_when_lane_moved(vcs: Repository, git_repo: pygit2.Repository) -> None:
    # Threat: a stale session silently reverting another session's commit.
    for agent in ["fresh", "existing"]:
        if agent == "existing":
            seed = StagedChange()
            vcs.stage_write(agent, seed, "seed.txt", b"seed")
            _commit(vcs, agent, seed)
        one, two = StagedChange(), StagedChange()
        vcs.stage_write(agent, one, "one.txt", b"1")
        vcs.stage_write(agent, two, "two.txt", b"2")
        assert one.base == two.base
        landed = _commit(vcs, agent, one)
        before = StagedChange(two.base, dict(two.changes), dict(two.modes))
        with pytest.raises(RepositoryError) as exc:
            _commit(vcs, agent, two)
        assert _code(exc) == "conflict"
        assert _lane_head(git_repo, agent) == landed
        assert two == before


def test_new_lane_forks_from_base_when_main_moved(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    # Threat: parenting on main's new head would revert main's newer changes.
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    old_main = git_repo.references[MAIN].target
    files = dict(BASE_FILES)
    files["README.md"] = (MODE_FILE, b"main moved\n")
    new_main = _commit_files(git_repo, MAIN, files, [old_main])
    new = _commit(vcs, "alice", staged)
    assert git_repo[new].peel(pygit2.Commit).parent_ids == [old_main]
    assert vcs.read_at("agent/alice", "README.md") == b"hello\n"
    assert vcs.status("alice", staged)["behind"] == 1
    assert git_repo.references[MAIN].target == new_main


def test_recreating_a_deleted_lane_off_main_history_conflicts(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    _commit(vcs, "alice", staged)
    vcs.stage_write("alice", staged, "b.txt", b"b")
    git_repo.references.delete(lane_ref("alice"))
    with pytest.raises(RepositoryError) as exc:
        _commit(vcs, "alice", staged)
    assert _code(exc) == "conflict"
    assert _lane_head(git_repo, "alice") is None


def test_git_fsck_strict_is_clean(vcs: Repository, git_repo: pygit2.Repository) -> None:
    git = shutil.which("git")
    assert git is not None, "the git command is required"
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/new.py", b"x = 1\n")
    vcs.stage_move("alice", staged, "link", "links/link")
    _commit(vcs, "alice", staged)
    vcs.stage_delete("alice", staged, "src/util.py")
    vcs.stage_write("alice", staged, "bin.dat", bytes(range(256)))
    _commit(vcs, "alice", staged, "second\n\nChit-Agent: alice\n")
    vcs.put_blob_in_store("refs/chit/catalogs", "b" * 64, b"cat", now=T0)
    result = subprocess.run(
        [git, "--git-dir", git_repo.path, "fsck", "--strict", "--no-dangling"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(Path(git_repo.path))},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""
