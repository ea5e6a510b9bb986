"""``POST /v1/changes``: a long poll on the engine's change feed.

It answers ``{"ok": true, "position": N}`` as soon as the feed passes the
caller's ``after``, or when its ``timeout`` runs out. Each wait runs in a thread
of its own, apart from the engine calls' threads (at most
``LIMITS.change_waiters`` at once, ``503 limit_exceeded`` past that), and ends
within a second of its caller leaving or the server stopping. No token: it
reveals only that something changed (docs/engine-api.md).
"""

from __future__ import annotations

import functools
import logging
import threading
import time

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.service import LIMITS
from gateway import _wire
from gateway.engine_server.requests import (
    RequestError,
    changes_request,
    guard,
    json_response,
    read_json,
)
from gateway.feed import ChangeSource

__all__ = ["CHECK_SECONDS", "changes_route"]

logger = logging.getLogger("chit.engine_server")

CHECK_SECONDS = 1.0  # how soon a wait notices that its caller left or the server is stopping


def changes_route(
    engine: ChangeSource,
    *,
    allowed_hosts: frozenset[str] | None,
    max_request_bytes: int,
    stopping: threading.Event,
) -> Route:
    """The route of ``POST /v1/changes`` for ``engine``.

    Args:
        engine: The engine whose ``wait_change`` is served.
        allowed_hosts: As for :func:`gateway.engine_server.create_app`.
        max_request_bytes: The largest request body accepted.
        stopping: Set when the server starts stopping; every wait then answers.

    Returns:
        A Starlette route.
    """
    # Admission is decided at once (no queue: a wait never outlives its
    # timeout waiting for a thread); the admitted ones each get a thread.
    admitted = anyio.CapacityLimiter(LIMITS.change_waiters)
    threads = anyio.CapacityLimiter(LIMITS.change_waiters)

    async def changes(request: Request) -> Response:
        try:
            guard(request, allowed_hosts)
            after, timeout = changes_request(await read_json(request, max_request_bytes))
        except RequestError as exc:
            return json_response(exc.answer, exc.status)
        try:
            admitted.acquire_nowait()
        except anyio.WouldBlock:
            return json_response(_wire.error(
                "limit_exceeded", "too many waits for the change feed at once; ask again shortly",
                limit=LIMITS.change_waiters,
            ), 503)
        gone = threading.Event()
        wait = functools.partial(_wait, engine, after, timeout, (stopping, gone))
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_note_departure, request, gone)
                position = await anyio.to_thread.run_sync(
                    wait, limiter=threads, abandon_on_cancel=True
                )
                tg.cancel_scope.cancel()
        except Exception:
            logger.warning("the change feed could not be read", exc_info=True)
            return json_response(
                _wire.error("internal_error", "the change feed could not be read"), 500
            )
        finally:
            admitted.release()
        return json_response({"ok": True, "position": position})

    return Route(_wire.CHANGES_PATH, changes, methods=["POST"])


async def _note_departure(request: Request, gone: threading.Event) -> None:
    """Set ``gone`` when the client disconnects (its body is read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()


def _wait(
    engine: ChangeSource,
    after: int,
    timeout: float,
    ends: tuple[threading.Event, threading.Event],
) -> int:
    """``engine.wait_change`` in slices of :data:`CHECK_SECONDS`, until one of ``ends`` is set."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        position = engine.wait_change(after, max(0.0, min(left, CHECK_SECONDS)))
        if position != after or left <= CHECK_SECONDS or any(e.is_set() for e in ends):
            return position
