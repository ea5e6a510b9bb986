"""Durable state moved between stores (``export_durable`` / ``import_durable``), every direction.

Threats: switching a home's store and losing revocations (revoked tokens work
again), delegations, the freeze, the replay cache (a JWT exchanged twice) or
the call log (an audit trail silently restarted); a copy into a store in use
mixing two histories; a copy that fails half way leaving half a state; a
table or column name taken from input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import admin
from engine.audit import tlog
from engine.audit.calllog import LogSigner
from engine.errors import StoreError
from engine.state import Delegation, Intent, RateWindow, Store, open_store
from engine.state.approvals import Approval, Operator
from tests.engine.state.storekit import raw
from tests.engine.state.test_store_log import record, verified
from tests.pgserver import PostgresServer

NOW = 1_800_000_000
# What a copy must carry, written here independently of the code under test:
# each durable table, its columns and its order; the PostgreSQL tree head's row
# exists from the start with no origin.
DURABLE = {
    "revocations": ("id, revoked_at, reason", "id", ""),
    "delegations": ("child_id, parent_id, parent_agent, child_agent, issued_at, expires_at, "
                    "scope", "child_id", ""),
    "engine_mode": ("id, frozen, reason, changed_at", "id", ""),
    "exchange_jti": ("issuer, jti, used_at, keep_until", "issuer, jti", ""),
    "call_log": ("seq, time, agent, entry, sig", "seq", ""),
    "call_log_checkpoint": ("size, time, note", "size", ""),
    "call_log_tree": ("id, origin, size, last, frontier, signed, signed_at", "id",
                      " WHERE origin IS NOT NULL"),
    "call_log_head": ("id, seq, hash, head, sig", "id", ""),
    "operators": ("key_id, name, public, groups, added_at, removed_at", "key_id", ""),
    "approvals": ("id, request, tool, agent, token_id, session, repo, asked, approvers, reason, "
                  "rule, created_at, expires_at, state, decision, decided_by, decided_at, note, "
                  "used_at", "id", ""),
}
EPHEMERAL = ("intents", "staged_paths", "rate_events", "engine_sessions")


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every durable row of the store at ``url``, read behind its back."""
    return {
        table: [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in raw(url, f"SELECT {cols} FROM {table}{where} ORDER BY {key}")]
        for table, (cols, key, where) in DURABLE.items()
    }


