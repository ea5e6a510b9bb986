"""Intents and shared staged paths: what peers see of a session's work (never content).

``project_context`` records an intent; after every write call the engine
publishes the session's staged paths (:func:`share_staged_paths`). Both live
in the state store until the token expires or an hour passes
(docs/semantic.md, "Intents").
"""

from __future__ import annotations

import logging
import os
import sqlite3

from engine import git
from engine.limits import LIMITS
from engine.state import Intent
from engine.tools.context import CallContext, Session

__all__ = [
    "bounded",
    "repo_id",
    "share_staged_paths",
    "staged_paths",
]


logger = logging.getLogger("chit.engine")


def share_staged_paths(ctx: CallContext, before: tuple[str, ...]) -> None:
    """Publish the session's staged paths to its peers, if a write call changed them.

    Called by the engine after every successful call that is not read-only.
    The paths (never content; the first ``LIMITS.intent_paths``)
    go to the state store's ``staged_paths`` table, read by ``project_context``
    in every engine process of the chit home, until the token expires or an
    hour after the last change, whichever is first; an empty staged change
    (after a commit or a discard) removes the session's row. A store that
    cannot be written is logged and the call's answer stands: peers are a
    courtesy, the staged change itself is in the session.

    Args:
        ctx: The call's context (its session after the handler ran).
        before: The session's staged paths before the handler ran
            (:func:`staged_paths`).
    """
    after = staged_paths(ctx.session)
    if after == before:
        return
    expires = min(ctx.now + LIMITS.intent_ttl_seconds, int(ctx.token.expires_at))
    intent = Intent(
        repo=repo_id(ctx.repo),
        session=ctx.session.session_id,
        token_id=ctx.session.token_id,
        agent=ctx.token.agent,
        paths=bounded(after),
        expires_at=expires,
    )
    try:
        ctx.store.put_intent(intent, now=ctx.now, staged=True)
    except (sqlite3.Error, OSError):
        logger.warning("a session's staged paths could not be shared with its peers")


def bounded(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The first paths that fit ``LIMITS.intent_paths`` and ``LIMITS.intent_paths_bytes``.

    Every peer's ``project_context`` reads every live intent, so what one
    session leaves there is kept small whatever its paths' lengths.
    """
    out: list[str] = []
    used = 0
    for path in paths[: LIMITS.intent_paths]:
        used += len(path.encode())
        if used > LIMITS.intent_paths_bytes:
            break
        out.append(path)
    return tuple(out)


def staged_paths(session: Session) -> tuple[str, ...]:
    """The paths a session has staged (writes, deletions, both sides of a move), sorted."""
    return tuple(sorted(session.staged.changes))


def repo_id(repo: git.Repository) -> str:
    """The repository's identity in the state store: the real path of its common git dir."""
    return os.path.realpath(os.path.dirname(repo.chit_dir))

