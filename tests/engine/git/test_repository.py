"""Tests for engine.vcs on real git repositories built with pygit2 (no mocks)."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pygit2.enums import FileMode

from engine.errors import ChitError, ConfigurationError, InvalidRequestError, RepositoryError
from engine.git import (
    MAIN,
    MODE_EXECUTABLE,
    MODE_FILE,
    MODE_SYMLINK,
    Repository,
    StagedChange,
    commit_trailers,
    lane_ref,
)
from engine.git.handle import tree_entry

T0 = 1_700_000_000
EVERYTHING = lambda path: True  # noqa: E731

BASE_FILES: dict[str, tuple[int, bytes]] = {
    "README.md": (MODE_FILE, b"hello\n"),
    "src/app.py": (MODE_FILE, b"print('hi')\n"),
    "src/util.py": (MODE_FILE, b"def f():\n    return 1\n"),
    "bin/run": (MODE_EXECUTABLE, b"#!/bin/sh\necho run\n"),
    "link": (MODE_SYMLINK, b"src/app.py"),
    "linkdir": (MODE_SYMLINK, b"src"),
    "escape": (MODE_SYMLINK, b"/etc/passwd"),
    "secret/key.txt": (MODE_FILE, b"s3cret\n"),
}


def _sig(when: int = T0) -> pygit2.Signature:
    return pygit2.Signature("Main Dev", "dev@example.org", when, 0)


def _tree_of(repo: pygit2.Repository, files: dict[str, tuple[int, bytes]]) -> pygit2.Oid:
    index = pygit2.Index()
    for path, (mode, data) in files.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), FileMode(mode)))
    return index.write_tree(repo)


def _commit_files(
    repo: pygit2.Repository,
    ref: str | None,
    files: dict[str, tuple[int, bytes]],
    parents: list[pygit2.Oid],
    message: str = "update\n",
    when: int = T0,
) -> pygit2.Oid:
    tree = _tree_of(repo, files)
    return repo.create_commit(ref, _sig(when), _sig(when), message, tree, parents)


def _flatten(repo: pygit2.Repository, tree: pygit2.Tree) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    stack = [(tree, "")]
    while stack:
        current, prefix = stack.pop()
        for entry in current:
            full = prefix + entry.name
            if isinstance(entry, pygit2.Tree):
                stack.append((entry, full + "/"))
            else:
                out[full] = (int(entry.filemode), repo[entry.id].data)
    return out


@pytest.fixture
def git_repo(tmp_path: Path) -> pygit2.Repository:
    """A bare repository whose main holds BASE_FILES."""
    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True, initial_head="main")
    _commit_files(repo, MAIN, BASE_FILES, [], "initial\n")
    return repo


@pytest.fixture
def vcs(git_repo: pygit2.Repository) -> Repository:
    return Repository(git_repo.path)


def _lane_head(git_repo: pygit2.Repository, agent: str) -> pygit2.Oid | None:
    ref = git_repo.references.get(lane_ref(agent))
    return None if ref is None else ref.target


def _commit(vcs: Repository, agent: str, staged: StagedChange, msg: str = "work\n") -> pygit2.Oid:
    return vcs.commit(
        agent, staged, msg, author_name="Agent", author_email="agent@example.org", time=T0 + 60
    )


def _code(excinfo: pytest.ExceptionInfo[ChitError]) -> str:
    return excinfo.value.code


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


def test_open_requires_main(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True, initial_head="trunk")
    _commit_files(repo, "refs/heads/trunk", {"a": (MODE_FILE, b"a")}, [])
    with pytest.raises(ConfigurationError):
        Repository(tmp_path / "r.git")


def test_lane_ref_shape() -> None:
    assert lane_ref("alice") == "refs/heads/agent/alice"
    for bad in ["", "a/b", "-x", "a..b", "a b", "x.lock", "a@{1}"]:
        with pytest.raises(ValueError):
            lane_ref(bad)


# -- reading ------------------------------------------------------------------


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


def test_a_huge_folder_is_loaded_and_mapped_once_for_its_files(tmp_path: Path) -> None:
    """Reading a huge folder's files one by one (the semantic index) costs one folder, once.

    libgit2 caches no tree over 4 KiB and chit keeps no name map over a quarter
    of its budget with the others: the view keeps its last folder's object, and
    the last huge folder's map is kept alone, so neither is rebuilt per file.
    """
    from engine.admin.seed import create_repository
    from engine.git import handle

    count = handle._TREE_INDEX_ENTRIES // 4 + 1
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


def test_unvalidated_paths_are_refused_as_programming_errors(vcs: Repository) -> None:
    # Threat: a caller bug letting '.git' or '..' into object space.
    staged = StagedChange()
    for bad in ["", "/abs", "a//b", "a/../b", ".git/config", "x/.GIT/y", "a\0b", "a/"]:
        with pytest.raises(ValueError):
            vcs.stage_write("alice", staged, bad, b"x")
        with pytest.raises(ValueError):
            vcs.view_read("alice", None, bad)
    assert staged == StagedChange()


# -- resolve ------------------------------------------------------------------


@pytest.mark.parametrize(
    "rev",
    [
        "-x",
        "--output=/tmp/x",
        "main..x",
        "main...agent/a",
        "HEAD@{1}",
        "@{-1}",
        "main^",
        "main~1",
        "main:README.md",
        ":/fix",
        "main ",
        "ma in",
        "main\0",
        "main\n",
        "",
        "refs/tags/v1",
        "refs/remotes/origin/main",
        "a" * 300,
        "x.lock",
        "main/",
    ],
)
def test_resolve_refuses_revision_syntax(vcs: Repository, rev: str) -> None:
    # Threat: agent strings reaching git as options or revision expressions.
    with pytest.raises(InvalidRequestError) as exc:
        vcs.resolve(rev)
    assert _code(exc) == "invalid_argument"


def test_resolve_names_and_hex_prefixes(vcs: Repository, git_repo: pygit2.Repository) -> None:
    main = git_repo.references[MAIN].target
    lane = _commit_files(git_repo, lane_ref("a"), {"x": (MODE_FILE, b"x")}, [main])
    hex_main = str(main)
    assert vcs.resolve("main").id == main
    assert vcs.resolve("refs/heads/main").id == main
    assert vcs.resolve("agent/a").id == lane
    assert vcs.resolve("refs/heads/agent/a").id == lane
    assert vcs.resolve(hex_main).id == main
    assert vcs.resolve(hex_main[:7]).id == main
    assert vcs.resolve(hex_main[:12].upper()).id == main
    for unknown in ["nope", "agent/zz", "0000000", "refs/heads/nope"]:
        with pytest.raises(RepositoryError) as exc:
            vcs.resolve(unknown)
        assert _code(exc) == "not_found"
    blob = git_repo.create_blob(b"not a commit")
    with pytest.raises(RepositoryError):
        vcs.resolve(str(blob))


def test_resolve_short_hex_is_only_a_branch_name(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    short = str(git_repo.references[MAIN].target)[:6]
    with pytest.raises(RepositoryError) as exc:
        vcs.resolve(short)
    assert _code(exc) == "not_found"


# -- writing and committing ---------------------------------------------------


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


def test_delete_semantics(vcs: Repository, git_repo: pygit2.Repository) -> None:
    staged = StagedChange()
    for missing in ["nope.txt", "src", "src/nope.py"]:
        with pytest.raises(RepositoryError) as exc:
            vcs.stage_delete("alice", staged, missing)
        assert _code(exc) == "not_found"
    assert staged == StagedChange()
    vcs.stage_delete("alice", staged, "src/app.py")
    with pytest.raises(RepositoryError):
        vcs.stage_delete("alice", staged, "src/app.py")
    vcs.stage_delete("alice", staged, "link")  # deletes the entry, not its target
    assert vcs.exists("alice", staged, "src/util.py")
    new = _commit(vcs, "alice", staged)
    files = _flatten(git_repo, git_repo[new].peel(pygit2.Commit).tree)
    assert "src/app.py" not in files and "link" not in files and "src/util.py" in files


def test_move_semantics(vcs: Repository, git_repo: pygit2.Repository) -> None:
    staged = StagedChange()
    vcs.stage_move("alice", staged, "link", "moved/link")
    vcs.stage_move("alice", staged, "bin/run", "tools/run")
    vcs.stage_move("alice", staged, "src/app.py", "app.py")
    assert not vcs.exists("alice", staged, "link")
    assert vcs.view_read("alice", staged, "moved/link") == b"src/app.py"
    with pytest.raises(RepositoryError) as exc:
        vcs.stage_move("alice", staged, "nope", "x")
    assert _code(exc) == "not_found"
    for src, dst in [("README.md", "README.md"), ("README.md", "src/util.py")]:
        with pytest.raises(InvalidRequestError) as exc2:
            vcs.stage_move("alice", staged, src, dst)
        assert _code(exc2) == "invalid_argument"
    with pytest.raises(InvalidRequestError) as exc2:
        vcs.stage_move("alice", staged, "README.md", "linkdir/x")
    assert _code(exc2) == "symlink_in_path"
    with pytest.raises(InvalidRequestError) as exc2:
        vcs.stage_move("alice", staged, "README.md", "src")
    assert _code(exc2) == "invalid_argument"
    new = _commit(vcs, "alice", staged)
    files = _flatten(git_repo, git_repo[new].peel(pygit2.Commit).tree)
    assert files["moved/link"] == (MODE_SYMLINK, b"src/app.py")
    assert files["tools/run"] == (MODE_EXECUTABLE, BASE_FILES["bin/run"][1])
    assert files["app.py"] == (MODE_FILE, BASE_FILES["src/app.py"][1])
    assert not {"link", "bin/run", "src/app.py"} & files.keys()


def test_move_out_of_and_into_own_folder(vcs: Repository) -> None:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "solo/only.txt", b"1")
    vcs.stage_move("alice", staged, "solo/only.txt", "solo")
    assert vcs.view_read("alice", staged, "solo") == b"1"
    vcs.stage_move("alice", staged, "solo", "solo/again")
    assert vcs.view_read("alice", staged, "solo/again") == b"1"


def test_write_through_symlinked_folder_is_refused(vcs: Repository) -> None:
    # Threat: a symlink entry redirecting a write elsewhere on checkout.
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    before = StagedChange(staged.base, dict(staged.changes), dict(staged.modes))
    for path in ["linkdir/evil.py", "linkdir/deep/evil.py", "escape/x"]:
        with pytest.raises(InvalidRequestError) as exc:
            vcs.stage_write("alice", staged, path, b"x")
        assert _code(exc) == "symlink_in_path"
    assert staged == before


def test_write_at_symlink_replaces_it_with_a_regular_file(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "escape", b"plain\n")
    vcs.stage_write("alice", staged, "bin/run", b"#!/bin/sh\n")
    new = _commit(vcs, "alice", staged)
    files = _flatten(git_repo, git_repo[new].peel(pygit2.Commit).tree)
    assert files["escape"] == (MODE_FILE, b"plain\n")
    assert files["bin/run"] == (MODE_EXECUTABLE, b"#!/bin/sh\n")


def test_file_folder_shape_changes_are_refused(vcs: Repository) -> None:
    staged = StagedChange()
    for path in ["README.md/x", "src", "src/app.py/y"]:
        with pytest.raises(InvalidRequestError) as exc:
            vcs.stage_write("alice", staged, path, b"x")
        assert _code(exc) == "invalid_argument"
    assert staged == StagedChange()
    vcs.stage_write("alice", staged, "new", b"file")
    with pytest.raises(InvalidRequestError):
        vcs.stage_write("alice", staged, "new/child", b"x")
    vcs.stage_write("alice", staged, "dir/child", b"x")
    with pytest.raises(InvalidRequestError):
        vcs.stage_write("alice", staged, "dir", b"x")
    # Deletions free the name.
    vcs.stage_delete("alice", staged, "new")
    vcs.stage_write("alice", staged, "new/child", b"x")
    vcs.stage_delete("alice", staged, "README.md")
    vcs.stage_write("alice", staged, "README.md/inner", b"x")
    vcs.stage_delete("alice", staged, "src/app.py")
    with pytest.raises(InvalidRequestError):
        vcs.stage_write("alice", staged, "src", b"x")
    vcs.stage_delete("alice", staged, "src/util.py")
    vcs.stage_write("alice", staged, "src", b"now a file")
    assert vcs.view_read("alice", staged, "src") == b"now a file"
    assert not vcs.exists("alice", staged, "src/util.py")
    _commit(vcs, "alice", staged)
    assert vcs.read_at("agent/alice", "src") == b"now a file"
    assert vcs.read_at("agent/alice", "README.md/inner") == b"x"


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


def test_locked_lane_is_a_conflict_and_changes_nothing(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    # Another process holding git's ref lock (a .lock file) must win.
    seed = StagedChange()
    vcs.stage_write("alice", seed, "seed.txt", b"s")
    head = _commit(vcs, "alice", seed)
    lock = Path(git_repo.path) / "refs" / "heads" / "agent" / "alice.lock"
    lock.write_bytes(b"")
    try:
        vcs.stage_write("alice", seed, "more.txt", b"m")
        before = StagedChange(seed.base, dict(seed.changes), dict(seed.modes))
        with pytest.raises(RepositoryError) as exc:
            _commit(vcs, "alice", seed)
        assert _code(exc) == "conflict"
        assert seed == before
        assert _lane_head(git_repo, "alice") == head
    finally:
        lock.unlink()
    _commit(vcs, "alice", seed)


def test_chit_folder_is_private_and_a_symlink_in_its_place_is_refused(
    vcs: Repository, git_repo: pygit2.Repository, tmp_path: Path
) -> None:
    """Threat: a link or a loose folder at .git/chit sends lock files where someone else chose."""
    chit = Path(git_repo.path) / "chit"
    chit.mkdir(mode=0o755)
    os.chmod(chit, 0o755)
    staged = StagedChange()
    vcs.stage_write("alice", staged, "a.txt", b"a")
    _commit(vcs, "alice", staged)
    assert chit.stat().st_mode & 0o777 == 0o700
    assert (chit / "locks").stat().st_mode & 0o777 == 0o700
    # A fresh engine on a repository whose chit folder is a symbolic link.
    shutil.rmtree(chit)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chit.symlink_to(elsewhere)
    fresh = Repository(git_repo.path)
    head = _lane_head(git_repo, "alice")
    again = StagedChange()
    fresh.stage_write("alice", again, "b.txt", b"b")
    before = StagedChange(again.base, dict(again.changes), dict(again.modes))
    with pytest.raises(RepositoryError) as exc:
        _commit(fresh, "alice", again)
    assert _code(exc) == "internal_error"
    assert again == before and _lane_head(git_repo, "alice") == head
    assert list(elsewhere.iterdir()) == []


def test_concurrent_commits_on_one_lane_one_winner_per_base(vcs: Repository) -> None:
    sessions = [StagedChange() for _ in range(8)]
    for i, staged in enumerate(sessions):
        vcs.stage_write("alice", staged, f"f{i}.txt", str(i).encode())
    outcomes: list[str] = []
    barrier = threading.Barrier(len(sessions))

    def run(staged: StagedChange) -> None:
        barrier.wait()
        try:
            _commit(vcs, "alice", staged)
            outcomes.append("ok")
        except RepositoryError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["ok"]
    assert len(vcs.lane_commits("alice")) == 1


def test_concurrent_commits_on_many_lanes_all_land(vcs: Repository) -> None:
    agents = [f"agent{i}" for i in range(6)]
    errors: list[BaseException] = []

    def run(agent: str) -> None:
        try:
            staged = StagedChange()
            for n in range(3):
                vcs.stage_write(agent, staged, f"{agent}/{n}.txt", b"x")
                _commit(vcs, agent, staged)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert vcs.lanes() == sorted(agents)
    assert all(len(vcs.lane_commits(a)) == 3 for a in agents)


def test_git_fsck_strict_is_clean(vcs: Repository, git_repo: pygit2.Repository) -> None:
    git = shutil.which("git")
    if git is None:  # pragma: no cover
        pytest.skip("git not installed")
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


# -- status, log, diff --------------------------------------------------------


def test_status(vcs: Repository, git_repo: pygit2.Repository) -> None:
    main = str(git_repo.references[MAIN].target)
    empty = vcs.status("alice", None)
    assert empty == {
        "lane": "agent/alice",
        "lane_exists": False,
        "lane_head": None,
        "base": None,
        "main_head": main,
        "ahead": 0,
        "behind": 0,
        "staged": [],
    }
    staged = StagedChange()
    vcs.stage_write("alice", staged, "z.txt", b"z")
    vcs.stage_write("alice", staged, "README.md", b"r")
    vcs.stage_delete("alice", staged, "src/app.py")
    status = vcs.status("alice", staged)
    assert status["base"] == main
    assert status["staged"] == [
        {"path": "README.md", "change": "modified"},
        {"path": "src/app.py", "change": "deleted"},
        {"path": "z.txt", "change": "added"},
    ]
    assert staged.byte_size() == 2


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


# -- store --------------------------------------------------------------------


def test_store_put_get_idempotent(vcs: Repository, git_repo: pygit2.Repository) -> None:
    data = b"catalog bytes"
    name = hashlib.sha256(data).hexdigest()
    ref = "refs/chit/catalogs"
    assert vcs.get_blob_from_store(ref, name) is None
    blob = vcs.put_blob_in_store(ref, name, data, now=T0)
    head = git_repo.references[ref].target
    assert vcs.put_blob_in_store(ref, name, data, now=T0) == blob
    assert git_repo.references[ref].target == head
    assert vcs.get_blob_from_store(ref, name) == data
    other = b"second"
    vcs.put_blob_in_store(ref, hashlib.sha256(other).hexdigest(), other, now=T0)
    new_head = git_repo[git_repo.references[ref].target].peel(pygit2.Commit)
    assert new_head.parent_ids == [head]
    assert vcs.get_blob_from_store(ref, name) == data
    assert vcs.get_blob_from_store(ref, "0" * 64) is None
    # Append-only: a name is never rebound to other content.
    with pytest.raises(RepositoryError) as exc:
        vcs.put_blob_in_store(ref, name, b"tampered", now=T0)
    assert _code(exc) == "conflict"
    assert vcs.get_blob_from_store(ref, name) == data


def test_store_validates_names(vcs: Repository) -> None:
    for ref, name in [
        ("refs/chit/c", "A" * 64),
        ("refs/chit/c", "a" * 63),
        ("refs/chit/c", "../" + "a" * 61),
        ("refs/heads/main", "a" * 64),
        ("refs/chit/../heads/main", "a" * 64),
        ("refs/chit/c..d", "a" * 64),
    ]:
        with pytest.raises(ValueError):
            vcs.put_blob_in_store(ref, name, b"x", now=T0)
        with pytest.raises(ValueError):
            vcs.get_blob_from_store(ref, name)


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


# -- property: staging matches a dict model ------------------------------------

PATHS = ["a", "b", "a/b", "a/c", "b/a", "c/d/e", "c/d", "l", "l/x", "x"]
MODEL_BASE: dict[str, tuple[int, bytes]] = {
    "a/b": (MODE_FILE, b"ab"),
    "c/d/e": (MODE_EXECUTABLE, b"cde"),
    "l": (MODE_SYMLINK, b"a"),
    "x": (MODE_FILE, b"x"),
}
_AGENTS = itertools.count()

op_strategy = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), st.binary(max_size=4)),
    st.tuples(st.just("delete"), st.sampled_from(PATHS)),
    st.tuples(st.just("move"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
)


def _model_write_error(model: dict[str, tuple[int, bytes]], path: str) -> str | None:
    parts = path.split("/")
    for depth in range(1, len(parts)):
        prefix = "/".join(parts[:depth])
        if prefix in model:
            return "symlink_in_path" if model[prefix][0] == MODE_SYMLINK else "invalid_argument"
    if any(name.startswith(path + "/") for name in model):
        return "invalid_argument"
    return None


def _model_apply(model: dict[str, tuple[int, bytes]], op: tuple) -> str | None:  # type: ignore[type-arg]
    if op[0] == "write":
        _, path, data = op
        error = _model_write_error(model, path)
        if error is None:
            mode = MODE_EXECUTABLE if model.get(path, (0,))[0] == MODE_EXECUTABLE else MODE_FILE
            model[path] = (mode, data)
        return error
    if op[0] == "delete":
        if op[1] not in model:
            return "not_found"
        del model[op[1]]
        return None
    _, source, destination = op
    if source not in model:
        return "not_found"
    if source == destination or destination in model:
        return "invalid_argument"
    trial = dict(model)
    entry = trial.pop(source)
    error = _model_write_error(trial, destination)
    if error is None:
        trial[destination] = entry
        model.clear()
        model.update(trial)
    return error


@pytest.fixture(scope="module")
def model_repo(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Repository, pygit2.Repository]:
    path = tmp_path_factory.mktemp("model") / "repo.git"
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    _commit_files(repo, MAIN, MODEL_BASE, [])
    return Repository(path), repo


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(op_strategy, max_size=14))
def test_staging_matches_dict_model(
    model_repo: tuple[Repository, pygit2.Repository],
    ops: list[tuple],  # type: ignore[type-arg]
) -> None:
    agent = f"p{next(_AGENTS)}"
    vcs, git_repo = model_repo
    staged = StagedChange()
    model = dict(MODEL_BASE)
    for op in ops:
        expected_error = _model_apply(model, op)
        before = StagedChange(staged.base, dict(staged.changes), dict(staged.modes))
        try:
            if op[0] == "write":
                vcs.stage_write(agent, staged, op[1], op[2])
            elif op[0] == "delete":
                vcs.stage_delete(agent, staged, op[1])
            else:
                vcs.stage_move(agent, staged, op[1], op[2])
            error = None
        except ChitError as exc:
            error = exc.code
            assert staged == before
        assert error == expected_error, op
        for path in PATHS:
            if path in model:
                assert vcs.view_read(agent, staged, path) == model[path][1]
            else:
                assert not vcs.exists(agent, staged, path)
    if model == MODEL_BASE:
        assert staged.is_empty()
        return
    new = _commit(vcs, agent, staged)
    assert _flatten(git_repo, git_repo[new].peel(pygit2.Commit).tree) == model
    assert staged == StagedChange(base=new)


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
