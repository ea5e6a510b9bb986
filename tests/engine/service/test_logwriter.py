"""The call-log writer: call order kept, durable entries first, nothing dropped, fail closed.

A real SQLite store in a real chit home, real keys; the store is made to fail by
a real second connection holding the write lock.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from engine import admin
from engine.audit import calllog, redact
from engine.limits import LIMITS
from engine.service.logwriter import LogWriteError, LogWriter
from engine.state import open_store


def _record(n: int, session: str = "s") -> calllog.CallRecord:
    return calllog.CallRecord(
        time=1_796_000_000 + n, agent="w", chain=("0" * 32,), session=session,
        tool="read_file", arguments=redact.redact_arguments({"path": f"src/{n}.py"}),
        decision="allowed", code=None, policy_hash="sha256:" + "1" * 64,
        catalog_hash="sha256:" + "2" * 64,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    admin.init_home(tmp_path / "home")
    return tmp_path / "home"


def _writer(home: Path, **kw: int) -> LogWriter:
    return LogWriter(open_store(home), calllog.LogSigner(home), lambda: 1_796_000_000, **kw)


def _logged(home: Path) -> list[dict[str, object]]:
    return list(admin.call_log_entries(home))


def test_entries_are_written_in_call_order_from_many_threads(home: Path) -> None:
    writer = _writer(home)

    def calls(session: str) -> None:
        for n in range(200):
            writer.write(_record(n, session), durable=n % 3 == 0)

    threads = [threading.Thread(target=calls, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert writer.flush()
    log = _logged(home)
    assert [e["seq"] for e in log] == list(range(1, 801))
    for i in range(4):
        mine = [e["arguments"]["path"] for e in log if e["session"] == f"t{i}"]
        assert mine == [f"src/{n}.py" for n in range(200)]
    writer.close()


def test_a_durable_entry_is_committed_before_write_returns(home: Path) -> None:
    writer = _writer(home)
    for n in range(5):
        writer.write(_record(n), durable=False)
    writer.write(_record(5), durable=True)
    # Read through another connection, without waiting: all six are there.
    db = sqlite3.connect(home / "state.db")
    assert db.execute("SELECT COUNT(*) FROM call_log").fetchone()[0] == 6
    writer.close()


def test_queued_entries_are_durable_within_100_ms(home: Path) -> None:
    writer = _writer(home)
    db = sqlite3.connect(home / "state.db")
    writer.write(_record(0), durable=False)
    deadline = time.monotonic() + 0.1
    while time.monotonic() < deadline:
        if db.execute("SELECT COUNT(*) FROM call_log").fetchone()[0] == 1:
            break
        time.sleep(0.002)
    assert db.execute("SELECT COUNT(*) FROM call_log").fetchone()[0] == 1
    writer.close()


def test_close_writes_the_queue_and_signs_a_last_checkpoint(home: Path) -> None:
    writer = _writer(home)
    for n in range(30):
        writer.write(_record(n), durable=False)
    writer.close()
    store = open_store(home)
    tree = store.log_tree()
    assert tree is not None and tree.size == 30 and tree.signed == 30
    assert [c.size for c in store.log_checkpoints()][-1] == 30
    with pytest.raises(LogWriteError, match="closed"):
        writer.write(_record(31), durable=False)
    writer.close()  # idempotent


def test_a_checkpoint_is_signed_within_a_second_while_entries_arrive(home: Path) -> None:
    writer = _writer(home)
    writer.write(_record(0), durable=True)
    store = open_store(home)
    deadline = time.monotonic() + LIMITS.calllog_checkpoint_seconds + 1.0
    while time.monotonic() < deadline:
        tree = store.log_tree()
        if tree is not None and tree.signed == 1:
            break
        time.sleep(0.02)
    tree = store.log_tree()
    assert tree is not None and tree.signed == 1
    writer.close()


def test_a_failing_store_fails_calls_closed_and_loses_no_entry(home: Path) -> None:
    """Threat: calls answered while nothing records them. A row put behind the engine's
    back where its next entry goes makes every append fail until it is removed; the
    entries wait in the queue meanwhile and are written once the store recovers."""
    writer = _writer(home)
    writer.write(_record(0), durable=True)
    db = sqlite3.connect(home / "state.db", isolation_level=None)
    db.execute("INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (2, 0, 'x', x'', x'')")
    with pytest.raises(LogWriteError, match="could not be written"):
        writer.write(_record(1), durable=True)
    # While the writer is failing, a read-only call waits for its own entry too.
    with pytest.raises(LogWriteError, match="could not be written"):
        writer.write(_record(2), durable=False)
    db.execute("DELETE FROM call_log WHERE seq = 2")
    assert writer.flush()
    assert [e["arguments"]["path"] for e in _logged(home)] == [
        "src/0.py", "src/1.py", "src/2.py"]
    writer.close()


def test_a_full_queue_makes_calls_wait_rather_than_drop_entries(home: Path) -> None:
    writer = _writer(home, queue_entries=4, batch_entries=2)
    blocker = sqlite3.connect(home / "state.db", isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    for n in range(4):
        writer.write(_record(n), durable=False)
    done = threading.Event()

    def fifth() -> None:
        try:
            writer.write(_record(4), durable=False)
        except LogWriteError:
            pass
        done.set()

    waiter = threading.Thread(target=fifth)
    waiter.start()
    assert not done.wait(0.3)  # the queue is full: the fifth call waits
    blocker.execute("ROLLBACK")
    waiter.join(timeout=30)
    assert writer.flush()
    assert len(_logged(home)) == 5
    writer.close()


def test_a_forked_child_writes_its_own_entries(home: Path) -> None:
    """A child forked while its parent's writer runs gets a writer of its own, not a copy
    waiting on a thread that does not exist in it."""
    import os

    writer = _writer(home)
    writer.write(_record(0), durable=True)  # the parent's thread is running
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            writer.write(_record(1, "child"), durable=True)
            writer.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    writer.close()
    assert [e["session"] for e in _logged(home)] == ["s", "child"]
