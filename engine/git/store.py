"""chit's own store under ``refs/chit/*``: content-addressed blobs and provenance records.

Each store reference points at a commit whose tree maps names to blobs; a new
entry is a new commit on top, landed by compare and swap. The catalogs the
auditor checks and each lane's provenance records live here (docs/audit.md,
docs/provenance-format.md).
"""

from __future__ import annotations

import re
import time as _time
from collections.abc import Callable

import pygit2
from pygit2.enums import FileMode

from engine.errors import RepositoryError
from engine.git.handle import Handle, bounded_blob, tree_entry
from engine.git.refs import STORE_PREFIX, CasUpdate, RefLocks, equals, ref_target
from engine.git.views import MODE_FILE
from engine.limits import LIMITS

__all__ = [
    "OWNER_ENTRY",
    "get_blob_from_store",
    "provenance_record",
    "provenance_ref",
    "put_blob_in_store",
    "record_commit",
    "store_owner",
    "store_record",
]

OWNER_ENTRY = "owner.json"
"""The store entry recording whose the store is (docs/vital-signs.md); never a 64-hex name."""

_STORE_NAME = re.compile(r"[0-9a-f]{64}")


def provenance_ref(agent: str) -> str:
    """The reference holding ``agent``'s provenance records: ``refs/chit/provenance/<agent>``.

    It points at a commit whose tree maps ``<first 2 hex>/<other 38 hex>`` of
    each commit id on the lane to a blob holding that commit's envelope (the
    fan-out layout of ``git notes``); each record adds a commit on top.
    """
    return f"{STORE_PREFIX}provenance/{agent}"


def record_commit(
    handle: Handle, agent: str, commit: pygit2.Oid, envelope: bytes, when: int
) -> tuple[pygit2.Oid | None, pygit2.Oid]:
    """Write the provenance commit that adds ``envelope`` under ``commit``; move no reference.

    The caller holds the lane's writer lock (:meth:`RefLocks.hold`), the only
    lock under which ``agent``'s provenance reference moves, and moves it
    itself (:func:`store_record`, or after pushing both to a remote).

    Args:
        handle: The repository.
        agent: A validated agent name.
        commit: The lane commit the envelope is the record of.
        envelope: The record's bytes.
        when: The record commit's time, Unix seconds.

    Returns:
        ``(current, record)``: what the reference points at now (``None``:
        absent), and the new commit on top of it.
    """
    repo = handle.repo
    current = ref_target(repo, provenance_ref(agent))
    parent = None if current is None else handle.commit(current)
    key = str(commit)
    blob = repo.create_blob(envelope)
    root = repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
    fan = tree_entry(parent.tree, key[:2]) if parent is not None else None
    sub = repo.TreeBuilder(fan.peel(pygit2.Tree)) if fan is not None else repo.TreeBuilder()
    sub.insert(key[2:], blob, MODE_FILE)
    root.insert(key[:2], sub.write(), FileMode.TREE)
    signature = pygit2.Signature("chit", "chit@localhost", when, 0)
    record = repo.create_commit(
        None, signature, signature, f"chit: provenance of {key}\n", root.write(),
        [] if parent is None else [parent.id],
    )
    return current, record


def store_record(
    handle: Handle,
    update: CasUpdate,
    agent: str,
    commit: pygit2.Oid,
    envelope: bytes,
    when: int,
) -> None:
    """Add ``envelope`` under ``commit`` to the agent's provenance ref (lane lock held).

    Only chit writes this reference, and only while holding the lane's
    writer lock (:meth:`RefLocks.hold`), which this caller holds. A git
    ``.lock`` file a writer that died left on it is removed by ``update`` once
    it is stale, as on any reference chit writes
    (:func:`~engine.git.refs.cas_update`).

    Args:
        handle: The repository.
        update: The compare-and-swap that moves the reference
            (:func:`~engine.git.refs.cas_update`).
        agent: A validated agent name.
        commit: The lane commit the envelope is the record of.
        envelope: The record's bytes.
        when: The record commit's time, Unix seconds.

    Raises:
        RepositoryError: ``conflict`` if the reference moved or is locked.
    """
    current, record = record_commit(handle, agent, commit, envelope, when)
    update(handle.repo, provenance_ref(agent), record, equals(current), "chit: provenance")


def provenance_record(handle: Handle, agent: str, commit: str) -> bytes | None:
    """The stored envelope for ``commit`` on ``agent``'s lane, or ``None``.

    Args:
        handle: The repository.
        agent: A validated agent name.
        commit: A full 40-hex commit id.

    Returns:
        The envelope bytes as stored (untrusted until verified).

    Raises:
        ValueError: If ``commit`` is not 40 lowercase hex digits.
    """
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ValueError("not a commit id")
    repo = handle.repo
    target = ref_target(repo, provenance_ref(agent))
    if target is None:
        return None
    try:
        tree = repo[target].peel(pygit2.Tree)
    except (pygit2.GitError, KeyError, ValueError):
        return None
    entry = tree_entry(tree, f"{commit[:2]}/{commit[2:]}")
    if entry is None or entry.type_str != "blob":
        return None
    return bytes(entry.peel(pygit2.Blob).data)


