"""Tests for engine/git/store.py: chit's content-addressed store under refs/chit/."""

from __future__ import annotations

import hashlib

import pygit2
import pytest

from engine.errors import RepositoryError
from engine.git import Repository
from tests.engine.git.repo_helpers import T0, _code


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