@pytest.fixture
def urls(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Makes state URLs of a kind: a new SQLite file, or a new PostgreSQL database."""
    with contextlib.ExitStack() as stack:
        names = iter(range(100))

        def make(kind: str) -> str:
            if kind == "sqlite":
                return f"sqlite://{tmp_path}/store-{next(names)}.db"
            server: PostgresServer = request.getfixturevalue("postgres")
            return stack.enter_context(server.database())

        yield make


@pytest.fixture
def home(tmp_path: Path) -> Path:
    admin.init_home(tmp_path / "home")
    return tmp_path / "home"


def opened(url: str, stores: list[Store], home: Path) -> Store:
    store = open_store(home, url)
    stores.append(store)
    return store


@pytest.fixture
def stores() -> Iterator[list[Store]]:
    kept: list[Store] = []
    yield kept
    for store in kept:
        store.close()


def fill(store: Store, url: str, home: Path) -> None:
    """Every kind of durable row, a log of both forms, and ephemeral rows besides."""
    store.revoke("a" * 32, now=NOW - 5, reason="leaked")
    store.revoke("b" * 32, now=NOW - 4)
    for child, issued in (("c" * 32, NOW - 9), ("d" * 32, NOW - 8)):
        store.record_delegation(Delegation(child, "e" * 32, "alice", f"alice.{child[0]}",
                                           issued, NOW + 900, {"ops": ["read"], "paths": ["**"],
                                                               "delegable": False}))
    store.set_freeze(True, now=NOW - 3, reason="incident 7")
    assert store.claim_jti("https://idp.example", "live", keep_until=NOW + 60, now=NOW - 2)
    assert store.claim_jti("https://idp.example", "old", keep_until=NOW - 1, now=NOW - 2)
    # A log of the first form: signed rows and the chain head (as an old chit wrote them).
    raw(url, "INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (1, 7, 'old', ?, ?)",
        (b"\x00first entry\xff", b"\x01" * 64))
    raw(url, "INSERT INTO call_log_head (id, seq, hash, head, sig) VALUES (1, 1, ?, ?, ?)",
        (b"\x02" * 32, b"head bytes", b"\x03" * 64))
    store.put_intent(Intent("/repo", "s1", "f" * 32, "alice", ("src",), NOW + 60), now=NOW)
    store.put_intent(Intent("/repo", "s1", "f" * 32, "alice", ("src/a.py",), NOW + 60), now=NOW,
                     staged=True)
    assert store.admit_rate([RateWindow("k", 5, 60)], now=float(NOW)) is None
    store.place_session("sess", "worker-1", now=NOW)
    store.add_operator(Operator("alice", "a" * 32, b"\x00" * 31 + b"\xff", ("release",), NOW))
    store.add_operator(Operator("bob", "b" * 32, b"\x01" * 32, (), NOW))
    store.remove_operator("bob", now=NOW + 1)
    approval = Approval("apr_" + "a" * 26, "c" * 64, "commit", "alice", "d" * 32, "s1", "app",
                        {"tool": "commit", "paths": ["deploy/x"]}, ("alice",), "why",
                        "approval[0]", NOW, NOW + 600)
    store.create_approval(approval, now=NOW)
    store.decide_approval(approval.id, state="approved", decision=b"\x00\xffsigned",
                          decided_by="alice", decided_at=NOW + 1, note="fine")


def fill_log(store: Store, home: Path) -> None:
    signer = LogSigner(home)
    tlog.append(store, [record(n) for n in range(5)], signer, now=NOW, checkpoint_entries=2)
    tlog.append(store, [record(5, "bob")], signer, now=NOW + 1, checkpoint_entries=1)


def copy(source: Store, destination: Store, now: int = NOW) -> dict[str, int]:
    with contextlib.closing(source.export_durable(now=now)) as rows:
        return destination.import_durable(rows, now=now)


DIRECTIONS = [("sqlite", "postgresql"), ("postgresql", "sqlite"), ("sqlite", "sqlite"),
              ("postgresql", "postgresql")]


@pytest.mark.parametrize(("src_kind", "dst_kind"), DIRECTIONS)
def test_every_durable_row_is_copied_byte_for_byte(
    urls: Any, stores: list[Store], home: Path, src_kind: str, dst_kind: str
) -> None:
    src_url, dst_url = urls(src_kind), urls(dst_kind)
    source = opened(src_url, stores, home)
    fill(source, src_url, home)
    destination = opened(dst_url, stores, home)
    before = destination.latest_change()
    counts = copy(source, destination)
    expected = dump(src_url)
    expected["exchange_jti"] = [r for r in expected["exchange_jti"] if r[1] == "live"]
    assert dump(dst_url) == expected
    assert counts == {table: len(rows) for table, rows in expected.items()}
    assert counts["exchange_jti"] == 1 and counts["call_log"] == 1 and counts["call_log_head"] == 1
    for table in EPHEMERAL:  # not copied: they start afresh
        assert raw(dst_url, f"SELECT COUNT(*) FROM {table}") == [(0,)]
    # Read back through the contract on the destination, as engines will.
    assert destination.any_revoked(["b" * 32])
    assert destination.call_state(["a" * 32]) == (True, source.freeze_state())
    assert destination.freeze_state().reason == "incident 7"
    assert destination.delegations() == source.delegations()
    assert destination.claim_jti("https://idp.example", "live", keep_until=NOW + 60,
                                 now=NOW) is False  # still a replay
    assert destination.log_head() == source.log_head()
    # Announced on the destination's feed, so engines on it look again.
    assert destination.wait_change(before, 0) == before + 2
    assert [k for (k,) in raw(dst_url, "SELECT kind FROM changes ORDER BY id")][-2:] == [
        "revocation", "freeze"]


@pytest.mark.parametrize(("src_kind", "dst_kind"), DIRECTIONS[:2])
def test_a_copied_log_verifies_with_the_same_tree_and_grows_on(
    urls: Any, stores: list[Store], home: Path, src_kind: str, dst_kind: str
) -> None:
    src_url, dst_url = urls(src_kind), urls(dst_kind)
    source = opened(src_url, stores, home)
    fill_log(source, home)
    destination = opened(dst_url, stores, home)
    copy(source, destination)
    report = verified(destination, home)
    assert report == verified(source, home)
    assert report["ok"] and report["entries"] == 6 and report["checkpoint"]["size"] == 6
    assert destination.log_tree() == source.log_tree()
    assert list(destination.log_checkpoints()) == list(source.log_checkpoints())
    # The destination continues the same tree (same origin) rather than a new one.
    tlog.append(destination, [record(6)], LogSigner(home), now=NOW + 2, checkpoint_entries=1)
    grown = verified(destination, home)
    assert grown["ok"] and grown["entries"] == 7
    tree = destination.log_tree()
    assert tree is not None and tree.origin == source.log_tree().origin  # type: ignore[union-attr]


@pytest.mark.parametrize("held", list(DURABLE))
def test_a_destination_holding_any_durable_state_is_refused_and_unchanged(
    urls: Any, stores: list[Store], home: Path, store_url: str, held: str
) -> None:
    """Threat: a copy into a store in use, mixing two histories (two call logs in one)."""
    src_url = urls("sqlite")
    source = opened(src_url, stores, home)
    fill(source, src_url, home)
    fill_log(source, home)
    destination = opened(store_url, stores, home)
    one_row = {
        "revocations": lambda: destination.revoke("9" * 32, now=NOW),
        "delegations": lambda: destination.record_delegation(
            Delegation("9" * 32, "8" * 32, "x", "x.y", NOW, NOW + 5, {})),
        "engine_mode": lambda: destination.set_freeze(False, now=NOW),
        "exchange_jti": lambda: destination.claim_jti("i", "j", keep_until=NOW - 100, now=NOW),
        "call_log": lambda: raw(store_url, "INSERT INTO call_log (seq, time, agent, entry, sig)"
                                " VALUES (9, 9, 'x', ?, ?)", (b"e", b"")),
        "call_log_checkpoint": lambda: raw(store_url, "INSERT INTO call_log_checkpoint"
                                           " (size, time, note) VALUES (1, 1, 'n')"),
        "call_log_tree": lambda: raw(store_url, "UPDATE call_log_tree SET origin = 'o', size = 0,"
                                     " last = ?, frontier = ?, signed = 0, signed_at = 0",
                                     (b"", b""))
        if store_url.startswith("postgresql") else raw(
            store_url, "INSERT INTO call_log_tree VALUES (1, 'o', 0, ?, ?, 0, 0)", (b"", b"")),
        "call_log_head": lambda: raw(store_url, "INSERT INTO call_log_head VALUES (1, 1, ?, ?, ?)",
                                     (b"h", b"h", b"s")),
        "operators": lambda: destination.add_operator(
            Operator("zed", "9" * 32, b"\x09" * 32, (), NOW)),
        "approvals": lambda: destination.create_approval(
            Approval("apr_" + "z" * 26, "9" * 64, "commit", "x", "8" * 32, "s", "r", {}, ("zed",),
                     "", "approval[0]", NOW, NOW + 60), now=NOW),
    }
    one_row[held]()
    assert destination.durable_state() == {held}
    before, position = dump(store_url), destination.latest_change()
    with pytest.raises(ValueError, match=f"already holds durable state \\({held}\\)"):
        copy(source, destination)
    assert dump(store_url) == before
    assert destination.latest_change() == position


def test_an_empty_store_holds_no_durable_state_and_a_filled_one_says_what(
    store: Store, store_url: str, home: Path
) -> None:
    assert store.durable_state() == frozenset()
    fill(store, store_url, home)
    assert store.durable_state() == {"revocations", "delegations", "engine_mode", "exchange_jti",
                                     "call_log", "call_log_head", "operators", "approvals"}
    fill_log(store, home)
    assert "call_log_tree" in store.durable_state()


@pytest.mark.parametrize(
    "rows",
    [
        [("revocations", ("a" * 32, 1, "")), ("chit_schema", (1, 99))],  # not a durable table
        [("revocations", ("a" * 32, 1, "")), ("revocations; DROP TABLE call_log", ("x", 1, ""))],
        [("revocations", ("a" * 32, 1, "")), ("revocations", ("b" * 32, "1", ""))],  # a type
        [("revocations", ("a" * 32, 1, "")), ("revocations", ("b" * 32, True, ""))],
        [("call_log", (1, 1, "a", "text, not bytes", b""))],
        [("call_log", (1, 1, "a", b"e", None))],
        [("engine_mode", (1, 1, "r"))],  # a column short
        [("revocations", ("a" * 32, 1, "", "extra"))],
    ],
)
def test_rows_naming_another_table_or_malformed_are_refused_and_nothing_is_written(
    store: Store, store_url: str, rows: list[tuple[str, tuple[Any, ...]]]
) -> None:
    """Threat: a table or column name from input reaching SQL; half a copy kept."""
    before = store.latest_change()
    with pytest.raises(ValueError, match=r"durable table|malformed"):
        store.import_durable(iter(rows), now=NOW)
    assert store.durable_state() == frozenset()
    assert store.latest_change() == before
    assert raw(store_url, "SELECT COUNT(*) FROM call_log") == [(0,)]


def test_a_source_failing_half_way_leaves_the_destination_empty(
    urls: Any, stores: list[Store], home: Path, store_url: str
) -> None:
    src_url = urls("sqlite")
    source = opened(src_url, stores, home)
    fill(source, src_url, home)
    destination = opened(store_url, stores, home)

    def failing() -> Iterator[tuple[str, tuple[Any, ...]]]:
        rows = source.export_durable(now=NOW)
        yield next(rows)
        yield next(rows)
        rows.close()
        raise StoreError("the source went away")

    with pytest.raises(StoreError, match="went away"):
        destination.import_durable(failing(), now=NOW)
    assert destination.durable_state() == frozenset()
    copy(source, destination)  # and a copy afterwards goes through whole
    assert len(destination.revoked()) == 2


def test_an_export_is_one_snapshot(store: Store, store_url: str, home: Path) -> None:
    """Rows written while a copy reads are not half seen (a revocation with no log, say)."""
    store.revoke("a" * 32, now=NOW)
    rows = store.export_durable(now=NOW)
    first = next(rows)
    writer = open_store(home, store_url)
    try:
        writer.revoke("b" * 32, now=NOW)
        writer.record_delegation(Delegation("c" * 32, "d" * 32, "a", "a.b", NOW, NOW + 5, {}))
    finally:
        writer.close()
    assert [first, *rows] == [("revocations", ("a" * 32, NOW, ""))]
