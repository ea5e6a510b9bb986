"""The ``discard`` tool: drop the session's staged change, conflicts included.

The engine then removes the session's saved reference (``refs/chit/sessions/``),
as after a commit. Like ``commit``, it acts on every staged path, so a token
whose scope or policy does not reach each of them is refused (docs/tools.md).
"""

from __future__ import annotations

import policy
from engine import git
from engine.catalog import schemas as s
from engine.errors import AccessDeniedError, denied
from engine.tools.context import CallContext

__all__ = ["discard"]


def discard(ctx: CallContext, _args: s.NoArgs) -> s.Discarded:
    """Drop the staged change and its conflicts; the view follows the lane again.

    Raises:
        AccessDeniedError: ``path_outside_scope`` (with the count, never the
            paths) if a staged or conflicting path is outside this token's
            scope (an attenuation sharing the session); ``policy_denied`` if
            the policy refuses ``discard`` on the staged paths.
    """
    staged = ctx.session.staged
    paths = sorted(set(staged.changes) | set(staged.conflicts))
    outside = sum(1 for path in paths if not ctx.token.allows_path(path))
    if outside:
        raise AccessDeniedError(
            "path_outside_scope",
            f"{outside} staged path(s) are outside this token's scope; only a token whose "
            "scope holds every staged path can discard them",
            outside=outside,
        )
    if paths:
        decision = policy.evaluate(
            ctx.policy,
            policy.Request(agent=ctx.token.agent, tool="discard", operation="write",
                           paths=tuple(paths)),
        )
        if not decision.allowed:
            raise denied(decision)
    files, conflicts = len(staged.changes), len(staged.conflicts)
    ctx.session.staged = git.StagedChange()
    for path in paths:
        ctx.session.seen.pop(path, None)
    return s.Discarded(session=ctx.session.session_id, files=files, conflicts=conflicts)
