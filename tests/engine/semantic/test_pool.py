"""The parse pool (engine/semantic/pool.py): workers make the engine's records."""

from __future__ import annotations

import hashlib
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
