"""The call log's cost: what it adds to a call, an append against a bare SQLite insert, verify.

Set-up (untimed): a fresh temporary repository seeded with a few files on
``main``, a chit home (``admin.init_home``), one ``Engine`` and one agent token.

Measured:

- per call: ``Engine.invoke`` of ``status`` (a cheap read: its entry is queued
  for the background writer) and of ``write_file`` (1 KiB of content: its entry
  is durable before the answer) with the call log, and the same calls on the
  same engine with the writer's ``write`` replaced by a no-op; the difference is
  what the log adds to a call. Rounds alternate which goes first; medians.
- one append: ``engine.audit.tlog.append`` of one entry (redacted arguments
  already made: encode the entry, hash it into the tree's frontier, one ``BEGIN
  IMMEDIATE`` transaction reading the tree head, inserting the row and moving
  the head; a checkpoint signed every 1,000 entries), against the peer: the same
  entry bytes inserted into a plain WAL table with one transaction per row (an
  unchained, unsigned log), same database settings; and ``append`` of batches of
  ``BATCH`` entries, per entry, as the background writer does under load.
- concurrency: ``PROCS`` processes appending ``PER_PROC`` entries each to one
  ``state.db`` as fast as they can; total appends per second, and the log
  verified afterwards (no fork, no gap).
- verification: ``engine.audit.logverify.verify`` over a log of ``VERIFY_ENTRIES``
  entries (appended in batches), entries per second (target: at least
  ``TARGET_VERIFY_PER_S``).

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
from engine.audit import calllog, logverify, redact, tlog
from engine.auth import cbor, signkeys
from engine.service import Engine
from engine.state.sqlite import open_store

ROUNDS = 7
CALLS = 400
APPENDS = 2000
PROCS = 4
PER_PROC = 1000
BATCH = 100
VERIFY_ENTRIES = 100_000
TARGET_EXTRA_MS = 0.1  # what the log may add to a read-only call (its entry is queued)
TARGET_DURABLE_EXTRA_MS = 0.25  # ... and to a state-changing one (durable before the answer)
TARGET_VERIFY_PER_S = 100_000


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
        tlog.append(store, [_record(i)], signer, now=int(time.time()))


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

    writer = engine._log
    real_write = writer.write
    results: dict[str, dict[str, list[float]]] = {t: {"log": [], "off": []} for t in calls}
    for r in range(ROUNDS):
        for mode in (("log", "off") if r % 2 == 0 else ("off", "log")):
            writer.write = (  # type: ignore[method-assign]
                real_write if mode == "log" else (lambda *_a, **_k: None)
            )
            for tool, args in calls.items():
                results[tool][mode].append(_per_call_ms(engine, token, tool, args, listed))
            engine.flush_log()
    writer.write = real_write  # type: ignore[method-assign]
    engine.close()

    store = open_store(home)
    signer = calllog.LogSigner(home)
    peer = _peer_db(tmp / "peer.db")
    append_us, batch_us, peer_us = [], [], []
    for r in range(ROUNDS):
        records = [_record(i) for i in range(APPENDS)]
        entries = [cbor.encode({"i": i, "pad": "x" * 300}) for i in range(APPENDS)]
        order = ("chit", "batch", "peer") if r % 2 == 0 else ("peer", "batch", "chit")
        for side in order:
            start = time.perf_counter()
            if side == "chit":
                for rec in records:
                    tlog.append(store, [rec], signer, now=int(time.time()))
                append_us.append((time.perf_counter() - start) / APPENDS * 1e6)
            elif side == "batch":
                for i in range(0, APPENDS, BATCH):
                    tlog.append(store, records[i:i + BATCH], signer, now=int(time.time()))
                batch_us.append((time.perf_counter() - start) / APPENDS * 1e6)
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

    def verify() -> dict[str, Any]:
        return logverify.verify(store.log_rows(), store.log_head(), public,
                                tree=store.log_tree(), checkpoints=store.log_checkpoints())

    report = verify()
    if not report["ok"] or report["entries"] != before + PROCS * PER_PROC:
        raise SystemExit(f"the log does not verify after concurrent appends: {report}")
    records = [_record(i) for i in range(1000)]
    while report["entries"] < VERIFY_ENTRIES:
        tlog.append(store, records, signer, now=int(time.time()))
        report["entries"] += len(records)
    tlog.checkpoint(store, signer, now=int(time.time()))
    verify_runs = []
    for _ in range(3):
        start = time.perf_counter()
        report = verify()
        verify_runs.append(time.perf_counter() - start)
        if not report["ok"]:
            raise SystemExit(f"the log does not verify: {report['findings'][:3]}")
    verify_s = min(verify_runs)

    med = statistics.median
    print(f"machine: {platform.machine()}, {mp.cpu_count()} cores, python "
          f"{platform.python_version()}")
    for tool in calls:
        on, off = med(results[tool]["log"]), med(results[tool]["off"])
        print(f"{tool:11} per call ms: with log {on:.3f}, without {off:.3f}, "
              f"log adds {on - off:.3f} ms ({(on - off) / off:.0%})")
    a, b, p = med(append_us), med(batch_us), med(peer_us)
    print(f"one append: chit {a:.1f} us, bare SQLite insert {p:.1f} us, chit / peer {a / p:.2f};"
          f" in batches of {BATCH}: {b:.1f} us per entry")
    print(f"{PROCS} processes x {PER_PROC} appends: {PROCS * PER_PROC / concurrent_s:.0f} "
          f"appends/s; chain verified ({report['entries']} entries)")
    rate = report["entries"] / verify_s
    print(f"verify: {report['entries']} entries in {verify_s:.3f} s: {rate:.0f} entries/s "
          f"(best of 3)")
    extra = med(results["status"]["log"]) - med(results["status"]["off"])
    ok = extra <= TARGET_EXTRA_MS
    print(f"target: the log adds at most {TARGET_EXTRA_MS} ms to a read-only call: "
          f"{'met' if ok else 'MISSED'} ({extra:.3f} ms)")
    extra = med(results["write_file"]["log"]) - med(results["write_file"]["off"])
    ok = extra <= TARGET_DURABLE_EXTRA_MS
    print(f"target: the log adds at most {TARGET_DURABLE_EXTRA_MS} ms to a state-changing call: "
          f"{'met' if ok else 'MISSED'} ({extra:.3f} ms)")
    print(f"target: verify at least {TARGET_VERIFY_PER_S} entries/s: "
          f"{'met' if rate >= TARGET_VERIFY_PER_S else 'MISSED'} ({rate:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
