"""Fixtures of the engine/git tests: a bare repository whose main holds BASE_FILES."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from engine.git import MAIN, Repository
from tests.engine.git.repo_helpers import BASE_FILES, _commit_files


@pytest.fixture
def git_repo(tmp_path: Path) -> pygit2.Repository:
    """A bare repository whose main holds BASE_FILES."""
    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True, initial_head="main")
    _commit_files(repo, MAIN, BASE_FILES, [], "initial\n")
    return repo


@pytest.fixture
def vcs(git_repo: pygit2.Repository) -> Repository:
    return Repository(git_repo.path)
