"""The file tools: ``read_file``, and ``write_file``, ``delete_file``, ``move_file`` (staging).

Writes stage in the session only (nothing lands before ``commit``); each is tried
on a copy and adopted once the policy's size limits passed, and none overwrites a
change the session never saw (docs/tools.md).
"""

from __future__ import annotations

import base64

from engine.catalog import schemas as s
from engine.errors import AccessDeniedError
from engine.tools._staging import (
    adopt,
    check_seen,
    decode_content,
    digest,
    staged_result,
    trial,
    unstaged_or,
)
from engine.tools.context import CallContext

__all__ = ["delete_file", "move_file", "read_file", "write_file"]


def read_file(ctx: CallContext, args: s.ReadFileArgs) -> s.FileContent:
    """Read a file from the session view or a revision."""
    if args.ref is None:
        data = ctx.repo.view_read(ctx.token.agent, ctx.session.staged, args.path)
        ctx.session.seen[args.path] = digest(data)
    else:
        data = ctx.repo.read_at(args.ref, args.path)
    limit = ctx.policy.limits.file_bytes
    if len(data) > limit:
        raise AccessDeniedError(
            "limit_exceeded",
            f"the file is {len(data)} bytes, over the limit of {limit}",
            rule="limits.file_bytes",
        )
    try:
        return s.FileContent(
            path=args.path,
            ref=args.ref,
            encoding="utf-8",
            content=data.decode("utf-8"),
            size=len(data),
        )
    except UnicodeDecodeError:
        return s.FileContent(
            path=args.path,
            ref=args.ref,
            encoding="base64",
            content=base64.b64encode(data).decode("ascii"),
            size=len(data),
        )


def write_file(ctx: CallContext, args: s.WriteFileArgs) -> s.Staged:
    """Stage a write. Nothing changes if any check fails."""
    data = decode_content(args.content, args.encoding)
    staged = ctx.session.staged
    check_seen(ctx, args.path)
    existed = ctx.repo.exists(ctx.token.agent, staged, args.path)
    tried = trial(staged)
    ctx.repo.stage_write(ctx.token.agent, tried, args.path, data)
    ctx.enforce_sizes("write_file", args.path, len(data), tried)
    adopt(staged, tried)
    ctx.session.seen[args.path] = digest(data)
    change = unstaged_or(staged, args.path, "modified" if existed else "added")
    return staged_result(staged, args.path, change)


def delete_file(ctx: CallContext, args: s.DeleteFileArgs) -> s.Staged:
    """Stage a deletion."""
    staged = ctx.session.staged
    check_seen(ctx, args.path)
    tried = trial(staged)
    ctx.repo.stage_delete(ctx.token.agent, tried, args.path)
    ctx.enforce_sizes("delete_file", args.path, 0, tried)
    adopt(staged, tried)
    ctx.session.seen[args.path] = None
    return staged_result(staged, args.path, unstaged_or(staged, args.path, "deleted"))


def move_file(ctx: CallContext, args: s.MoveFileArgs) -> s.Staged:
    """Stage a move."""
    staged = ctx.session.staged
    check_seen(ctx, args.source, args.destination)
    tried = trial(staged)
    ctx.repo.stage_move(ctx.token.agent, tried, args.source, args.destination)
    moved = tried.changes.get(args.destination)
    ctx.enforce_sizes("move_file", args.destination, len(moved or b""), tried)
    adopt(staged, tried)
    ctx.session.seen[args.source] = None
    ctx.session.seen[args.destination] = digest(moved)
    return staged_result(staged, args.destination, "moved")
