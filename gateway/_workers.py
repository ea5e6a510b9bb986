"""Worker processes behind one listening socket: start them, watch them, replace them, stop them.

``chit engine serve --workers N`` and ``chit mcp --http ... --workers N`` bind
their socket once, make a private run folder, then run N fresh interpreters
(``python -m MODULE``) that inherit the socket (``pass_fds``) and read their
settings from a pipe, never from argv or the environment. Each worker runs in
its own process group, so whatever it starts (the semantic index's parse pool)
is swept with it. A worker that dies is replaced, with a growing pause if it
keeps dying at start; SIGTERM or SIGINT stops them all, bounded, and nothing of
the tree survives. The worker's side is :mod:`gateway._worker`. See
docs/engine-api.md, "Running it", and docs/http.md, "Workers".
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_WORKERS",
    "START_SECONDS",
    "STOP_SECONDS",
    "RunFolder",
    "Supervisor",
    "WorkerSpec",
    "default_workers",
    "listener_gone",
    "worker_count",
]

logger = logging.getLogger("chit.gateway")

MAX_WORKERS = 64  # worker processes of one supervisor
START_SECONDS = 120.0  # a worker not ready this long after it started is killed
STOP_SECONDS = 45.0  # after SIGTERM, workers get this long before SIGKILL
QUICK_EXIT_SECONDS = 10.0  # a worker that dies sooner after starting "keeps dying at start"
BACKOFF_SECONDS = (0.5, 30.0)  # the first pause before restarting such a worker, and the most
_SUN_PATH_MAX = 107  # bytes of a unix socket path (Linux sockaddr_un, less the NUL)
_GONE = frozenset({errno.ECONNREFUSED, errno.ENOENT})


def default_workers() -> int:
    """The cores this process may run on (``sched_getaffinity``), at most :data:`MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def worker_count(text: str) -> int:
    """Parse ``--workers N``: an integer from 1 to :data:`MAX_WORKERS`.

    Raises:
        ValueError: Otherwise.
    """
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise ValueError(f"--workers takes a number from 1 to {MAX_WORKERS}, not {text!r}")
    return int(text)


class RunFolder:
    """A private folder (``0700``, this user's) for the workers' own sockets.

    Made in the temporary folder (``$TMPDIR``, else ``/tmp``) with a random
    name, so its socket paths stay short and no one else can have made it.
    """

    def __init__(self) -> None:
        path = Path(tempfile.mkdtemp(prefix="chit-"))  # 0700, O_EXCL, random
        if len(os.fsencode(path / "w00.sock")) > _SUN_PATH_MAX:
            os.rmdir(path)
            path = Path(tempfile.mkdtemp(prefix="chit-", dir="/tmp"))
        self.path = path

    def __repr__(self) -> str:
        return f"RunFolder({self.path})"

    def socket(self, index: int) -> Path:
        """The private socket of worker ``index``."""
        return self.path / f"w{index}.sock"

    def remove(self) -> None:
        """Remove the folder and whatever the workers left in it."""
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass(frozen=True)
class WorkerSpec:
    """What a supervisor runs.

    Attributes:
        module: The worker's module, run as ``python -m MODULE``.
        config: The settings of worker ``index``, sent as JSON on its stdin
            (with ``ready_fd`` and ``supervisor`` added).
        inherit: File descriptors the workers inherit (the listening socket).
        drain_seconds: How long a worker may take to stop after SIGTERM
            (the supervisor waits at most this plus :data:`STOP_SECONDS`).
    """

    module: str
    config: Callable[[int], dict[str, Any]]
    inherit: tuple[int, ...]
    drain_seconds: float = 30.0


@dataclass(eq=False)
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    ready_fd: int | None = None
    ready: bool = False
    started: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None
    deadline: float = field(default=0.0)


class Supervisor:
    """Runs :class:`WorkerSpec` workers until SIGTERM or SIGINT.

    Args:
        spec: What to run.
        count: How many workers (1 to :data:`MAX_WORKERS`).
        name: How the supervisor names itself in its log (``chit engine``).
    """

    def __init__(self, spec: WorkerSpec, count: int, *, name: str) -> None:
        if not 1 <= count <= MAX_WORKERS:
            raise ValueError(f"--workers takes a number from 1 to {MAX_WORKERS}")
        self._spec = spec
        self._slots = [_Slot(i) for i in range(count)]
        self._name = name
        self._stopping = False
        self._selector = selectors.DefaultSelector()
        self._wake_r = -1

    def __repr__(self) -> str:
        return f"Supervisor({self._spec.module}, {len(self._slots)} workers)"

    def pids(self) -> list[int]:
        """The live workers' process ids."""
        return [s.process.pid for s in self._slots if s.process is not None]

    def run(self, on_ready: Callable[[], None], on_stopping: Callable[[], None]) -> int:
        """Start every worker, call ``on_ready`` once all are ready, serve until a signal.

        Must run in the main thread: workers die with the thread that started
        them (``PR_SET_PDEATHSIG``), and signals reach only the main thread.

        Args:
            on_ready: Called once, when every worker has reported ready.
            on_stopping: Called when stopping starts, before the workers are
                told to stop: closes the shared socket here, so that new
                connections are refused (not queued unanswered) as soon as the
                workers close theirs.

        Returns:
            0 after SIGTERM or SIGINT; if a worker fails before every worker was
            ready, that worker's exit status (1 if it had none).
        """
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self._wake_r = wake_r
        self._selector.register(wake_r, selectors.EVENT_READ, None)
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
        old_wakeup = signal.set_wakeup_fd(wake_w)
        try:
            for slot in self._slots:
                self._start(slot)
            return self._serve(on_ready)
        finally:
            on_stopping()
            self._stop_all()
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._selector.close()
            os.close(wake_r)
            os.close(wake_w)

    # --- the loop ------------------------------------------------------------------

    def _on_signal(self, sig: int, _frame: object) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT):
            self._stopping = True

    def _serve(self, on_ready: Callable[[], None]) -> int:
        announced = False
        while not self._stopping:
            for key, _ in self._selector.select(self._timeout()):
                if key.data is None:
                    _drain(self._wake_r)
                else:
                    self._read_ready(key.data)
            failed = self._reap(announced)
            if failed is not None:
                return failed
            if not announced and all(s.ready for s in self._slots):
                announced = True
                on_ready()
            now = time.monotonic()
            for slot in self._slots:
                if slot.process is None and slot.restart_at is not None and now >= slot.restart_at:
                    self._restart(slot)
                elif slot.process is not None and not slot.ready and now > slot.deadline:
                    logger.error("%s: worker %d did not start within %d s; killing it",
                                 self._name, slot.index, START_SECONDS)
                    _kill_group(slot.process.pid)
        return 0

    def _timeout(self) -> float:
        now = time.monotonic()
        times = [s.restart_at for s in self._slots
                 if s.process is None and s.restart_at is not None]
        times += [s.deadline for s in self._slots if s.process is not None and not s.ready]
        return max(0.0, min(times) - now) if times else 5.0

    def _restart(self, slot: _Slot) -> None:
        try:
            self._start(slot)
        except OSError as exc:  # out of processes or descriptors: try again later
            logger.error("%s: worker %d cannot start (%s); trying again in %.0f s",
                         self._name, slot.index, exc.strerror, BACKOFF_SECONDS[1])
            slot.restart_at = time.monotonic() + BACKOFF_SECONDS[1]

    def _start(self, slot: _Slot) -> None:
        ready_r, ready_w = os.pipe()
        config = dict(self._spec.config(slot.index), ready_fd=ready_w, supervisor=os.getpid())
        try:
            process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", self._spec.module],
                stdin=subprocess.PIPE,
                pass_fds=(*self._spec.inherit, ready_w),
                process_group=0,  # its own group: swept with it (see _kill_group)
            )
        except OSError:
            os.close(ready_r)
            raise
        finally:
            os.close(ready_w)
        stdin = process.stdin  # a pipe (stdin=PIPE above)
        if stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # it died at once: its exit is seen
                stdin.write(json.dumps(config).encode("utf-8"))
            with contextlib.suppress(BrokenPipeError):
                stdin.close()
        slot.process, slot.ready_fd, slot.ready = process, ready_r, False
        slot.started = time.monotonic()
        slot.deadline = slot.started + START_SECONDS
        slot.restart_at = None
        self._selector.register(ready_r, selectors.EVENT_READ, slot)

    def _read_ready(self, slot: _Slot) -> None:
        fd = slot.ready_fd
        if fd is None:
            return
        try:
            got = os.read(fd, 16)
        except BlockingIOError:
            return
        if got.startswith(b"R"):
            slot.ready = True
        self._close_ready(slot)  # ready, or it closed without being ready (it exits)

    def _close_ready(self, slot: _Slot) -> None:
        if slot.ready_fd is not None:
            self._selector.unregister(slot.ready_fd)
            os.close(slot.ready_fd)
            slot.ready_fd = None

    def _reap(self, announced: bool) -> int | None:
        """Handle workers that exited; the exit status of one that failed before all were ready."""
        for slot in self._slots:
            process = slot.process
            if process is None or not _exited(process.pid):
                continue
            _kill_group(process.pid)  # its helpers go too, before its group id can be reused
            status = process.wait()
            self._close_ready(slot)
            slot.process = None
            if self._stopping:
                continue
            if not announced:
                logger.error("%s: worker %d failed to start (status %s)",
                             self._name, slot.index, status)
                return status if status > 0 else 1
            lived = time.monotonic() - slot.started
            slot.quick_exits = slot.quick_exits + 1 if lived < QUICK_EXIT_SECONDS else 0
            first, most = BACKOFF_SECONDS
            pause = 0.0 if slot.quick_exits == 0 else min(
                most, first * 2 ** (slot.quick_exits - 1))
            slot.restart_at = time.monotonic() + pause
            logger.warning("%s: worker %d (pid %d) exited with status %s; replacing it in %.1f s",
                           self._name, slot.index, process.pid, status, pause)
        return None

    # --- stopping ------------------------------------------------------------------

    def _stop_all(self) -> None:
        """SIGTERM every worker, wait (bounded), SIGKILL what is left, sweep every group."""
        self._stopping = True
        for process in [s.process for s in self._slots if s.process is not None]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._spec.drain_seconds + STOP_SECONDS
        while any(s.process is not None for s in self._slots):
            left = deadline - time.monotonic()
            if left <= 0:
                for slot in self._slots:
                    if slot.process is not None:
                        logger.error("%s: worker %d did not stop in time; killing it",
                                     self._name, slot.index)
                        _kill_group(slot.process.pid)
                deadline = time.monotonic() + STOP_SECONDS  # SIGKILL cannot be refused
            with contextlib.suppress(OSError):
                for key, _ in self._selector.select(min(max(left, 0.05), 0.5)):
                    if key.data is None:
                        _drain(self._wake_r)
            self._reap(announced=True)
        for slot in self._slots:
            self._close_ready(slot)


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, leaving it unreaped (its ids stay reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid`` (a worker and whatever it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass


def listener_gone(exc: BaseException) -> bool:
    """Whether a failed connect to a worker's socket found nobody listening.

    True for a refused connection or a missing socket file anywhere in the
    exception's causes: the worker is gone (not merely busy).
    """
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno in _GONE:
            return True
        todo += [item.__cause__, item.__context__, *item.args]
    return False
