"""Tests for engine/git/staging.py and the staging rules of engine/git/views.py."""

from __future__ import annotations

import itertools

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import ChitError, InvalidRequestError, RepositoryError
from engine.git import MAIN, MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK, Repository, StagedChange
from tests.engine.git.repo_helpers import BASE_FILES, _code, _commit, _commit_files, _flatten


def test_unvalidated_paths_are_refused_as_programming_errors(vcs: Repository) -> None:
    # Threat: a caller bug letting '.git' or '..' into object space.
    staged = StagedChange()
    for bad in ["", "/abs", "a//b", "a/../b", ".git/config", "x/.GIT/y", "a\0b", "a/"]:
        with pytest.raises(ValueError):
            vcs.stage_write("alice", staged, bad, b"x")
        with pytest.raises(ValueError):
            vcs.view_read("alice", None, bad)
    assert staged == StagedChange()


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


# -- status -------------------------------------------------------------------


def test_status(vcs: Repository, git_repo: pygit2.Repository) -> None:
    main = str(git_repo.references[MAIN].target)
    empty = vcs.status("alice", None)
    assert empty == {
        "lane": "agent/alice",
        "lane_exists": False,
        "lane_head": None,
        "base": None,
        "base_branch": "main",
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


# -- property: staging matches a dict model -----------------------------------

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
