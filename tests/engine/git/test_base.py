"""Any base branch: a repository whose HEAD is ``master`` (or a named ``base``) works end to end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest

from engine.admin.seed import create_repository
from engine.errors import ConfigurationError, RepositoryError
from engine.git import Repository, StagedChange
from tests.engine.git.repo_helpers import (
    BASE_FILES,
    EVERYTHING,
    _code,
    _commit,
    _commit_files,
    _lane_head,
)

MASTER = "refs/heads/master"


@pytest.fixture
def master_repo(tmp_path: Path) -> pygit2.Repository:
    """A bare repository whose only branch, and HEAD, is master."""
    repo = pygit2.init_repository(str(tmp_path / "m.git"), bare=True, initial_head="master")
    _commit_files(repo, MASTER, BASE_FILES, [], "initial\n")
    return repo


def test_the_base_defaults_to_the_head_branch(master_repo: pygit2.Repository) -> None:
    vcs = Repository(master_repo.path)
    assert vcs.base == "master"
    master = master_repo.references[MASTER].target
    assert vcs.base_head().id == master
    assert vcs.head_for("alice").id == master  # no lane yet: the base


def test_a_lane_on_master_starts_there_and_is_measured_against_it(
    master_repo: pygit2.Repository,
) -> None:
    vcs = Repository(master_repo.path)
    master = master_repo.references[MASTER].target
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/app.py", b"print('lane')\n")
    first = _commit(vcs, "alice", staged)
    assert master_repo[first].peel(pygit2.Commit).parent_ids == [master]
    assert [c.id for c in vcs.lane_commits("alice")] == [first]
    status = vcs.status("alice", staged)
    assert status["base_branch"] == "master" and status["main_head"] == str(master)
    assert (status["ahead"], status["behind"]) == (1, 0)
    assert master_repo.references[MASTER].target == master  # never written
    # master moves on: the lane is behind it, and conflicts with it where both changed.
    moved = _commit_files(master_repo, MASTER, {**BASE_FILES, "src/app.py": (
        BASE_FILES["src/app.py"][0], b"print('base')\n")}, [master], "base edit\n")
    status = vcs.status("alice", StagedChange())
    assert (status["ahead"], status["behind"], status["main_head"]) == (1, 1, str(moved))
    [conflict] = vcs.conflicts_with_base("alice", EVERYTHING)
    assert (conflict["path"], conflict["ours"], conflict["theirs"]) == (
        "src/app.py", b"print('lane')\n", b"print('base')\n")


def test_the_base_is_named_by_its_own_name_and_main_is_just_a_branch(
    master_repo: pygit2.Repository,
) -> None:
    vcs = Repository(master_repo.path)
    master = master_repo.references[MASTER].target
    assert vcs.resolve("master").id == master
    assert vcs.resolve(MASTER).id == master
    assert vcs.read_at("master", "README.md") == b"hello\n"
    with pytest.raises(RepositoryError) as exc:
        vcs.resolve("main")  # no branch of that name here
    assert _code(exc) == "not_found"
    # A branch called main that is not the base is an ordinary branch.
    other = _commit_files(master_repo, "refs/heads/main", {"only.txt": (0o100644, b"x")}, [])
    assert vcs.resolve("main").id == other
    assert vcs.base_head().id == master


def test_a_named_base_wins_over_head(master_repo: pygit2.Repository) -> None:
    master = master_repo.references[MASTER].target
    trunk = _commit_files(master_repo, "refs/heads/trunk", BASE_FILES, [master], "trunk\n")
    vcs = Repository(master_repo.path, base="trunk")
    assert vcs.base == "trunk" and vcs.base_head().id == trunk
    staged = StagedChange()
    vcs.stage_write("alice", staged, "README.md", b"on trunk\n")
    lane = _commit(vcs, "alice", staged)
    assert master_repo[lane].peel(pygit2.Commit).parent_ids == [trunk]
    assert Repository(master_repo.path, base="refs/heads/trunk").base == "trunk"


@pytest.mark.parametrize("bad", ["agent/alice", "refs/heads/agent/x", "-x", "a..b", "a b",
                                 "HEAD@{1}", "x.lock", "", "refs/tags/v1"])
def test_a_base_that_is_no_branch_or_a_lane_is_refused(
    master_repo: pygit2.Repository, bad: str
) -> None:
    """Threat: a base chit would write (a lane) or hand to git as an option or revision."""
    with pytest.raises(ConfigurationError):
        Repository(master_repo.path, base=bad)


def test_a_missing_base_or_a_detached_head_is_refused(master_repo: pygit2.Repository) -> None:
    with pytest.raises(ConfigurationError, match="trunk"):
        Repository(master_repo.path, base="trunk")
    master_repo.set_head(master_repo.references[MASTER].target)  # detached
    with pytest.raises(ConfigurationError, match="HEAD names no branch"):
        Repository(master_repo.path)
    assert Repository(master_repo.path, base="master").base == "master"


def test_the_base_branch_is_never_written(master_repo: pygit2.Repository) -> None:
    """Threat: an engine bug moving the organisation's base branch."""
    vcs = Repository(master_repo.path)
    master = master_repo.references[MASTER].target
    head = master_repo[master].peel(pygit2.Commit)
    for ref in (MASTER, "refs/chit/upstream/heads/master"):
        with pytest.raises(ValueError):
            vcs._cas_update(master_repo, ref, head.id, lambda _c: True, "x")
    assert master_repo.references[MASTER].target == master


