"""The call log's cost: an append on every call, against a bare SQLite insert, in the same run.

Set-up (untimed): a fresh temporary repository seeded with a few files on
``main``, a chit home (``admin.init_home``), one ``Engine`` and one agent token.

Measured:

- per call: ``Engine.invoke`` of ``status`` (a cheap read) and of ``write_file``
  (1 KiB of content) with the call log, and the same calls on the same engine with
  the append replaced by a no-op; the difference is what the log adds to a call.
  Rounds alternate which goes first; medians.
- one append: ``engine.audit.calllog.append`` (redacted arguments already made: encode
  the entry, sign entry and head with Ed25519, one ``BEGIN IMMEDIATE``
  transaction reading the head, inserting the row and replacing the head), against
  the peer: the same entry bytes inserted into a plain WAL table with one
  transaction per row (an unchained, unsigned log), same database settings.
- concurrency: ``PROCS`` processes appending ``PER_PROC`` entries each to one
  ``state.db`` as fast as they can; total appends per second, and the chain
  verified afterwards (no fork, no gap).
- verification: ``engine.audit.logverify.verify`` over the whole log, entries per second.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_calllog.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine import admin
from engine.admin.seed import create_repository
from engine.audit import calllog, logverify, redact
from engine.auth import signkeys
from engine.service import Engine
from engine.service import recording as service_module
from engine.state.sqlite import open_store

ROUNDS = 7
CALLS = 400
APPENDS = 2000
PROCS = 4
PER_PROC = 1000
TARGET_EXTRA_MS = 0.25  # what the log may add to one call


def _per_call_ms(engine: Engine, token: str, tool: str, args: dict[str, Any],
                 listed: str) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        answer = engine.invoke(token, tool, args, session="bench", offered_catalog_hash=listed)
        if not answer["ok"]:
            raise SystemExit(f"{tool} failed: {answer}")
    return (time.perf_counter() - start) / CALLS * 1000


def _record(i: int) -> calllog.CallRecord:
    return calllog.CallRecord(
        time=int(time.time()), agent="bench", chain=("0" * 32,), session="bench",
        tool="read_file", arguments=redact.redact_arguments({"path": f"src/f{i % 50}.py"}),
        decision="allowed", code=None, policy_hash="sha256:" + "1" * 64,
        catalog_hash="sha256:" + "2" * 64,
    )


def _peer_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, time INTEGER, agent TEXT,"
               " entry BLOB)")
    return db


def _appender(home: str, count: int, start: Any) -> None:
    store = open_store(home)
    signer = calllog.LogSigner(home)
    start.wait()
    for i in range(count):
        calllog.append(store, signer, _record(i))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="chit-bench-log-"))
    try:
        return _run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(tmp: Path) -> int:
    repo, home = tmp / "repo", tmp / "home"
    create_repository(repo, {f"src/f{i}.py": f"X = {i}\n".encode() for i in range(50)})
    admin.init_home(home)
    token = admin.mint_token(home, agent="bench", operations=["read", "write"],
                             paths=["src/**"], ttl_seconds=3600)["token"]
    engine = Engine(home, repo)
    listed = engine.offer(token)["catalog_hash"]
    calls = {"status": {}, "write_file": {"path": "src/w.py", "content": "x" * 1024}}

    real_append = calllog.append
    results: dict[str, dict[str, list[float]]] = {t: {"log": [], "off": []} for t in calls}
    for r in range(ROUNDS):
        for mode in (("log", "off") if r % 2 == 0 else ("off", "log")):
            service_module.calllog.append = (  # type: ignore[attr-defined]
                real_append if mode == "log" else (lambda *_a, **_k: 0)
            )
            for tool, args in calls.items():
                results[tool][mode].append(_per_call_ms(engine, token, tool, args, listed))
    service_module.calllog.append = real_append  # type: ignore[attr-defined]

    store = open_store(home)
    signer = calllog.LogSigner(home)
    peer = _peer_db(tmp / "peer.db")
    append_us, peer_us = [], []
    for r in range(ROUNDS):
        records = [_record(i) for i in range(APPENDS)]
        entries = [real_append.__globals__["cbor"].encode({"i": i, "pad": "x" * 300})
                   for i in range(APPENDS)]
        order = ("chit", "peer") if r % 2 == 0 else ("peer", "chit")
        for side in order:
            start = time.perf_counter()
            if side == "chit":
                for rec in records:
                    calllog.append(store, signer, rec)
                append_us.append((time.perf_counter() - start) / APPENDS * 1e6)
            else:
                for data in entries:
                    peer.execute("BEGIN IMMEDIATE")
                    peer.execute("INSERT INTO log (time, agent, entry) VALUES (?, ?, ?)",
                                 (0, "bench", data))
                    peer.execute("COMMIT")
                peer_us.append((time.perf_counter() - start) / APPENDS * 1e6)

    before = sum(1 for _ in store.log_rows())
    ctx = mp.get_context("spawn")
    gate = ctx.Event()
    procs = [ctx.Process(target=_appender, args=(str(home), PER_PROC, gate))
             for _ in range(PROCS)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # imports and set-up outside the window
    start = time.perf_counter()
    gate.set()
    for p in procs:
        p.join()
    concurrent_s = time.perf_counter() - start
    if any(p.exitcode for p in procs):
        raise SystemExit("an appender failed")

    public = signkeys.load_public_keys(signkeys.export_public_keys(home))
    start = time.perf_counter()
    report = logverify.verify(store.log_rows(), store.log_head(), public)
    verify_s = time.perf_counter() - start
    if not report["ok"] or report["entries"] != before + PROCS * PER_PROC:
        raise SystemExit(f"the log does not verify after concurrent appends: {report}")

    med = statistics.median
    print(f"machine: {platform.machine()}, {mp.cpu_count()} cores, python "
          f"{platform.python_version()}")
    for tool in calls:
        on, off = med(results[tool]["log"]), med(results[tool]["off"])
        print(f"{tool:11} per call ms: with log {on:.3f}, without {off:.3f}, "
              f"log adds {on - off:.3f} ms ({(on - off) / off:.0%})")
    a, p = med(append_us), med(peer_us)
    print(f"one append: chit {a:.1f} us, bare SQLite insert {p:.1f} us, chit / peer {a / p:.2f}")
    print(f"{PROCS} processes x {PER_PROC} appends: {PROCS * PER_PROC / concurrent_s:.0f} "
          f"appends/s; chain verified ({report['entries']} entries)")
    print(f"verify: {report['entries'] / verify_s:.0f} entries/s")
    extra = med(results["status"]["log"]) - med(results["status"]["off"])
    ok = extra <= TARGET_EXTRA_MS
    print(f"target: the log adds at most {TARGET_EXTRA_MS} ms to a call: "
          f"{'met' if ok else 'MISSED'} ({extra:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
