"""The call log's durability window: an engine killed under load loses at most 100 ms.

A real ``chit engine serve`` on a unix socket, real clients calling it over HTTP
from several threads, and SIGKILL while they run. Every read-only call answered
more than 100 ms before the kill must be in the log, every state-changing call
answered at all must be, and the log must still verify (docs/audit.md §8, *When
an entry is durable*).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from engine import admin
from engine.auth import signkeys
from gateway.remote_engine import RemoteEngine
from tests.conftest import World
from tests.gateway.mcp_client import engine_server

CLIENTS = 4
WINDOW_SECONDS = 0.100  # the documented bound
LOAD_SECONDS = 1.5


def _load(
    url: str, token: str, listed: str, client: int, stop: threading.Event,
    answered: list[tuple[float, str]], errors: list[tuple[float, str]],
) -> None:
    """Sequential calls from one client; records when each answer arrived and its kind.

    It stops at the first failed call: after the kill, that is the engine gone.
    """
    with RemoteEngine(url) as engine:
        n = 0
        while not stop.is_set():
            n += 1
            if n % 10 == 0:
                tool, args, kind = "write_file", {
                    "path": f"src/load{client}.py", "content": f"N = {n}\n"}, "durable"
            else:
                tool, args, kind = "read_file", {"path": "src/app.py"}, "queued"
            try:
                answer = engine.invoke(token, tool, args, session=f"load-{client}",
                                       offered_catalog_hash=listed)
            except Exception:  # the engine was killed mid-call
                return
            when = time.monotonic()
            if not answer["ok"]:
                errors.append((when, str(answer)))
                return
            answered.append((when, kind))


def test_sigkill_under_load_loses_at_most_the_last_100_ms_of_read_only_entries(
    world: World, tmp_path: Path
) -> None:
    token = world.mint(agent="loader", ops="read,write", paths="src/**")
    with engine_server(world.home, world.repo) as server:
        with RemoteEngine(server.url) as probe:
            listed = probe.offer(token)["catalog_hash"]
        stop = threading.Event()
        answered: list[list[tuple[float, str]]] = [[] for _ in range(CLIENTS)]
        errors: list[tuple[float, str]] = []
        threads = [
            threading.Thread(target=_load, args=(server.url, token, listed, c, stop,
                                                 answered[c], errors))
            for c in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        time.sleep(LOAD_SECONDS)
        killed_at = time.monotonic()
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not [e for when, e in errors if when < killed_at]  # only the kill cut calls off
    assert all(len(a) > 20 for a in answered), [len(a) for a in answered]

    logged: dict[str, int] = {}
    for entry in admin.call_log_entries(world.home):
        logged[entry["session"]] = logged.get(entry["session"], 0) + 1
    for c in range(CLIENTS):
        calls = answered[c]
        # Each client's entries are its calls in order (one client, one call at a
        # time, the log in call order): the first `kept` calls are in the log.
        kept = logged.get(f"load-{c}", 0)
        assert kept <= len(calls) + 1  # at most the call the kill cut off
        before_window = sum(1 for when, _kind in calls if when < killed_at - WINDOW_SECONDS)
        assert kept >= before_window, (c, kept, before_window, len(calls))
        durable = [i for i, (_when, kind) in enumerate(calls) if kind == "durable"]
        assert not durable or kept > durable[-1], (c, kept, durable[-1])

    public = signkeys.load_public_keys(admin.export_public(world.home))
    report = admin.verify_call_log(world.home, public)
    assert report["ok"], report["findings"]
    assert report["entries"] == sum(logged.values())
