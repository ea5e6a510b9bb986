"""Parsing in worker processes, so a cold index uses every core.

A :class:`ParsePool` keeps up to ``LIMITS.pool_workers`` workers started by a
``forkserver`` (never a fork of the threaded engine) that imported the
extractor once. The engine reads and opens every file itself and sends the
plaintext in batches; workers answer with each file's records in the codec's
byte form (engine/semantic/codec/). If the pool cannot start or a worker dies,
the engine parses the batch itself. Workers ignore Ctrl-C (the engine decides
when they stop), end with the engine's process, even one that was killed, and
a closing pool ends those that do not stop in time. See docs/semantic.md,
"Building and reuse", and docs/deployment.md, "Stopping".
"""

from __future__ import annotations

import concurrent.futures
import gc
import logging
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Iterator

from engine.limits import LIMITS
from engine.semantic.codec import encode_extracted
from engine.semantic.extract import extract_packed

__all__ = ["ParsePool", "parse_batch"]

logger = logging.getLogger("chit.engine.semantic")


Item = tuple[str, str, bytes, str]
"""``(path, blob id hex, plaintext, language)``."""


def parse_batch(items: list[Item]) -> tuple[list[bytes], float]:
    """Extract and encode some files (runs in a worker; pure: bytes in, bytes out).

    Args:
        items: ``(path, blob id, plaintext, language)`` per file.

    Returns:
        The encoded records of each file, in order, and the CPU seconds spent.
    """
    start = time.process_time()
    was_enabled = gc.isenabled()
    gc.disable()  # records hold no cycles; collecting while building them is waste
    try:
        out = [encode_extracted(extract_packed(path, data, lang)) for path, _, data, lang in items]
    finally:
        if was_enabled:
            gc.enable()
    return out, time.process_time() - start


def _batches(items: list[Item], workers: int) -> list[list[Item]]:
    """Split into batches, largest files first, each batch smaller than the one before.

    A batch holds about a quarter of what is left per worker (at most
    ``LIMITS.pool_batch_bytes``, at least ``LIMITS.pool_min_batch_bytes``): large batches
    while much is left, small ones at the end, so the workers finish together
    (guided self-scheduling) and the long files do not end the run on one core.
    """
    left = sum(len(i[2]) for i in items)
    out: list[list[Item]] = []
    current: list[Item] = []
    size = 0
    target = _target(left, workers)
    for item in sorted(items, key=lambda i: -len(i[2])):
        current.append(item)
        size += len(item[2])
        if size >= target:
            out.append(current)
            left -= size
            current, size = [], 0
            target = _target(left, workers)
    if current:
        out.append(current)
    return out


def _target(left: int, workers: int) -> int:
    return max(LIMITS.pool_min_batch_bytes, min(LIMITS.pool_batch_bytes, left // (4 * workers) + 1))


def _end_with(owner: int) -> None:
    """A worker's start: ignore ``SIGINT``, exit as soon as process ``owner`` (the engine) ends.

    A terminal's Ctrl-C reaches the whole process group: the engine stops and
    closes the pool, a worker must not die mid-batch with a traceback of its
    own. A forkserver's workers hold both ends of their queues and the server's
    "alive" pipe, so without the watch below they, the forkserver and its
    resource tracker would outlive an engine that was killed (``SIGKILL``).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        os._exit(0)
    except (AttributeError, OSError):  # no pidfd (not Linux 5.3+): close() still ends them
        return

    def wait() -> None:
        select.select([fd], [], [])  # readable once the process has ended
        os._exit(0)

    threading.Thread(target=wait, name="chit-pool-owner", daemon=True).start()


class ParsePool:
    """Worker processes that parse files; made on first use, shared by an engine.

    Args:
        workers: How many; default one per core (``os.cpu_count()``), at most
            ``LIMITS.pool_workers``.
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, min(LIMITS.pool_workers, workers or os.cpu_count() or 1))
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._broken = False
        self.worker_cpu = 0.0  # CPU seconds the workers spent parsing (benchmarks read it)

    def __repr__(self) -> str:
        return f"ParsePool({self.workers} workers)"

    def _get(self) -> concurrent.futures.ProcessPoolExecutor | None:
        with self._lock:
            if self._broken:
                return None
            if self._executor is None:
                try:
                    context = multiprocessing.get_context("forkserver")
                    context.set_forkserver_preload(["engine.semantic.pool"])
                    self._executor = concurrent.futures.ProcessPoolExecutor(
                        max_workers=self.workers, mp_context=context,
                        initializer=_end_with, initargs=(os.getpid(),),
                    )
                except (OSError, ValueError):
                    logger.warning("index workers cannot start; parsing in the engine")
                    self._broken = True
                    return None
            return self._executor

    def parse(self, items: list[Item]) -> Iterator[tuple[Item, bytes]]:
        """Parse files, in workers when there are enough of them.

        Args:
            items: ``(path, blob id, plaintext, language)`` per file.

        Yields:
            ``(item, encoded records)`` per file, in no particular order.
        """
        executor = self._get() if len(items) >= LIMITS.pool_min_files and self.workers > 1 else None
        if executor is None:
            for item in items:
                yield item, parse_batch([item])[0][0]
            return
        batches = _batches(items, self.workers)
        try:
            futures = {executor.submit(parse_batch, batch): batch for batch in batches}
        except (RuntimeError, concurrent.futures.process.BrokenProcessPool):
            futures = {}
        done: set[int] = set()
        try:
            for future in concurrent.futures.as_completed(futures):
                batch = futures[future]
                try:
                    encoded, cpu = future.result()
                    self.worker_cpu += cpu
                except concurrent.futures.process.BrokenProcessPool:
                    raise
                except Exception:  # a worker's failure: parse here
                    encoded = parse_batch(batch)[0]
                done.add(id(batch))
                yield from zip(batch, encoded, strict=True)
        except concurrent.futures.process.BrokenProcessPool:
            logger.warning("an index worker died; parsing in the engine")
            with self._lock:
                self._broken = True
        for batch in batches:
            if id(batch) not in done:
                yield from zip(batch, parse_batch(batch)[0], strict=True)

    def close(self, timeout: float = LIMITS.pool_close_seconds) -> None:
        """Stop the workers: they finish their batch, or are ended after ``timeout``.

        Batches not started are dropped. A worker still running after
        ``timeout`` seconds is terminated (``SIGTERM``), then killed. Safe to
        call twice and from ``atexit``; a later :meth:`parse` starts new workers.

        Args:
            timeout: Seconds to wait for the workers (``LIMITS.pool_close_seconds``).
        """
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is None:
            return
        # Taken before shutdown(), which drops its references to them.
        processes = list((executor._processes or {}).values())
        manager: threading.Thread | None = getattr(executor, "_executor_manager_thread", None)
        executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        stuck = [process for process in processes if process.is_alive()]
        if stuck:
            logger.warning("%d index workers did not stop in time; ending them", len(stuck))
        for process in stuck:
            process.terminate()
        for process in stuck:
            process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join(1.0)
        if manager is not None:
            manager.join(timeout)
