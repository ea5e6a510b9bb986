"""Helpers of the remote tests: a bare ``origin`` on master, clones made by git, a sealer."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pygit2

from engine.git import Replica, Repository, StagedChange
from tests.engine.git.repo_helpers import BASE_FILES, _commit_files

MASTER = "refs/heads/master"
CATALOGS = "refs/chit/catalogs"


def make_origin(path: Path, branch: str = "master") -> pygit2.Repository:
    """A bare repository whose base branch (its HEAD) holds BASE_FILES."""
    repo = pygit2.init_repository(str(path), bare=True, initial_head=branch)
    _commit_files(repo, f"refs/heads/{branch}", BASE_FILES, [], "initial\n")
    return repo


def clone(origin: Path, dest: Path) -> Path:
    """``git clone --bare origin dest``, as an operator sets up an engine's clone."""
    subprocess.run(["git", "clone", "--quiet", "--bare", str(origin), str(dest)],
                   check=True, capture_output=True)
    return dest


def refs_of(path: Path) -> dict[str, str]:
    """Every direct reference of the repository at ``path``, as hex ids."""
    repo = pygit2.Repository(str(path))
    out = {}
    for name in repo.references:
        target = repo.references[name].target
        if isinstance(target, pygit2.Oid):
            out[name] = str(target)
    return out


def seal(facts: dict[str, Any]) -> bytes:
    """A stand-in provenance envelope: the commit's facts, canonical JSON."""
    return json.dumps(facts, sort_keys=True).encode()


def open_engine_repo(path: Path, remote: Path | str, **kw: Any) -> Repository:
    """A repository as an engine opens it, pushing lanes and the catalog store to ``remote``."""
    return Repository(path, remote=os.fspath(remote), pushed_stores=(CATALOGS,), **kw)


def land(vcs: Repository, agent: str, files: dict[str, bytes], message: str = "work\n",
         *, catalog: bytes = b"catalog-1") -> pygit2.Oid:
    """Stage ``files`` in a fresh session and commit them as ``agent`` with a record."""
    vcs.put_blob_in_store(CATALOGS, hashlib.sha256(catalog).hexdigest(), catalog, now=1_700_000_000)
    staged = StagedChange()
    for path, data in files.items():
        vcs.stage_write(agent, staged, path, data)
    return vcs.commit(agent, staged, message, author_name=agent,
                      author_email=f"{agent}@agents.invalid", time=1_700_000_100,
                      merge=True, seal=seal)


@contextmanager
def started(vcs: Repository) -> Iterator[Replica]:
    """The repository's background pushes, running for the block, as an engine runs them."""
    if vcs.remote is None:
        raise ValueError("the repository has no remote")
    vcs.remote.start()
    try:
        yield vcs.remote
    finally:
        vcs.close()
