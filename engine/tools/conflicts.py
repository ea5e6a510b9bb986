"""The conflict tools: ``list_conflicts`` and ``resolve_conflict``.

A lane that moved under a session's staged change leaves conflicts in the
session; each is settled with ours, theirs or explicit content before ``commit``
(docs/tools.md). Only paths the caller may see are shown.
"""

from __future__ import annotations

import base64

from engine import git
from engine.catalog import schemas as s
from engine.errors import InvalidRequestError, RepositoryError
from engine.tools._staging import adopt, decode_content, digest, trial, without
from engine.tools.context import CallContext

__all__ = ["list_conflicts", "resolve_conflict", "unresolved"]


def unresolved(ctx: CallContext, staged: git.StagedChange) -> RepositoryError:
    """The ``conflict`` refusal of a commit while ``staged`` holds unsettled conflicts.

    Args:
        ctx: The call.
        staged: The session's staged change.

    Returns:
        The error to raise; ``paths`` names the conflicting paths the caller may see.
    """
    return RepositoryError(
        "conflict",
        "your lane moved and these paths changed on both sides; see list_conflicts, "
        "settle each with resolve_conflict (ours, theirs or content), then commit again",
        paths=sorted(p for p in staged.conflicts if ctx.visible(p)),
        lane=ctx.token.lane,
    )


def _conflict_view(path: str, sides: tuple[bytes | None, ...]) -> s.Conflict:
    def text(data: bytes) -> str | None:
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return None if "\x00" in decoded else decoded

    present = [d for d in sides if d is not None]
    if all(text(d) is not None for d in present):
        views = [None if d is None else text(d) for d in sides]
        return s.Conflict(path=path, base=views[0], ours=views[1], theirs=views[2])
    b64 = [None if d is None else base64.b64encode(d).decode("ascii") for d in sides]
    return s.Conflict(
        path=path, base=b64[0], ours=b64[1], theirs=b64[2], binary=True, encoding="base64"
    )


def list_conflicts(ctx: CallContext, _args: s.NoArgs) -> s.Conflicts:
    """The session's unresolved conflicts, and where the lane would conflict with the base."""
    staged = ctx.session.staged
    session = [
        _conflict_view(path, sides)
        for path, sides in sorted(staged.conflicts.items())
        if ctx.visible(path)
    ]
    with_main = [
        _conflict_view(c["path"], (c["base"], c["ours"], c["theirs"]))
        for c in ctx.repo.conflicts_with_base(ctx.token.agent, ctx.visible)
    ]
    return s.Conflicts(session=session, with_main=with_main)


def resolve_conflict(ctx: CallContext, args: s.ResolveConflictArgs) -> s.Resolved:
    """Settle one conflicting path with ours, theirs or explicit content."""
    staged = ctx.session.staged
    if args.path not in staged.conflicts:
        raise RepositoryError("not_found", "that path has no unresolved conflict in this session")
    _base, ours, theirs = staged.conflicts[args.path]
    if args.resolution == "content":
        if args.content is None:
            raise InvalidRequestError(
                "invalid_argument", "resolution 'content' needs content", fields=["content"]
            )
        chosen: bytes | None = decode_content(args.content, args.encoding)
    elif args.content is not None:
        raise InvalidRequestError(
            "invalid_argument", "content is only for resolution 'content'", fields=["content"]
        )
    else:
        chosen = ours if args.resolution == "ours" else theirs
    ours_mode, theirs_mode = staged.conflict_modes.get(args.path, (None, None))
    chosen_mode = {"ours": ours_mode, "theirs": theirs_mode}.get(args.resolution)
    tried = trial(staged)
    tried.conflicts.pop(args.path)
    tried.conflict_modes.pop(args.path, None)
    if chosen is None:
        # Absent on the chosen side: delete it if the (merged) base still has it.
        if ctx.repo.exists(ctx.token.agent, without(tried, args.path), args.path):
            tried.changes[args.path] = None
        else:
            tried.changes.pop(args.path, None)
    else:
        unstaged = without(tried, args.path)
        ctx.repo.stage_write(ctx.token.agent, unstaged, args.path, chosen)
        tried.changes, tried.modes = unstaged.changes, unstaged.modes
        if chosen_mode is not None and chosen_mode != git.MODE_FILE:
            # Keep the chosen side's type (executable, symlink), not a plain file.
            tried.changes[args.path] = chosen
            tried.modes[args.path] = chosen_mode
    ctx.enforce_sizes("resolve_conflict", args.path, len(chosen or b""), tried)
    adopt(staged, tried)
    staged.conflicts = tried.conflicts
    ctx.session.seen[args.path] = digest(chosen)
    return s.Resolved(path=args.path, resolution=args.resolution, remaining=len(staged.conflicts))
