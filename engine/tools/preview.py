"""What a call would do, for ``confirmation_required`` (docs/tools.md, "Confirmation").

A tool the policy's ``[confirm]`` lists, called without ``"confirm": true``,
is refused before its handler runs, with a preview built here from the same
session view the handler would act on. Building it reads and changes
nothing: no staged path, no lane, no saved session. It names only paths the
call already named (checked for scope and policy) or staged paths the caller
may see (as ``status`` does); others are counted, never named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from engine.catalog import schemas as s
from engine.errors import ConfirmationError, RepositoryError
from engine.tools._staging import decode_content
from engine.tools.context import CallContext

__all__ = ["confirmation_required", "preview"]


def confirmation_required(ctx: CallContext, args: BaseModel) -> ConfirmationError:
    """The refusal of an unconfirmed call, with its preview.

    Args:
        ctx: The call (its tool, session and token), not yet run.
        args: Its validated arguments.

    Returns:
        ``confirmation_required`` with ``preview`` (see :func:`preview`).

    Raises:
        InvalidRequestError: ``invalid_argument`` for ``write_file`` content
            that is not valid base64 (the call would fail the same way).
        RepositoryError: If the session's view cannot be read (as the call's
            own handler would fail).
    """
    return ConfirmationError(
        "confirmation_required",
        f"{ctx.tool} asks for confirmation: nothing was changed; call it again with the "
        'same arguments and "confirm": true to carry it out',
        preview=preview(ctx, args),
    )


def preview(ctx: CallContext, args: BaseModel) -> dict[str, Any]:
    """What the call ``ctx.tool`` with ``args`` would do, as JSON.

    Args:
        ctx: The call, not yet run.
        args: Its validated arguments.

    Returns:
        ``{"tool", ...}`` with, by tool: ``write_file`` ``path``, ``bytes``
        (decoded), ``exists`` (true: it replaces a file); ``delete_file``
        ``path``, ``exists``, ``size`` (bytes; ``None`` if absent, or if
        the caller may not read it);
        ``move_file`` ``source``, ``destination``; ``resolve_conflict``
        ``path``, ``resolution``; ``discard`` ``staged`` (``[{"path",
        "change"}]``), ``hidden`` (staged paths not shown), ``conflicts``;
        ``commit`` ``lane``, ``subject`` (the message's first line),
        ``staged``, ``hidden``; ``issue_sub_token`` ``grant`` (``agent``,
        ``ops``, ``paths``, ``ttl_seconds``, ``delegable``, ``repos``).

    Raises:
        InvalidRequestError: As :func:`confirmation_required`.
        RepositoryError: As :func:`confirmation_required`.
    """
    build = _BUILDERS.get(ctx.tool)
    body = build(ctx, args) if build is not None else {}
    return {"tool": ctx.tool, **body}


def _size(ctx: CallContext, path: str) -> tuple[bool, int | None]:
    """Whether ``path`` exists in the session's view, and its size if the caller may read it.

    The size says something of the content, so a token without ``read`` (or
    one the policy does not let read the path) is told only that it exists,
    which a staging write tells it anyway (``added`` or ``modified``).
    """
    if "read" not in ctx.token.operations or not ctx.visible(path):
        return ctx.repo.exists(ctx.token.agent, ctx.session.staged, path), None
    try:
        return True, len(ctx.repo.view_read(ctx.token.agent, ctx.session.staged, path))
    except RepositoryError as exc:
        if exc.code == "not_found":
            return False, None
        raise


def _staged(ctx: CallContext) -> tuple[list[dict[str, str]], int]:
    """The staged entries the caller may see, and how many others there are."""
    entries = ctx.repo.status(ctx.token.agent, ctx.session.staged)["staged"]
    shown = [{"path": e["path"], "change": e["change"]} for e in entries if ctx.visible(e["path"])]
    return shown, len(entries) - len(shown)


def _write_file(ctx: CallContext, args: Any) -> dict[str, Any]:
    data = decode_content(args.content, args.encoding)
    exists = ctx.repo.exists(ctx.token.agent, ctx.session.staged, args.path)
    return {"path": args.path, "bytes": len(data), "exists": exists}


def _delete_file(ctx: CallContext, args: Any) -> dict[str, Any]:
    exists, size = _size(ctx, args.path)
    return {"path": args.path, "exists": exists, "size": size}


def _move_file(_ctx: CallContext, args: Any) -> dict[str, Any]:
    return {"source": args.source, "destination": args.destination}


def _resolve_conflict(_ctx: CallContext, args: Any) -> dict[str, Any]:
    return {"path": args.path, "resolution": args.resolution}


def _discard(ctx: CallContext, _args: Any) -> dict[str, Any]:
    staged, hidden = _staged(ctx)
    return {"staged": staged, "hidden": hidden, "conflicts": len(ctx.session.staged.conflicts)}


def _commit(ctx: CallContext, args: Any) -> dict[str, Any]:
    staged, hidden = _staged(ctx)
    lines = args.message.strip().splitlines()
    subject = lines[0] if lines else ""
    return {"lane": ctx.token.lane, "subject": subject, "staged": staged, "hidden": hidden}


def _issue_sub_token(_ctx: CallContext, args: Any) -> dict[str, Any]:
    grant = s.IssueSubTokenArgs.model_fields.keys()
    return {"grant": {name: getattr(args, name) for name in grant}}


_BUILDERS: dict[str, Callable[[CallContext, Any], dict[str, Any]]] = {
    "write_file": _write_file,
    "delete_file": _delete_file,
    "move_file": _move_file,
    "resolve_conflict": _resolve_conflict,
    "discard": _discard,
    "commit": _commit,
    "issue_sub_token": _issue_sub_token,
}
