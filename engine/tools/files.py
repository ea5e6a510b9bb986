"""The file tools: ``read_file``, and ``write_file``, ``delete_file``, ``move_file`` (staging).

Writes stage in the session only (nothing lands before ``commit``); each is tried
on a copy and adopted once the policy's size limits passed, and none overwrites a
change the session never saw (docs/tools.md).
"""

from __future__ import annotations

import base64
from typing import Literal

from engine.catalog import schemas as s
from engine.errors import AccessDeniedError, InvalidRequestError
from engine.limits import LIMITS
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
    r"""Read a file from the session view or a revision, whole or a range of its lines.

    Whole, the file must be within the policy's ``limits.file_bytes``; with
    ``start_line`` or ``end_line`` (1-based, inclusive; lines end at ``\n``)
    the lines returned must be, and the file within ``LIMITS.range_file_bytes``.

    Raises:
        InvalidRequestError: ``invalid_argument`` if ``end_line`` is before
            ``start_line``.
        AccessDeniedError: ``limit_exceeded`` past either bound.
    """
    first, last = args.start_line, args.end_line
    if first is not None and last is not None and last < first:
        raise InvalidRequestError(
            "invalid_argument", "end_line is before start_line", fields=["end_line"]
        )
    if args.ref is None:
        data = ctx.repo.view_read(ctx.token.agent, ctx.session.staged, args.path)
        ctx.session.seen[args.path] = digest(data)
    else:
        data = ctx.repo.read_at(args.ref, args.path)
    size = len(data)
    lines: tuple[int, int, int] | None = None
    if first is not None or last is not None:
        if size > LIMITS.range_file_bytes:
            raise AccessDeniedError(
                "limit_exceeded",
                f"the file is {size} bytes, over the {LIMITS.range_file_bytes} a line range "
                "is read from",
            )
        data, lines = _line_range(data, first or 1, last)
    limit = ctx.policy.limits.file_bytes
    if len(data) > limit:
        raise AccessDeniedError(
            "limit_exceeded",
            f"the {'lines are' if lines else 'file is'} {len(data)} bytes, over the limit of "
            f"{limit}" + ("" if lines else "; read a range of its lines (start_line, end_line)"),
            rule="limits.file_bytes",
        )
    start, end, total = lines if lines is not None else (None, None, None)
    encoding: Literal["utf-8", "base64"] = "utf-8"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(data).decode("ascii"), "base64"
    return s.FileContent(
        path=args.path,
        ref=args.ref,
        encoding=encoding,
        content=text,
        size=size,
        start_line=start,
        end_line=end,
        total_lines=total,
    )


def _line_range(data: bytes, first: int, last: int | None) -> tuple[bytes, tuple[int, int, int]]:
    r"""Lines ``first`` to ``last`` of ``data`` (each with its ``\n``), and where they stand.

    Returns:
        ``(bytes, (first, last returned, lines in the file))``; past the end
        the bytes are empty and the last line returned is ``first - 1``.
    """
    total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    end = total if last is None else min(last, total)
    if first > end:
        return b"", (first, first - 1, total)
    pos = 0
    for _ in range(first - 1):
        pos = data.index(b"\n", pos) + 1
    stop = pos
    for _ in range(end - first + 1):
        at = data.find(b"\n", stop)
        stop = len(data) if at < 0 else at + 1
    return data[pos:stop], (first, end, total)


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
