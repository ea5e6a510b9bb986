"""The history tools: ``log`` and ``diff``, pruned to what the caller may see.

Their ``path`` filter was already checked by the service so that it cannot probe
outside the token's scope (docs/tools.md); the results are pruned per path here.
"""

from __future__ import annotations

from engine.catalog import schemas as s
from engine.tools.context import CallContext

__all__ = ["diff", "log"]


def log(ctx: CallContext, args: s.LogArgs) -> s.Log:
    """List commits, pruned to the caller's scope."""
    result = ctx.repo.log(args.ref, ctx.token.agent, args.path, args.limit, ctx.visible)
    return s.Log.model_validate(result)


def diff(ctx: CallContext, args: s.DiffArgs) -> s.Diff:
    """Diff the staged change or a revision against the session view, pruned to scope."""
    result = ctx.repo.diff(ctx.token.agent, ctx.session.staged, args.ref, args.path, ctx.visible)
    return s.Diff.model_validate(result)
