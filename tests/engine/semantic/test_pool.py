"""The parse pool (engine/semantic/pool.py): workers make the engine's records."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

import starlette

from engine.admin.seed import files_from_directory
from engine.limits import LIMITS
from engine.semantic.codec import encode
from engine.semantic.extract import extract
from engine.semantic.languages import language_for
from engine.semantic.pool import ParsePool, parse_batch

STARLETTE = Path(starlette.__file__).parent


def _starlette_items() -> list[tuple[str, str, bytes, str]]:
    files = files_from_directory(STARLETTE, "src/starlette")
    items = []
    for path, data in sorted(files.items()):
        language = language_for(path)
        if language is not None:
            items.append((path, hashlib.sha1(data).hexdigest(), data, language))
    return items


def test_workers_make_the_same_records_as_the_engine() -> None:
    items = _starlette_items()
    assert len(items) >= LIMITS.pool_min_files
    pool = ParsePool(2)
    try:
        got = dict((item[0], payload) for item, payload in pool.parse(items))
    finally:
        pool.close()
    assert got == {item[0]: encode(extract(*item)) for item in items}
    assert parse_batch(items[:2])[0] == [got[items[0][0]], got[items[1][0]]]
    assert pool.worker_cpu > 0


def _worker_pids(pool: ParsePool) -> list[int]:
    executor = pool._get()
    assert executor is not None
    list(pool.parse(_starlette_items()))  # the workers exist once a batch has run
    return sorted(p.pid for p in (executor._processes or {}).values() if p.pid is not None)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_ignore_ctrl_c() -> None:
    # Threat: a terminal's Ctrl-C reaches the whole process group; workers that
    # died of it would print their own tracebacks and break the engine's pool.
    pool = ParsePool(2)
    try:
        pids = _worker_pids(pool)
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        assert [pid for pid in pids if _alive(pid)] == pids
        items = _starlette_items()
        assert len(list(pool.parse(items))) == len(items)
    finally:
        pool.close()
    assert [pid for pid in pids if _alive(pid)] == []


def test_close_ends_a_worker_that_does_not_finish() -> None:
    # Threat: a worker stuck in one batch would keep a stopping server (and the
    # host's stderr pipe) alive for ever; close() waits a bounded time, then ends it.
    pool = ParsePool(2)
    pids = _worker_pids(pool)
    executor = pool._get()
    assert executor is not None
    stuck = executor.submit(time.sleep, 3600)
    while not stuck.running():
        time.sleep(0.01)
    pool.close(timeout=0.2)
    assert [pid for pid in pids if _alive(pid)] == []
    pool.close()  # twice is harmless