def test_a_session_staged_on_an_older_base_lands_on_the_new_one(
    master_repo: pygit2.Repository,
) -> None:
    """The base moved after the session staged, before its lane existed: the lane starts
    from the base as it is now, the staged change merged onto it."""
    vcs = Repository(master_repo.path)
    master = master_repo.references[MASTER].target
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/new.py", b"new\n")
    moved = _commit_files(master_repo, MASTER, {**BASE_FILES, "docs/x.md": (
        0o100644, b"x\n")}, [master], "base moves\n")
    lane = vcs.commit("alice", staged, "work\n", author_name="A", author_email="a@x",
                      time=1_700_000_100, merge=True)
    commit = master_repo[lane].peel(pygit2.Commit)
    assert commit.parent_ids == [moved]
    assert vcs.read_at("agent/alice", "docs/x.md") == b"x\n"
    assert _lane_head(master_repo, "alice") == lane


def test_a_lane_whose_head_does_not_descend_from_the_session_base_still_merges(
    master_repo: pygit2.Repository,
) -> None:
    """One session staged on master as it was; another made the lane from an older
    master. The first commit merges onto that lane (a cherry-pick of its change)
    instead of refusing forever."""
    vcs = Repository(master_repo.path)
    old = master_repo.references[MASTER].target
    first = StagedChange()
    vcs.stage_write("alice", first, "src/one.py", b"one\n")  # based on old master
    newer = _commit_files(master_repo, MASTER, {**BASE_FILES, "docs/x.md": (
        0o100644, b"x\n")}, [old], "base moves\n")
    second = StagedChange()
    vcs.stage_write("alice", second, "src/two.py", b"two\n")  # based on the newer master
    assert second.base == newer
    lane = _commit(vcs, "alice", first)  # the lane starts from the old master
    assert master_repo[lane].peel(pygit2.Commit).parent_ids == [old]
    landed = vcs.commit("alice", second, "two\n", author_name="A", author_email="a@x",
                        time=1_700_000_100, merge=True)
    assert master_repo[landed].peel(pygit2.Commit).parent_ids == [lane]
    assert vcs.read_at("agent/alice", "src/one.py") == b"one\n"
    assert vcs.read_at("agent/alice", "src/two.py") == b"two\n"


def test_a_linked_worktree_takes_the_repositorys_base_not_its_own_branch(
    tmp_path: Path,
) -> None:
    """A linked worktree with a feature branch out serves the repository's base (the main
    worktree's HEAD branch), not that feature branch."""
    create_repository(tmp_path / "repo", {"a.txt": b"a\n"}, branch="master")
    subprocess.run(["git", "-C", str(tmp_path / "repo"), "worktree", "add", "-q", "-b",
                    "feature", str(tmp_path / "linked")], check=True, capture_output=True)
    vcs = Repository(tmp_path / "linked")
    assert vcs.base == "master"
