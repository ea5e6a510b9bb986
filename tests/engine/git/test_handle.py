"""Tests for engine/git/handle.py: opening a repository, and lookups that leak nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pygit2
import pytest

from engine.errors import ChitError, ConfigurationError
from engine.git import MAIN, MODE_FILE, Repository, StagedChange
from engine.git.handle import tree_entry
from engine.limits import LIMITS
from tests.engine.git.repo_helpers import BASE_FILES, _commit, _commit_files

# -- opening ------------------------------------------------------------------


def test_open_refuses_a_plain_directory(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(ConfigurationError):
        Repository(tmp_path / "plain")


def test_open_does_not_search_upwards(git_repo: pygit2.Repository, tmp_path: Path) -> None:
    # Threat: a misconfigured path silently opening an enclosing repository.
    inner = Path(git_repo.path) / "objects"
    with pytest.raises(ConfigurationError):
        Repository(inner)


def test_open_requires_a_base_branch_with_a_commit(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True, initial_head="trunk")
    with pytest.raises(ConfigurationError):
        Repository(tmp_path / "r.git")  # HEAD names trunk, which has no commit yet
    _commit_files(repo, "refs/heads/trunk", {"a": (MODE_FILE, b"a")}, [])
    assert Repository(tmp_path / "r.git").base == "trunk"  # any base: HEAD's branch
    with pytest.raises(ConfigurationError):
        Repository(tmp_path / "r.git", base="main")


# -- tree and reference lookups -----------------------------------------------


def test_a_huge_folder_is_loaded_and_mapped_once_for_its_files(tmp_path: Path) -> None:
    """Reading a huge folder's files one by one (the semantic index) costs one folder, once.

    libgit2 caches no tree over 4 KiB and chit keeps no name map over a quarter
    of its budget with the others: the view keeps its last folder's object, and
    the last huge folder's map is kept alone, so neither is rebuilt per file.
    """
    from engine.admin.seed import create_repository
    from engine.git import handle

    count = LIMITS.tree_index_entries // 4 + 1
    create_repository(
        tmp_path / "r", {**{f"big/f{i}.txt": b"%d" % i for i in range(count)}, "top.txt": b"t"}
    )
    _tree, files, read = Repository(tmp_path / "r").view_files("alice", None)
    assert len(files) == count + 1
    view = read.__self__  # type: ignore[attr-defined]
    assert read("big/f7.txt") == b"7"
    kept = view._folder
    assert kept is not None and kept[0] == "big"
    assert read("big/f8.txt") == b"8" and view._folder is kept
    assert handle.tree_names(kept[1]) is handle.tree_names(kept[1])
    # The same answers as a lookup from the root.
    assert read("top.txt") == b"t" and read("big") is None and read("big/nope") is None
    assert read("top.txt/x") is None and read("nope/x") is None
    assert read("big/f9.txt") == b"9"


def _fresh(text: str) -> str:
    """A new str object equal to ``text`` (never an interned or cached one)."""
    return "".join([text[:1], text[1:]])


def test_lookups_keep_no_reference_to_the_callers_strings(vcs: Repository) -> None:
    """No path or revision an agent sends stays alive after the call (pygit2 keeps
    a reference to strings it is given as tree paths or reference names)."""
    agent = "helper"
    staged = StagedChange()
    vcs.stage_write(agent, staged, "src/new.py", b"x = 1\n")
    _commit(vcs, agent, staged)
    calls = [
        ("src/app.py", lambda p: vcs.view_read(agent, None, p)),
        ("src/none.py", lambda p: vcs.view_read(agent, None, p)),
        ("src/app.py/deeper", lambda p: vcs.view_read(agent, None, p)),
        ("README.md", lambda p: vcs.view_read(agent, StagedChange(), p)),
        ("agent/helper", lambda p: vcs.resolve(p)),
        ("main", lambda p: vcs.resolve(p)),
        ("agent/nobody", lambda p: vcs.resolve(p)),
    ]
    for text, call in calls:
        value = _fresh(text)
        before = sys.getrefcount(value)
        try:
            call(value)
        except ChitError:
            pass
        assert sys.getrefcount(value) == before, text


def test_tree_lookups_agree_with_git(vcs: Repository, git_repo: pygit2.Repository) -> None:
    """Entries found by index give what git's own by-path lookup gives."""
    tree = git_repo.references[MAIN].peel(pygit2.Commit).tree
    for path in [*BASE_FILES, "src", "secret", "src/app.py/x", "nope", "src/nope", "bin/run/x"]:
        try:
            expected: pygit2.Object | None = tree[path]
        except KeyError:
            expected = None
        found = tree_entry(tree, path)
        if expected is None:
            assert found is None, path
        else:
            assert found is not None, path
            assert (found.id, found.filemode) == (expected.id, expected.filemode), path
