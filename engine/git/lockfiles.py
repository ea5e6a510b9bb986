"""Git's lock file on a reference, left behind by a writer that died: recognised and removed.

chit's writers hold a reference's writer locks (:class:`engine.git.refs.RefLocks`)
before git's own ``<ref>.lock`` is created, so a ``.lock`` that a writer finds
while holding them was left by a chit writer that died or belongs to a writer
outside chit. Git's writers hold one for milliseconds: one older than
``LIMITS.stale_ref_lock_seconds`` is taken as left behind and removed
(docs/deployment.md, "Lanes with many writers").
"""

from __future__ import annotations

import logging
import os
import stat
import time

from engine.limits import LIMITS

__all__ = ["remove_stale_ref_lock"]

logger = logging.getLogger("chit.engine")

_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_ref_folder(commondir: str, parts: list[str]) -> int:
    """A descriptor on ``<commondir>/<parts...>``, no link followed below ``commondir``.

    Raises:
        OSError: If a component is missing, a symbolic link or not a folder.
    """
    fd = os.open(commondir, _FOLDER_FLAGS)
    for part in parts:
        try:
            below = os.open(part, _FOLDER_FLAGS | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
        finally:
            os.close(fd)
        fd = below
    return fd


def remove_stale_ref_lock(commondir: str, ref: str, *, now: float | None = None) -> bool:
    """Remove git's lock file on ``ref`` if a writer that died left it there.

    Call it only holding ``ref``'s writer locks (:meth:`RefLocks.hold
    <engine.git.refs.RefLocks.hold>`, or the lane's for its provenance
    reference), after git refused to lock ``ref``. ``<commondir>/<ref>.lock``
    is removed only if it is a regular file (a symbolic link is never followed,
    nor is any folder between ``commondir`` and it) last modified at least
    ``LIMITS.stale_ref_lock_seconds`` before ``now``; a warning then names the
    reference. A younger lock is left alone and nothing is logged: a writer
    outside chit may be at work. An old lock that is not a regular file, or
    that cannot be removed, is left too, with a warning asking the operator to
    look at it.

    Between the look at the file and its removal nothing but a person can swap
    it: git creates lock files with ``O_EXCL``, so no writer takes a lock while
    the old one is there, and chit's own writers wait on the locks the caller
    holds.

    Args:
        commondir: The repository's common git directory (where ``refs/`` is).
        ref: A valid reference name under ``refs/`` (lanes and ``refs/chit/*``).
        now: The current time, Unix seconds; :func:`time.time` if ``None``.

    Returns:
        True if a stale lock file was removed (the caller may retry its update
        once); False if there is none, it is younger than the bound, or it was
        left in place as said above.

    Raises:
        ValueError: If ``ref`` is not a plain name under ``refs/`` (a caller bug).
    """
    parts = ref.split("/")
    if len(parts) < 2 or parts[0] != "refs" or any(p in ("", ".", "..") for p in parts):
        raise ValueError("not a reference name under refs/")
    name = parts[-1] + ".lock"
    try:
        folder = _open_ref_folder(commondir, parts[:-1])
    except FileNotFoundError:
        return False
    except OSError:
        logger.warning(
            "git refused to lock %s and chit cannot look at its lock file (a folder on the "
            "way is a symbolic link or unreadable); an operator must check it",
            ref,
        )
        return False
    try:
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return False
        age = (time.time() if now is None else now) - info.st_mtime
        if age < LIMITS.stale_ref_lock_seconds:
            return False
        if not stat.S_ISREG(info.st_mode):
            logger.warning(
                "the lock file of %s is %d s old and not a regular file; an operator must "
                "remove it (chit never removes one)",
                ref,
                int(age),
            )
            return False
        os.unlink(name, dir_fd=folder)
    except OSError:
        logger.warning(
            "the lock file of %s is stale but could not be removed; an operator must remove it",
            ref,
        )
        return False
    finally:
        os.close(folder)
    logger.warning(
        "removed the lock file of %s, %d s old, left by a writer that died; retrying the update",
        ref,
        int(age),
    )
    return True
