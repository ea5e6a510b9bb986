"""How a server stops on ``SIGTERM`` or Ctrl-C: through Python, leaving nothing behind.

A server that dies of a signal's default action skips ``atexit``: the semantic
index's parse pool is never closed, and its workers, forkserver and resource
tracker (and the leaked-semaphore warnings) outlive it on the host's stderr.
:func:`stop_signals` routes both signals to Python; :class:`StdinLines` is the
stdio edge's input, read so that a stop never waits on a client that keeps its
stdin open. See docs/deployment.md, "Stopping".
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ["STOP_SIGNALS", "StdinLines", "claimed_stdin", "exit_cleanly", "stop_signals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, Any], None]


def exit_cleanly(_sig: int, _frame: object) -> None:
    """A stop signal's handler: exit with status 0 through Python (``finally``, ``atexit``)."""
    raise SystemExit(0)


@contextlib.contextmanager
def stop_signals(handler: Handler = exit_cleanly) -> Iterator[None]:
    """Within the block, ``SIGTERM`` and ``SIGINT`` call ``handler``.

    Outside the main thread (which alone receives signals) nothing changes.

    uvicorn restores these handlers when it has drained and raises the signal
    it caught again, so a server run inside the block ends through ``handler``.

    Args:
        handler: Called with the signal number and frame; default :func:`exit_cleanly`.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; its handlers stand
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def claimed_stdin() -> Iterator[BinaryIO]:
    """The client's stdin, from a private descriptor; fd 0 reads the null device meanwhile.

    As the SDK's own transport does, so a child the server starts (git) reads
    EOF rather than the client's messages. The private descriptor is never
    closed: a reader thread may still be blocked on it after the server stops.
    """
    try:
        private = os.dup(0)
    except OSError:  # no fd 0: nothing to divert, and nothing to read but EOF
        yield io.BytesIO()
        return
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    try:
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


class StdinLines:
    """The client's messages, one line each, read by a daemon thread.

    The SDK reads stdin in a worker thread that a stopping server waits for, so
    a server whose client keeps stdin open could not stop. Here the thread is a
    daemon that nothing waits for: :meth:`stop` (from the event loop) ends the
    lines as the client's EOF would, and the server shuts down the usual way.
    Iterate it inside the event loop that made it (``async for``).

    Args:
        stream: The binary stream to read (:func:`claimed_stdin`).
    """

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._send, self._receive = anyio.create_memory_object_stream[str](0)
        self._token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, name="chit-stdin", daemon=True).start()

    def __repr__(self) -> str:
        return "StdinLines()"

    def _pump(self) -> None:
        try:
            for raw in iter(self._stream.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                anyio.from_thread.run(self._send.send, line, token=self._token)
        except (RuntimeError, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the loop ended, or the server stopped reading
        with contextlib.suppress(RuntimeError):
            anyio.from_thread.run_sync(self._send.close, token=self._token)

    def stop(self) -> None:
        """End the lines now (in the event loop's thread): the server sees EOF."""
        self._send.close()

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
