"""Helpers shared by the tests of engine/git: a base tree, commits made with pygit2, and calls."""

from __future__ import annotations

import pygit2
import pytest
from pygit2.enums import FileMode

from engine.errors import ChitError
from engine.git import MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK, Repository, StagedChange, lane_ref

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


def _lane_head(git_repo: pygit2.Repository, agent: str) -> pygit2.Oid | None:
    ref = git_repo.references.get(lane_ref(agent))
    return None if ref is None else ref.target


def _commit(vcs: Repository, agent: str, staged: StagedChange, msg: str = "work\n") -> pygit2.Oid:
    return vcs.commit(
        agent, staged, msg, author_name="Agent", author_email="agent@example.org", time=T0 + 60
    )


def _code(excinfo: pytest.ExceptionInfo[ChitError]) -> str:
    return excinfo.value.code
