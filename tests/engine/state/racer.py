"""One racing process of the store contract suite (``python -m tests.engine.state.racer``).

It opens its own store, writes ``GO.<pid>`` when ready, waits for the file
``GO``, runs its task and prints a JSON answer (tests/engine/state/storekit.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from engine.audit import calllog, redact, tlog
from engine.state import RateWindow, Store, open_store


def _ready(go: str) -> None:
    Path(f"{go}.{os.getpid()}").write_text("ready")
    while not os.path.exists(go):
        time.sleep(0.001)


def _record(n: int) -> calllog.CallRecord:
    return calllog.CallRecord(
        time=1_796_000_000 + n, agent=f"racer-{os.getpid()}", chain=("0" * 32,),
        session="s", tool="read_file", arguments=redact.redact_arguments({"path": f"{n}.py"}),
        decision="allowed", code=None, policy_hash="sha256:" + "1" * 64,
        catalog_hash="sha256:" + "2" * 64,
    )


def jti(store: Store, go: str) -> dict[str, Any]:
    _ready(go)
    now = int(time.time())
    return {"won": store.claim_jti("https://idp.example", "jti-race", keep_until=now + 600,
                                   now=now)}


def rate(store: Store, go: str, key: str, calls: str, per: str, tries: str) -> dict[str, Any]:
    windows = [RateWindow(key, int(calls), int(per))]
    _ready(go)
    admitted = sum(store.admit_rate(windows, now=time.time()) is None for _ in range(int(tries)))
    return {"admitted": admitted}


def append(store: Store, go: str, home: str, rounds: str, batch: str) -> dict[str, Any]:
    signer = calllog.LogSigner(home)
    _ready(go)
    sizes = []
    for r in range(int(rounds)):
        records = [_record(r * 100 + k) for k in range(int(batch))]
        tree = tlog.append(store, records, signer, now=int(time.time()), checkpoint_entries=5)
        sizes.append(tree.size)
    return {"sizes": sizes}


def lane(store: Store, go: str, name: str, counter: str, rounds: str) -> dict[str, Any]:
    path = Path(counter)
    marker = path.with_suffix(".held")
    overlaps = 0
    _ready(go)
    for _ in range(int(rounds)):
        lock = store.lane_lock(name)
        if lock is None:
            return {"lock": None}
        with lock:
            try:  # only one holder at a time may create the marker
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
            except FileExistsError:
                overlaps += 1
            value = int(path.read_text())
            time.sleep(0.002)
            path.write_text(str(value + 1))
            marker.unlink(missing_ok=True)
    return {"overlaps": overlaps}


def wait(store: Store, go: str, after: str) -> dict[str, Any]:
    store.wait_change(-1, 0)  # start the watcher
    _ready(go)
    started = time.monotonic()
    position = store.wait_change(int(after), 10)
    return {"position": position, "seconds": time.monotonic() - started}


TASKS = {"jti": jti, "rate": rate, "append": append, "lane": lane, "wait": wait}


def main() -> None:
    go, task, url, *args = sys.argv[1:]
    store = open_store(Path(go).parent / "home", url)
    try:
        print(json.dumps(TASKS[task](store, go, *args)))
    finally:
        store.close()


if __name__ == "__main__":
    main()
