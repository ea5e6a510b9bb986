"""The MCP instructions, with the engine's vital-sign line on a mismatch (docs/vital-signs.md).

On ``initialize`` (2025-11-25) and ``server/discover`` (2026-07-28) the edge
asks the engine, for the connection's token and repository, whether it serves
an artefact made for something else; if so, the one line ``effective_scope``
carries as ``warning`` opens the instructions. A healthy engine, an engine
that cannot say (unreachable, too slow, older than ``POST /v1/warning``) and a
refused token leave the instructions exactly as they are: the sign is silent
and the handshake never fails over it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.lowlevel import Server

from engine.service import warning_of

__all__ = ["WARNING_WAIT", "install", "with_warning"]

logger = logging.getLogger("chit.gateway")

WARNING_WAIT = 5.0  # seconds the handshake waits for the engine's line before going without
_METHODS = frozenset({"initialize", "server/discover"})

Credentials = Callable[[Any], tuple[str, str | None] | None]
"""The token and repository of a request's ``ctx``, or ``None`` (nothing is asked)."""
LineOf = Callable[[str, str | None], str | None]
"""The engine's ``warning(token, repo=repo)``."""


def with_warning(instructions: str, line: str | None) -> str:
    """``instructions`` opened by ``line`` on a line of its own; unchanged for ``None``."""
    return instructions if line is None else f"{line}\n{instructions}"


def install(server: Server[Any], credentials: Credentials, warning: LineOf) -> None:
    """Add the vital-sign line to the instructions ``server`` answers the handshake with.

    Args:
        server: The low-level MCP server (a middleware is appended).
        credentials: The token and repository of a request (``ctx``).
        warning: Asks the engine for the line (:meth:`engine.service.Engine.warning`);
            it runs on a worker thread, at most :data:`WARNING_WAIT` seconds.
    """

    async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        result = await call_next(ctx)
        if getattr(ctx, "method", None) not in _METHODS or not isinstance(result, dict):
            return result
        text = result.get("instructions")
        if not isinstance(text, str):
            return result
        line = await _ask(ctx, credentials, warning)
        return result if line is None else {**result, "instructions": with_warning(text, line)}

    server.middleware.append(middleware)


async def _ask(ctx: Any, credentials: Credentials, warning: LineOf) -> str | None:
    """The engine's line for this request, or ``None`` (silent) however it fails."""
    try:
        found = credentials(ctx)
        if found is None:
            return None
        token, repo = found
        with anyio.move_on_after(WARNING_WAIT):
            line = await anyio.to_thread.run_sync(
                functools.partial(warning, token, repo), abandon_on_cancel=True
            )
            return warning_of(line)
    except Exception:  # an engine that cannot say leaves the instructions as they are
        logger.debug("the engine's vital-sign line could not be read")
    return None
