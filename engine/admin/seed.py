"""Create a repository whose base branch holds given files (for ``chit demo`` and tests).

Uses git object space only (an in-memory index), then checks the branch out so
the working tree looks like any clone (README.md, "The two commands").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pygit2

__all__ = ["create_repository", "files_from_directory"]


def create_repository(
    path: str | os.PathLike[str],
    files: Mapping[str, bytes],
    *,
    message: str = "Initial import",
    author: tuple[str, str] = ("chit seed", "seed@chit.invalid"),
    time: int = 1_700_000_000,
    branch: str = "main",
) -> str:
    """Initialise a repository at ``path`` with one commit on ``branch``, its ``HEAD``.

    Args:
        path: A folder that does not hold a repository yet.
        files: Repository path (``/``-separated) to content.
        message: The commit message.
        author: ``(name, email)`` of author and committer.
        time: Commit time, unix seconds.
        branch: The branch (``main``, ``master``, ...), which ``HEAD`` names.

    Returns:
        The commit id (hex).

    Raises:
        pygit2.GitError: If the repository cannot be created.
    """
    repo = pygit2.init_repository(str(path), bare=False, initial_head=branch)
    index = pygit2.Index()
    for name in sorted(files):
        oid = repo.create_blob(files[name])
        index.add(pygit2.IndexEntry(name, oid, pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    sig = pygit2.Signature(author[0], author[1], time, 0)
    oid = repo.create_commit(f"refs/heads/{branch}", sig, sig, message + "\n", tree, [])
    repo.checkout(f"refs/heads/{branch}", strategy=pygit2.enums.CheckoutStrategy.FORCE)
    return str(oid)


def files_from_directory(
    root: str | os.PathLike[str], prefix: str, *, suffixes: tuple[str, ...] = (".py",)
) -> dict[str, bytes]:
    """Read the files under ``root`` with the given suffixes, keyed ``prefix/relpath``.

    Args:
        root: A local folder (operator input, not agent input).
        prefix: Repository folder to place them under.
        suffixes: File name endings to include.

    Returns:
        Repository path to content.
    """
    out: dict[str, bytes] = {}
    base = Path(root)
    for file in sorted(base.rglob("*")):
        if file.is_file() and not file.is_symlink() and file.name.endswith(suffixes):
            rel = file.relative_to(base).as_posix()
            if "__pycache__" in rel:
                continue
            out[f"{prefix}/{rel}"] = file.read_bytes()
    return out
