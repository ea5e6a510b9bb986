"""Tests for engine/git/store.py: chit's content-addressed store under refs/chit/."""

from __future__ import annotations

import hashlib
import os
import zlib

import pygit2
import pytest

from engine.errors import RepositoryError
from engine.git import Repository
from engine.git.store import OWNER_ENTRY
from engine.limits import LIMITS
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


def _tree_names(git_repo: pygit2.Repository, ref: str) -> set[str]:
    return {entry.name or "" for entry in git_repo[git_repo.references[ref].target].peel(
        pygit2.Commit).tree}


def test_a_new_store_records_its_owner_once(vcs: Repository, git_repo: pygit2.Repository) -> None:
    ref = "refs/chit/catalogs"
    asked: list[int] = []

    def owner() -> bytes:
        asked.append(1)
        return b'{"name": "app"}'

    vcs.store_owner = owner
    assert vcs.recorded_store_owner(ref) is None
    vcs.put_blob_in_store(ref, "a" * 64, b"one", now=T0)
    assert vcs.recorded_store_owner(ref) == b'{"name": "app"}'
    assert _tree_names(git_repo, ref) == {"a" * 64, OWNER_ENTRY}
    vcs.store_owner = lambda: b'{"name": "other"}'  # never rebound once recorded
    vcs.put_blob_in_store(ref, "b" * 64, b"two", now=T0)
    assert vcs.recorded_store_owner(ref) == b'{"name": "app"}'
    assert asked == [1]
    # The record is not a content entry: the content API never reaches it.
    with pytest.raises(ValueError):
        vcs.get_blob_from_store(ref, OWNER_ENTRY)


def test_an_old_store_is_recorded_on_its_next_write(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    ref = "refs/chit/catalogs"
    vcs.put_blob_in_store(ref, "a" * 64, b"one", now=T0)  # written before stores recorded owners
    assert vcs.recorded_store_owner(ref) is None
    vcs.store_owner = lambda: None  # the engine could not say: still no record
    vcs.put_blob_in_store(ref, "b" * 64, b"two", now=T0)
    assert vcs.recorded_store_owner(ref) is None
    vcs.store_owner = lambda: b"{}"
    vcs.put_blob_in_store(ref, "c" * 64, b"three", now=T0)
    assert vcs.recorded_store_owner(ref) == b"{}"
    assert vcs.get_blob_from_store(ref, "a" * 64) == b"one"


def test_an_owner_record_over_the_bound_is_neither_written_nor_read(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    """Threat: a store fetched from elsewhere whose record is made to exhaust memory."""
    ref = "refs/chit/catalogs"
    big = b"x" * (LIMITS.identity_record_bytes + 1)
    vcs.store_owner = lambda: big
    vcs.put_blob_in_store(ref, "a" * 64, b"one", now=T0)
    assert OWNER_ENTRY not in _tree_names(git_repo, ref)
    # Planted by a writer outside chit: too long, or not a blob, it reads as no record.
    for planted, mode in [(git_repo.create_blob(big), pygit2.enums.FileMode.BLOB),
                          (git_repo.TreeBuilder().write(), pygit2.enums.FileMode.TREE)]:
        head = git_repo[git_repo.references[ref].target].peel(pygit2.Commit)
        builder = git_repo.TreeBuilder(head.tree)
        builder.insert(OWNER_ENTRY, planted, mode)
        sig = pygit2.Signature("x", "x@example.com", T0, 0)
        git_repo.create_commit(ref, sig, sig, "plant", builder.write(), [head.id])
        assert vcs.recorded_store_owner(ref) is None
    with pytest.raises(ValueError):
        vcs.recorded_store_owner("refs/heads/main")


def _plant_owner(git_repo: pygit2.Repository, ref: str, blob: pygit2.Oid) -> None:
    head = git_repo[git_repo.references[ref].target].peel(pygit2.Commit)
    builder = git_repo.TreeBuilder(head.tree)
    builder.insert(OWNER_ENTRY, blob, pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("x", "x@example.com", T0, 0)
    git_repo.create_commit(ref, sig, sig, "plant", builder.write(), [head.id])


def test_a_huge_owner_record_reads_as_none(vcs: Repository, git_repo: pygit2.Repository) -> None:
    """Threat: a fetched store whose owner.json is a blob of many megabytes (zeros compress)."""
    ref = "refs/chit/catalogs"
    vcs.put_blob_in_store(ref, "a" * 64, b"one", now=T0)
    _plant_owner(git_repo, ref, git_repo.create_blob(bytes(64 * 1024 * 1024)))
    assert vcs.recorded_store_owner(ref) is None


def test_an_oversized_owner_record_is_never_loaded(
    vcs: Repository, git_repo: pygit2.Repository
) -> None:
    """Threat: memory spent loading an owner record before its size is checked.

    The planted object's header says 1 GiB but its body is cut short: only a
    read of the whole object fails, so the record must be refused from its
    header alone.
    """
    ref = "refs/chit/catalogs"
    vcs.put_blob_in_store(ref, "a" * 64, b"one", now=T0)
    raw = zlib.compress(b"blob %d\x00" % (1 << 30) + bytes(4096))
    name = hashlib.sha1(raw).hexdigest()
    folder = os.path.join(git_repo.path, "objects", name[:2])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name[2:]), "wb") as out:
        out.write(raw)
    _plant_owner(git_repo, ref, pygit2.Oid(hex=name))
    assert vcs.recorded_store_owner(ref) is None
