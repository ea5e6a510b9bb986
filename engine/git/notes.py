"""Commit attestations as git notes under ``refs/notes/chit``.

A note is the text git attaches to a commit without changing it (``git notes
--ref=chit show <commit>``); chit's note on each commit it makes holds that
commit's attestation, one JSON line per attestation (docs/attestations.md §4).
The reference is shared by every lane: it moves under its own writer lock, and
is pushed with each lane commit like chit's other stores.
"""

from __future__ import annotations

import logging
import re

import pygit2
from pygit2.enums import FileMode

from engine.git.handle import Handle, bounded_blob, tree_entry
from engine.git.names import NOTES_REF
from engine.git.refs import ref_target
from engine.git.views import MODE_FILE
from engine.limits import LIMITS

__all__ = ["NOTES_REF", "note_commit", "read_note"]

_COMMIT_ID = re.compile(r"[0-9a-f]{40}")

logger = logging.getLogger("chit.engine")


def _paths(commit: str) -> tuple[str, ...]:
    """Where git may keep ``commit``'s note: flat, or under one or two fan-out levels."""
    return (commit, f"{commit[:2]}/{commit[2:]}", f"{commit[:2]}/{commit[2:4]}/{commit[4:]}")


def _checked(commit: str) -> str:
    if not isinstance(commit, str) or not _COMMIT_ID.fullmatch(commit):
        raise ValueError("not a commit id")
    return commit


def read_note(handle: Handle, commit: str) -> bytes | None:
    """The bytes of ``commit``'s note under :data:`NOTES_REF`, or ``None``.

    Args:
        handle: The repository.
        commit: A full commit id, 40 lowercase hex.

    Returns:
        The note (untrusted until verified); ``None`` if the reference or the
        note is missing, not a blob, or longer than
        ``LIMITS.attestation_note_bytes`` (never loaded then).

    Raises:
        ValueError: If ``commit`` is not 40 lowercase hex digits.
    """
    commit = _checked(commit)
    target = ref_target(handle.repo, NOTES_REF)
    if target is None:
        return None
    try:
        tree = handle.repo[target].peel(pygit2.Tree)
    except (pygit2.GitError, KeyError, ValueError):
        return None
    for path in _paths(commit):
        entry = tree_entry(tree, path)
        if entry is not None:
            return bounded_blob(handle.repo, entry, LIMITS.attestation_note_bytes)
    return None


def _without(repo: pygit2.Repository, tree: pygit2.Tree | None, path: str) -> pygit2.Oid | None:
    """``tree`` with the blob at ``path`` removed (empty folders dropped); None if empty."""
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    head, _, rest = path.partition("/")
    if not rest:
        if builder.get(head) is not None:
            builder.remove(head)
    else:
        sub = builder.get(head)
        inner = None
        if sub is not None and sub.type_str == "tree":
            inner = repo[sub.id].peel(pygit2.Tree)
        if inner is not None:
            kept = _without(repo, inner, rest)
            builder.remove(head)
            if kept is not None:
                builder.insert(head, kept, FileMode.TREE)
    return builder.write() if len(builder) else None


def note_commit(
    handle: Handle, commit: pygit2.Oid, line: bytes, when: int
) -> tuple[pygit2.Oid | None, pygit2.Oid]:
    """Write the notes commit that adds ``line`` to ``commit``'s note; move no reference.

    The note keeps the lines it already has (another tool's attestations
    included) and gets ``line`` after them, unless it already holds it; it
    is written at ``<first 2 hex>/<other 38 hex>`` (git reads notes at any
    fan-out). The caller holds :data:`NOTES_REF`'s writer lock from this call
    until it moves the reference by compare and swap from the returned
    ``current``.

    Args:
        handle: The repository.
        commit: The commit the note is on.
        line: One attestation (a JSON line, without newline).
        when: The notes commit's time, Unix seconds.

    Returns:
        ``(current, new)``: what :data:`NOTES_REF` points at now (``None``:
        absent), and the new notes commit on top of it.

    Raises:
        ValueError: If ``line`` holds a newline or is empty.
    """
    if not line or b"\n" in line or b"\r" in line:
        raise ValueError("an attestation is one non-empty line")
    repo = handle.repo
    key = str(commit)
    current = ref_target(repo, NOTES_REF)
    parent = None
    if current is not None:
        try:
            parent = handle.commit(current)
        except (pygit2.GitError, KeyError, ValueError):
            # Not a commit (someone pointed the ref at a blob or a tree): chit's notes
            # start again on top of nothing rather than stop every lane committing.
            logger.warning("%s does not point at a commit; its notes start anew", NOTES_REF)
    tree = None if parent is None else parent.tree
    lines: list[bytes] = []
    if tree is not None:
        for path in _paths(key):
            entry = tree_entry(tree, path) if tree is not None else None
            if entry is None:
                continue
            old = bounded_blob(repo, entry, LIMITS.attestation_note_bytes) or b""
            lines += [x for x in old.split(b"\n") if x.strip() and x not in lines]
            kept = _without(repo, tree, path)
            tree = None if kept is None else repo[kept].peel(pygit2.Tree)
    if line not in lines:
        lines.append(line)
    blob = repo.create_blob(b"\n".join(lines) + b"\n")
    root = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    fan = tree_entry(tree, key[:2]) if tree is not None else None
    sub = repo.TreeBuilder(fan.peel(pygit2.Tree)) if isinstance(fan, pygit2.Tree) else (
        repo.TreeBuilder())
    sub.insert(key[2:], blob, MODE_FILE)
    root.insert(key[:2], sub.write(), FileMode.TREE)
    signature = pygit2.Signature("chit", "chit@localhost", when, 0)
    new = repo.create_commit(
        None, signature, signature, f"chit: attestation of {key}\n", root.write(),
        [] if parent is None else [parent.id],
    )
    return current, new
