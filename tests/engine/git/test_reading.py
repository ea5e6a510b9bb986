"""Tests for engine/git/reading.py: reading files as a session sees them and at a revision."""

from __future__ import annotations

import pygit2
import pytest
from pygit2.enums import FileMode

from engine.errors import InvalidRequestError, RepositoryError
from engine.git import MAIN, MODE_FILE, Repository, StagedChange, lane_ref
from tests.engine.git.repo_helpers import BASE_FILES, _code, _commit_files, _sig


def test_read_main_lane_and_staged(vcs: Repository, git_repo: pygit2.Repository) -> None:
    assert vcs.view_read("alice", None, "README.md") == b"hello\n"
    main = git_repo.references[MAIN].target
    files = dict(BASE_FILES)
    files["README.md"] = (MODE_FILE, b"lane readme\n")
    _commit_files(git_repo, lane_ref("alice"), files, [main])
    assert vcs.view_read("alice", None, "README.md") == b"lane readme\n"
    assert vcs.view_read("bob", None, "README.md") == b"hello\n"
    assert vcs.read_at("main", "README.md") == b"hello\n"
    assert vcs.read_at("agent/alice", "README.md") == b"lane readme\n"

    staged = StagedChange()
    vcs.stage_write("alice", staged, "README.md", b"staged\n")
    assert vcs.view_read("alice", staged, "README.md") == b"staged\n"
    vcs.stage_delete("alice", staged, "src/app.py")
    with pytest.raises(RepositoryError) as exc:
        vcs.view_read("alice", staged, "src/app.py")
    assert _code(exc) == "not_found"
    assert not vcs.exists("alice", staged, "src/app.py")
    assert vcs.exists("alice", None, "src/app.py")


def test_view_stays_on_base_when_lane_moves(vcs: Repository, git_repo: pygit2.Repository) -> None:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "new.txt", b"x")
    main = git_repo.references[MAIN].target
    files = dict(BASE_FILES)
    files["README.md"] = (MODE_FILE, b"moved\n")
    _commit_files(git_repo, lane_ref("alice"), files, [main])
    assert vcs.view_read("alice", staged, "README.md") == b"hello\n"
    assert vcs.view_read("alice", None, "README.md") == b"moved\n"


def test_symlink_entry_is_read_as_data_never_followed(vcs: Repository) -> None:
    # Threat: a symlink in the repository used to read host files.
    assert vcs.view_read("alice", None, "escape") == b"/etc/passwd"
    assert vcs.read_at("main", "link") == b"src/app.py"
    assert vcs.exists("alice", None, "linkdir")
    with pytest.raises(RepositoryError) as exc:
        vcs.view_read("alice", None, "linkdir/app.py")
    assert _code(exc) == "not_found"


def test_folders_missing_and_submodules_are_not_found(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    main = git_repo.references[MAIN].target
    builder = git_repo.TreeBuilder(git_repo[main].peel(pygit2.Commit).tree)
    builder.insert("vendor", main, FileMode.COMMIT)
    tree = builder.write()
    git_repo.create_commit(MAIN, _sig(), _sig(), "submodule\n", tree, [main])
    for path in ["src", "nope", "vendor", "vendor/x", "README.md/x"]:
        with pytest.raises(RepositoryError) as exc:
            vcs.view_read("alice", None, path)
        assert _code(exc) == "not_found"
        with pytest.raises(RepositoryError):
            vcs.read_at("main", path)
        assert not vcs.exists("alice", None, path)
    staged = StagedChange()
    with pytest.raises(RepositoryError) as exc:
        vcs.stage_delete("alice", staged, "vendor")
    assert _code(exc) == "not_found"
    for path in ["vendor", "vendor/x"]:
        with pytest.raises(InvalidRequestError) as exc2:
            vcs.stage_write("alice", staged, path, b"x")
        assert _code(exc2) == "invalid_argument"
    assert staged == StagedChange()
