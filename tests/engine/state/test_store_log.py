"""The call log in the state store, on both stores: appends serialised on the tree head.

Real keys, the real tree code (engine/audit/tlog.py) and the real verifier
(engine/audit/logverify.py) over what each store reads back.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest

from engine import admin
from engine.audit import calllog, logverify, redact, tlog
from engine.auth import signkeys
from engine.errors import StoreError
from engine.state import LogBatch, LogEntry, LogTree, Store
from tests.engine.state.storekit import MakeStore, raw


def record(n: int, agent: str = "alice") -> calllog.CallRecord:
    return calllog.CallRecord(
        time=1_796_000_000 + n, agent=agent, chain=("0" * 32,), session="s",
        tool="read_file", arguments=redact.redact_arguments({"path": f"src/{n}.py"}),
        decision="allowed", code=None, policy_hash="sha256:" + "1" * 64,
        catalog_hash="sha256:" + "2" * 64,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    admin.init_home(tmp_path / "home")
    return tmp_path / "home"


def verified(store: Store, home: Path) -> dict[str, Any]:
    keys = signkeys.load_public_keys(admin.export_public(home))
    return logverify.verify(store.log_rows(), store.log_head(), keys, tree=store.log_tree(),
                            checkpoints=store.log_checkpoints())


def test_an_empty_log_has_nothing(store: Store) -> None:
    assert store.log_tree() is None
    assert list(store.log_checkpoints()) == []
    assert store.log_head() is None
    assert list(store.log_rows()) == []
    assert store.append_log(lambda tree: None) is None


def test_appends_read_back_with_sqlite_types_and_verify(
    make_store: MakeStore, home: Path
) -> None:
    store, other = make_store(), make_store()
    signer = calllog.LogSigner(home)
    tree = tlog.append(store, [record(n) for n in range(3)], signer, now=5, checkpoint_entries=2)
    tree = tlog.append(other, [record(3, "bob"), record(4)], signer, now=6, checkpoint_entries=2)
    assert other.log_tree() == store.log_tree() == tree
    assert tree.size == 5 and tree.signed == 5 and tree.signed_at == 6
    rows = list(store.log_rows())
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    for row in rows:
        assert type(row.seq) is int and type(row.time) is int and type(row.agent) is str
        assert type(row.entry) is bytes and row.sig == b""
    assert tree.last == hashlib.sha256(rows[-1].entry).digest()
    stored = store.log_tree()
    assert stored is not None
    assert type(stored.last) is bytes and type(stored.frontier) is bytes
    assert [(c.size, c.time) for c in store.log_checkpoints()] == [(3, 5), (5, 6)]
    assert all(type(c.note) is str for c in store.log_checkpoints())
    report = verified(other, home)
    assert report["ok"], report["findings"]
    assert report["entries"] == 5 and report["checkpoint"]["size"] == 5


def test_rows_are_filtered_and_paged(store: Store, home: Path) -> None:
    signer = calllog.LogSigner(home)
    tlog.append(store, [record(n, "bob" if n % 3 == 0 else "alice") for n in range(10)], signer,
                now=1)
    assert [r.seq for r in store.log_rows(batch=3)] == list(range(1, 11))
    assert [r.seq for r in store.log_rows(agent="bob", batch=2)] == [1, 4, 7, 10]
    assert [r.seq for r in store.log_rows(since=1_796_000_005)] == [6, 7, 8, 9, 10]
    assert [r.seq for r in store.log_rows(agent="bob", since=1_796_000_005, batch=1)] == [7, 10]
    assert list(store.log_rows(agent="nobody")) == []


def test_compose_reads_the_log_inside_the_append(store: Store, home: Path) -> None:
    signer = calllog.LogSigner(home)
    tlog.append(store, [record(0), record(1)], signer, now=1)
    seen: list[Any] = []

    def compose(tree: LogTree | None) -> LogBatch | None:
        seen.append((tree, [r.seq for r in store.log_rows()], store.log_head()))
        return None

    before = store.log_tree()
    assert store.append_log(compose) == before
    # A store may call compose twice: from the head it last wrote, then under
    # the head's lock. Every call saw the stored head and the log as it is.
    assert seen and all(call == (before, [1, 2], None) for call in seen)


def test_a_batch_that_does_not_number_on_writes_nothing(store: Store, home: Path) -> None:
    tree = tlog.append(store, [record(0)], calllog.LogSigner(home), now=1)

    def compose(head: LogTree | None) -> LogBatch:
        assert head == tree
        return LogBatch((LogEntry(5, 1, "x", b"e"),), tree)

    with pytest.raises(ValueError):
        store.append_log(compose)
    assert store.log_tree() == tree
    assert [r.seq for r in store.log_rows()] == [1]


def test_a_sequence_number_taken_behind_the_store_fails_the_append_whole(
    store: Store, store_url: str, home: Path
) -> None:
    signer = calllog.LogSigner(home)
    tree = tlog.append(store, [record(0)], signer, now=1)
    raw(store_url, "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (3, 0, 'x', ?, ?)",
        (b"forged", b""))
    with pytest.raises(StoreError):
        tlog.append(store, [record(1), record(2)], signer, now=2, checkpoint_entries=1)
    assert store.log_tree() == tree  # head, rows and checkpoints as they were
    assert [r.seq for r in store.log_rows()] == [1, 3]
    assert list(store.log_checkpoints()) == []


def test_a_malformed_tree_head_fails_reads_and_appends(
    store: Store, store_url: str, home: Path
) -> None:
    signer = calllog.LogSigner(home)
    tlog.append(store, [record(0)], signer, now=1)
    if store_url.startswith("sqlite://"):
        raw(store_url, "UPDATE call_log_tree SET size = 'one'")
    else:
        raw(store_url, "UPDATE call_log_tree SET frontier = NULL")
    with pytest.raises(StoreError):
        store.log_tree()
    with pytest.raises(StoreError):
        tlog.append(store, [record(1)], signer, now=2)
    assert [r.seq for r in store.log_rows()] == [1]


def test_a_deleted_tree_head_starts_over_from_the_rows(
    store: Store, store_url: str, home: Path
) -> None:
    signer = calllog.LogSigner(home)
    first = tlog.append(store, [record(0), record(1)], signer, now=1)
    raw(store_url, "DELETE FROM call_log_tree")
    assert store.log_tree() is None
    tree = tlog.append(store, [record(2)], signer, now=2)
    assert tree.size == 3 and tree.origin != first.origin  # a new head over every row
    assert [r.seq for r in store.log_rows()] == [1, 2, 3]


def test_appends_from_threads_of_several_stores_never_fork_the_tree(
    make_store: MakeStore, home: Path
) -> None:
    stores = [make_store() for _ in range(4)]
    signer = calllog.LogSigner(home)
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def run(k: int) -> None:
        barrier.wait()
        try:
            for n in range(10):
                tlog.append(stores[k], [record(k * 100 + n), record(k * 100 + n + 50)], signer,
                            now=n, checkpoint_entries=7)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    tree = stores[0].log_tree()
    assert tree is not None and tree.size == 80
    report = verified(stores[1], home)
    assert report["ok"], report["findings"]
    assert report["entries"] == 80


def test_an_append_after_another_stores_continues_from_the_stored_head(
    make_store: MakeStore, home: Path
) -> None:
    """Threat: an engine appending from the head it last wrote, over a peer's newer entries."""
    store, other = make_store(), make_store()
    signer = calllog.LogSigner(home)
    tlog.append(store, [record(0)], signer, now=1)
    moved = tlog.append(other, [record(1), record(2)], signer, now=2)
    heads: list[LogTree | None] = []

    def compose(tree: LogTree | None) -> LogBatch | None:
        heads.append(tree)
        return None

    assert store.append_log(compose) == moved
    assert heads[-1] == moved  # the batch that counts is made from the stored head
    tree = tlog.append(store, [record(3)], signer, now=3, checkpoint_entries=1)
    assert tree.size == 4 and tree.signed == 4
    assert [r.seq for r in store.log_rows()] == [1, 2, 3, 4]
    report = verified(other, home)
    assert report["ok"], report["findings"]
    assert report["entries"] == 4 and report["checkpoint"]["size"] == 4


def test_a_checkpoint_alone_moves_only_the_signed_head(make_store: MakeStore, home: Path) -> None:
    store, other = make_store(), make_store()
    signer = calllog.LogSigner(home)
    tlog.append(store, [record(0), record(1)], signer, now=1)
    tlog.append(other, [record(2)], signer, now=2)
    tree = tlog.checkpoint(store, signer, now=3)
    assert tree is not None and tree.size == tree.signed == 3 and tree.signed_at == 3
    assert tlog.checkpoint(store, signer, now=4) == tree  # nothing new: nothing signed
    assert [(c.size, c.time) for c in store.log_checkpoints()] == [(3, 3)]
    assert [r.seq for r in store.log_rows()] == [1, 2, 3]
    report = verified(other, home)
    assert report["ok"], report["findings"]