def _check_store(store_ref: str, name: str) -> None:
    if not (
        isinstance(store_ref, str)
        and store_ref.startswith(STORE_PREFIX)
        and pygit2.reference_is_valid_name(store_ref)
    ):
        raise ValueError("store reference must be a valid name under refs/chit/")
    if not isinstance(name, str) or not _STORE_NAME.fullmatch(name):
        raise ValueError("store entry name must be 64 lowercase hex digits")


def put_blob_in_store(
    handle: Handle,
    locks: RefLocks,
    update: CasUpdate,
    store_ref: str,
    name: str,
    data: bytes,
    *,
    now: int | None = None,
    owner: Callable[[], bytes | None] | None = None,
) -> pygit2.Oid:
    """Keep ``data`` reachable under ``name`` in a content-addressed store.

    The store reference points at a commit whose tree maps each name to a
    blob; adding an entry makes a new commit whose parent is the old one,
    updated by compare and swap (retried if another writer got there
    first, since additions commute). The store is append-only: a name
    already bound to other content is refused, never rebound. The entry
    that creates the store (or the first one added to a store without the
    record) also adds :data:`OWNER_ENTRY`, whose the store is
    (docs/vital-signs.md), if ``owner`` gives one.

    Args:
        handle: The repository.
        locks: The repository's reference writer locks.
        update: The compare-and-swap that moves the reference
            (:func:`~engine.git.refs.cas_update`).
        store_ref: A reference under ``refs/chit/`` (for example
            ``refs/chit/catalogs``).
        name: 64 lowercase hex digits (typically a SHA-256 of ``data``).
        data: The bytes to keep.
        now: Commit time in Unix seconds; the current time if ``None``.
        owner: The record of whose the store is (at most
            ``LIMITS.identity_record_bytes``; ``None`` or longer: none added).

    Returns:
        The blob id of ``data``.

    Raises:
        ValueError: If ``store_ref`` or ``name`` is malformed.
        RepositoryError: ``conflict`` if ``name`` is bound to different
            content, or the store stayed contended through every retry.
    """
    _check_store(store_ref, name)
    content = bytes(data)
    when = int(_time.time()) if now is None else int(now)
    with locks.hold(store_ref):
        repo = handle.repo
        blob = pygit2.hash(content)
        for _ in range(LIMITS.store_attempts):
            current = ref_target(repo, store_ref)
            parent = None if current is None else handle.commit(current)
            if parent is not None:
                existing = tree_entry(parent.tree, name)
                if existing is not None:
                    if existing.id == blob and existing.filemode == MODE_FILE:
                        return blob
                    raise RepositoryError("conflict", "store entry holds other content")
            repo.create_blob(content)
            builder = repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
            builder.insert(name, blob, MODE_FILE)
            unrecorded = parent is None or tree_entry(parent.tree, OWNER_ENTRY) is None
            if owner is not None and unrecorded:
                record = owner()
                if record is not None and len(record) <= LIMITS.identity_record_bytes:
                    builder.insert(OWNER_ENTRY, repo.create_blob(record), MODE_FILE)
            signature = pygit2.Signature("chit", "chit@localhost", when, 0)
            commit = repo.create_commit(
                None,
                signature,
                signature,
                f"chit store: add {name}\n",
                builder.write(),
                [] if parent is None else [parent.id],
            )
            try:
                update(repo, store_ref, commit, equals(current), "chit: store")
            except RepositoryError:
                _time.sleep(LIMITS.store_retry_pause_seconds)
                continue
            return blob
    raise RepositoryError("conflict", "the store is busy; retry")


def get_blob_from_store(handle: Handle, store_ref: str, name: str) -> bytes | None:
    """Return the bytes stored under ``name``, or ``None`` if absent.

    Args:
        handle: The repository.
        store_ref: A reference under ``refs/chit/``.
        name: 64 lowercase hex digits.

    Returns:
        The stored bytes, or ``None`` if the store or the entry is missing.

    Raises:
        ValueError: If ``store_ref`` or ``name`` is malformed.
    """
    _check_store(store_ref, name)
    repo = handle.repo
    current = ref_target(repo, store_ref)
    if current is None:
        return None
    obj = tree_entry(handle.commit(current).tree, name)
    return obj.data if isinstance(obj, pygit2.Blob) else None


def store_owner(handle: Handle, store_ref: str) -> bytes | None:
    """The record of whose a store is (:data:`OWNER_ENTRY`), or ``None``.

    Args:
        handle: The repository.
        store_ref: A reference under ``refs/chit/``.

    Returns:
        The record's bytes (untrusted), or ``None`` if the store or the entry
        is missing, the entry is not a blob, or it is longer than
        ``LIMITS.identity_record_bytes`` (its size is read from the object's
        header first: an oversized blob is never loaded).
    """
    current = ref_target(handle.repo, store_ref)
    if current is None:
        return None
    entry = tree_entry(handle.commit(current).tree, OWNER_ENTRY)
    return bounded_blob(handle.repo, entry, LIMITS.identity_record_bytes)
