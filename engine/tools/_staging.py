"""Helpers the staging tools share: trial copies, read versions, decoded content.

A write is tried on a copy of the session's staged change and adopted only once
every check passed, so a refused call leaves nothing behind (docs/tools.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from engine import git
from engine.catalog import schemas as s
from engine.errors import InvalidRequestError, RepositoryError
from engine.tools.context import CallContext

__all__ = [
    "adopt",
    "check_seen",
    "decode_content",
    "digest",
    "staged_result",
    "trial",
    "unstaged_or",
    "without",
]


def decode_content(content: str, encoding: str) -> bytes:
    """The bytes of a tool's ``content`` argument.

    Args:
        content: The text as sent.
        encoding: ``"utf-8"`` or ``"base64"``.

    Returns:
        The bytes to stage.

    Raises:
        InvalidRequestError: ``invalid_argument`` if base64 content does not decode.
    """
    if encoding == "utf-8":
        return content.encode("utf-8", errors="strict")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("invalid_argument", "content is not valid base64") from None


def digest(data: bytes | None) -> str | None:
    """SHA-256 (hex) of ``data``, or ``None`` for an absent file (what ``Session.seen`` keeps)."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def staged_result(staged: git.StagedChange, path: str, change: Any) -> s.Staged:
    """The output of a staging tool: what changed at ``path`` and the staged totals."""
    return s.Staged(
        path=path, change=change, staged_files=len(staged.changes), staged_bytes=staged.byte_size()
    )


def unstaged_or(staged: git.StagedChange, path: str, change: str) -> str:
    """``change``, or ``"unstaged"`` when the write undid the staged change at ``path``."""
    return change if path in staged.changes else "unstaged"


def trial(staged: git.StagedChange) -> git.StagedChange:
    """A copy of ``staged`` to try a write on (its maps copied, the contents shared)."""
    return git.StagedChange(
        base=staged.base,
        changes=dict(staged.changes),
        modes=dict(staged.modes),
        conflicts=dict(staged.conflicts),
        conflict_modes=dict(staged.conflict_modes),
    )


def adopt(staged: git.StagedChange, tried: git.StagedChange) -> None:
    """Make the trial copy ``tried`` the session's staged change ``staged`` (in place)."""
    staged.base = tried.base
    staged.changes = tried.changes
    staged.modes = tried.modes
    staged.conflicts = tried.conflicts
    staged.conflict_modes = tried.conflict_modes


def without(staged: git.StagedChange, path: str) -> git.StagedChange:
    """A copy of ``staged`` with nothing staged at ``path`` (conflicts kept)."""
    changes = {p: d for p, d in staged.changes.items() if p != path}
    modes = {p: m for p, m in staged.modes.items() if p != path}
    return git.StagedChange(
        base=staged.base,
        changes=changes,
        modes=modes,
        conflicts=dict(staged.conflicts),
        conflict_modes=dict(staged.conflict_modes),
    )


def _current(ctx: CallContext, path: str) -> bytes | None:
    try:
        return ctx.repo.view_read(ctx.token.agent, ctx.session.staged, path)
    except RepositoryError as exc:
        if exc.code == "not_found":
            return None
        raise


def check_seen(ctx: CallContext, *paths: str) -> None:
    """Refuse stale or conflicted writes.

    Args:
        ctx: The call.
        *paths: The paths the write touches.

    Raises:
        RepositoryError: ``conflict`` for a path whose content changed since
            this session read it, or one with an unresolved conflict
            (``resolve_conflict`` settles those).
    """
    for path in paths:
        if path in ctx.session.staged.conflicts:
            raise RepositoryError(
                "conflict",
                f"{path!r} has an unresolved conflict; settle it with resolve_conflict",
                path=path,
            )
        if path in ctx.session.seen and ctx.session.seen[path] != digest(_current(ctx, path)):
            raise RepositoryError(
                "conflict",
                f"{path!r} changed on your lane since you read it; read it again, then write",
                path=path,
            )
