"""What the caller holds and where its session stands: ``effective_scope`` and ``status``.

Both are always safe to call; ``status`` names only staged paths the caller may
see, and of the remote only its redacted URL, whether lanes wait to be pushed
(a count, no names) and why (docs/tools.md).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine.catalog import schemas as s
from engine.catalog.declarations import CATALOG_ENCODING
from engine.limits import LIMITS
from engine.tools.context import CallContext

__all__ = ["effective_scope", "status", "warning_line"]


def effective_scope(ctx: CallContext, _args: s.NoArgs) -> s.EffectiveScope:
    """Describe the token and its offer."""
    t = ctx.token
    return s.EffectiveScope(
        agent=t.agent,
        lane=t.lane,
        token_id=t.token_id,
        session=ctx.session.session_id,
        chain=[agent for _id, agent in t.chain],
        operations=sorted(t.operations),
        path_scopes=[list(g) for g in t.path_scopes],
        expires_at=t.expires_at,
        not_before=t.not_before,
        delegable=t.delegable,
        repo=ctx.repo_name,
        repo_scopes=[list(g) for g in t.repo_scopes],
        tools=ctx.offer.names(),
        withheld=ctx.offer.withheld,
        catalog_hash=ctx.offer.catalog_hash,
        catalog_encoding=CATALOG_ENCODING,
        warning=warning_line(_signs(ctx)),
    )


def _signs(ctx: CallContext) -> list[dict[str, Any]]:
    """The repository's vital signs that are not silent (signal-only: never fails a call)."""
    if ctx.coherence is None:
        return []
    try:
        return ctx.coherence()
    except Exception:  # a sign that cannot be read is silent
        return []


def warning_line(signs: list[dict[str, Any]]) -> str | None:
    """The one line a mismatch puts in ``effective_scope`` and the instructions.

    Args:
        signs: Vital signs (``{sign, state, reason, ...}``, docs/vital-signs.md).

    Returns:
        The line for the first mismatch, or ``None`` when there is none. It
        is at most ``LIMITS.warning_line_chars``: a longer one (a reason
        naming many repositories) names only the signs that mismatch and how
        many times each.
    """
    mismatches = [str(sign["sign"]) for sign in signs if sign["state"] == "mismatch"]
    if not mismatches:
        return None
    first = next(sign for sign in signs if sign["state"] == "mismatch")
    line = _warning(f"{first['sign']}: {first['reason']}")
    if len(line) <= LIMITS.warning_line_chars:
        return line
    counts = Counter(mismatches)
    short = _warning(", ".join(f"{name}: {n} mismatch{'es' if n > 1 else ''}"
                               for name, n in sorted(counts.items())))
    return short[:LIMITS.warning_line_chars]


def _warning(what: str) -> str:
    return (f"warning: this engine serves an artefact made for something else ({what}); "
            "run `chit doctor` and remove or rebuild it. Calls are served as usual.")


def status(ctx: CallContext, _args: s.NoArgs) -> s.Status:
    """Report the session's staged change and lane position."""
    info = ctx.repo.status(ctx.token.agent, ctx.session.staged)
    staged = [s.StagedEntry(**e) for e in info["staged"] if ctx.visible(e["path"])]
    remote = ctx.repo.remote_report(ctx.token.agent)
    waiting = ctx.store.approvals(now=ctx.now, session=(ctx.session.session_id, ctx.repo_name))
    return s.Status(
        session=ctx.session.session_id,
        lane=info["lane"],
        lane_exists=info["lane_exists"],
        lane_head=info["lane_head"],
        base=info["base"],
        base_branch=info["base_branch"],
        main_head=info["main_head"],
        ahead=info["ahead"],
        behind=info["behind"],
        staged=staged,
        staged_bytes=ctx.session.staged.byte_size(),
        remote=None if remote is None else s.RemoteState(
            url=remote["url"],
            lane_behind=remote["lane_pending"],
            lanes_behind=len(remote["pending"]),
            checked=remote["checked_at"] is not None,
            error=remote["error"],
        ),
        approvals=[s.PendingApproval(id=a.id, tool=a.tool, expires_at=a.expires_at)
                   for a in waiting],
        coherence=[s.VitalSign(**sign) for sign in signs] if (signs := _signs(ctx)) else None,
    )
