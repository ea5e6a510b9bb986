"""References whose names chit does not bound, read from git's files and swapped in place.

pygit2 keeps one reference to every name string handed to its reference
lookups (engine/git/handle.py), which is harmless for the few names of lanes
and chit's stores but a leak for a name per session
(``refs/chit/sessions/<session>``). Those are read here as git itself reads
them (gitrepository-layout(5)): the loose file ``<common dir>/<ref>`` first,
then ``packed-refs``; and they move only by compare and swap in a libgit2
reference transaction, which takes names through ``cffi`` and keeps none.
"""

from __future__ import annotations

import os
import re
import threading

import pygit2

from engine.errors import RepositoryError
from engine.git.lockfiles import remove_stale_ref_lock
from engine.limits import LIMITS

__all__ = ["list_refs", "read_ref", "swap_ref"]

_HEX = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)

# The parsed ``packed-refs`` of each common dir, kept while the file is unchanged.
_packed: dict[str, tuple[tuple[int, int, int], dict[str, pygit2.Oid]]] = {}
_packed_lock = threading.Lock()


def _check_name(ref: str) -> list[str]:
    parts = ref.split("/")
    if len(parts) < 3 or parts[0] != "refs" or any(p in ("", ".", "..") for p in parts):
        raise ValueError("not a reference name under refs/")
    if not pygit2.reference_is_valid_name(ref):
        raise ValueError("not a valid reference name")
    return parts


def _oid(raw: bytes) -> pygit2.Oid:
    text = raw.strip()
    if not _HEX.fullmatch(text):
        raise RepositoryError("conflict", "the reference is not a direct reference")
    return pygit2.Oid(hex=text.decode("ascii"))


def _read_small(path: str) -> bytes | None:
    """The first bytes of the regular file at ``path`` (no final link followed), or ``None``."""
    try:
        fd = os.open(path, _NO_FOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a link in place of a ref file, or unreadable
        raise RepositoryError("internal_error", "a reference file cannot be read") from exc
    try:
        return os.read(fd, 256)
    finally:
        os.close(fd)


def _packed_refs(commondir: str) -> dict[str, pygit2.Oid]:
    """``packed-refs`` as ``{name: target}`` (peeled lines skipped), re-read when it changes."""
    path = os.path.join(commondir, "packed-refs")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return {}
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
    with _packed_lock:
        known = _packed.get(commondir)
        if known is not None and known[0] == stamp:
            return known[1]
    found: dict[str, pygit2.Oid] = {}
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if line.startswith((b"#", b"^")):
                    continue
                hexid, _, name = line.rstrip(b"\n").partition(b" ")
                if _HEX.fullmatch(hexid) and name.startswith(b"refs/"):
                    found[name.decode("utf-8", "replace")] = pygit2.Oid(hex=hexid.decode("ascii"))
    except FileNotFoundError:
        return {}
    with _packed_lock:
        _packed[commondir] = (stamp, found)
    return found


def read_ref(commondir: str, ref: str) -> pygit2.Oid | None:
    """The id ``ref`` points at, or ``None`` if it does not exist.

    Args:
        commondir: The repository's common git directory (where ``refs/`` is).
        ref: A valid reference name under ``refs/`` (operator or chit chosen).

    Returns:
        The target of the loose reference, else of its ``packed-refs`` line.

    Raises:
        ValueError: If ``ref`` is not a valid name under ``refs/`` (a caller bug).
        RepositoryError: ``conflict`` if it is a symbolic reference or holds no
            id; ``internal_error`` if its file cannot be read.
    """
    _check_name(ref)
    raw = _read_small(os.path.join(commondir, ref))
    if raw is not None:
        return _oid(raw)
    return _packed_refs(commondir).get(ref)


def list_refs(commondir: str, folder: str) -> dict[str, pygit2.Oid]:
    """Every direct reference named ``<folder>/<name>`` (one level), loose over packed.

    Args:
        commondir: The repository's common git directory.
        folder: A reference folder such as ``refs/chit/sessions``.

    Returns:
        ``{full name: target}``; loose files that are not direct references
        are left out.

    Raises:
        ValueError: If ``folder`` is not a name under ``refs/``.
    """
    prefix = folder.rstrip("/") + "/"
    _check_name(prefix + "x")
    found = {
        name: oid
        for name, oid in _packed_refs(commondir).items()
        if name.startswith(prefix) and "/" not in name[len(prefix):]
    }
    try:
        entries = list(os.scandir(os.path.join(commondir, prefix)))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        name = prefix + entry.name
        if entry.name.endswith(".lock") or not entry.is_file(follow_symlinks=False):
            continue
        try:
            raw = _read_small(entry.path)
            if raw is not None:
                found[name] = _oid(raw)
        except RepositoryError:
            continue
    return found


def swap_ref(
    repo: pygit2.Repository,
    commondir: str,
    ref: str,
    new: pygit2.Oid | None,
    expected: pygit2.Oid | None,
    reflog: str,
) -> None:
    """Point ``ref`` at ``new`` (or delete it) iff it points at ``expected``, under git's lock.

    The check and the update run inside one libgit2 reference transaction
    holding ``<ref>.lock``, so a concurrent writer (chit's or git's) either
    waits for nothing and fails here, or finds the reference already moved.
    A ``.lock`` at least ``LIMITS.stale_ref_lock_seconds`` old, left by a
    writer that died, is removed and the swap tried once more, as for lanes
    (:func:`engine.git.refs.cas_update`).

    Args:
        repo: This thread's pygit2 repository.
        commondir: Its common git directory.
        ref: A valid reference name under ``refs/chit/``.
        new: The id to point it at; ``None`` deletes it.
        expected: The id it must point at now; ``None``: it must not exist.
        reflog: The reflog message.

    Raises:
        ValueError: If ``ref`` is outside ``refs/chit/`` (a caller bug).
        RepositoryError: ``conflict`` if it does not point at ``expected`` or
            someone else holds its lock.
    """
    if not ref.startswith("refs/chit/"):
        raise ValueError("refusing to swap a reference outside refs/chit/")
    _check_name(ref)
    if new is None and expected is None:
        return
    for attempt in (0, 1):
        try:
            with repo.transaction() as txn:
                txn.lock_ref(ref)
                if read_ref(commondir, ref) != expected:
                    raise RepositoryError("conflict", "the reference moved")
                if new is None:
                    txn.remove(ref)
                else:
                    txn.set_target(ref, new, message=reflog)
            return
        except pygit2.GitError as exc:
            if attempt == 0 and remove_stale_ref_lock(commondir, ref):
                continue
            raise RepositoryError(
                "conflict",
                "the reference is locked by another update; retry in a few seconds (a lock "
                f"left by a writer that died is cleared once it is "
                f"{LIMITS.stale_ref_lock_seconds:g} s old)",
            ) from exc
