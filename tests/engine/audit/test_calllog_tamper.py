"""Tampering with the call log: each edit, cut, insertion or rewrite is named by verify.

Real engine, real SQLite (``<home>/state.db``) edited with a second connection,
real keys, and the real CLI for ``chit audit log verify`` (docs/audit.md §8,
*The checks*).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engine.audit import merkle
from engine.auth import cbor
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.audit.test_calllog import cli, verify_json
from tests.engine.engine_calls import Caller

call = Caller(session="s").call


def _calls(world: World, count: int = 8) -> None:
    """``count`` calls (reads, refusals, a write), then the engine stops: all are signed."""
    with Engine(world.home, world.repo) as engine:
        token = world.mint(ops="read,write")
        for n in range(count):
            if n % 3 == 2:
                call(engine, token, "read_file", {"path": "src_old/legacy.py"})  # refused
            elif n == 4:
                call(engine, token, "write_file", {"path": "src/n.py", "content": "N = 4\n"})
            else:
                call(engine, token, "status", {})


def _db(world: World) -> sqlite3.Connection:
    return sqlite3.connect(world.home / "state.db", isolation_level=None)


def _entry(db: sqlite3.Connection, seq: int) -> bytes:
    return bytes(db.execute("SELECT entry FROM call_log WHERE seq = ?", (seq,)).fetchone()[0])


def _edit(world: World) -> None:
    db = _db(world)
    entry = cbor.decode(_entry(db, 3))
    assert isinstance(entry, dict)
    entry.update(decision="allowed", code=None)  # hide a refusal
    db.execute("UPDATE call_log SET entry = ? WHERE seq = 3", (cbor.encode(entry),))


def _edit_column(world: World) -> None:
    _db(world).execute("UPDATE call_log SET agent = 'someone' WHERE seq = 3")


def _delete(world: World) -> None:
    _db(world).execute("DELETE FROM call_log WHERE seq = 3")


def _delete_tail(world: World) -> None:
    _db(world).execute("DELETE FROM call_log WHERE seq >= 7")


def _delete_tail_tree_and_checkpoints(world: World) -> None:
    db = _db(world)
    db.execute("DELETE FROM call_log WHERE seq >= 7")
    db.execute("DELETE FROM call_log_tree")
    db.execute("DELETE FROM call_log_checkpoint")


def _insert(world: World) -> None:
    """A forged entry 3 slipped in, later entries renumbered."""
    db = _db(world)
    real = cbor.decode(_entry(db, 3))
    assert isinstance(real, dict)
    db.execute("UPDATE call_log SET seq = seq + 1000 WHERE seq >= 3")
    db.execute("UPDATE call_log SET seq = seq - 999 WHERE seq >= 1000")
    forged = cbor.encode(dict(real, tool="read_file", decision="allowed", code=None))
    db.execute("INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (3, ?, ?, ?, x'')",
               (real["time"], real["agent"], forged))


def _insert_copy(world: World) -> None:
    """A genuine entry replayed at the end."""
    db = _db(world)
    db.execute("INSERT INTO call_log (seq, time, agent, entry, sig)"
               " SELECT 9, time, agent, entry, sig FROM call_log WHERE seq = 2")


def _reorder(world: World) -> None:
    db = _db(world)
    three, five = _entry(db, 3), _entry(db, 5)
    db.execute("UPDATE call_log SET entry = ? WHERE seq = 3", (five,))
    db.execute("UPDATE call_log SET entry = ? WHERE seq = 5", (three,))


def _reorder_rows(world: World) -> None:
    db = _db(world)
    db.execute("UPDATE call_log SET seq = 100 WHERE seq = 4")
    db.execute("UPDATE call_log SET seq = 4 WHERE seq = 5")
    db.execute("UPDATE call_log SET seq = 5 WHERE seq = 100")


def _forge_checkpoint(world: World) -> None:
    db = _db(world)
    (text,) = db.execute("SELECT note FROM call_log_checkpoint ORDER BY size DESC").fetchone()
    db.execute("UPDATE call_log_checkpoint SET note = ? WHERE size = 8",
               (text.replace("\n8\n", "\n7\n", 1),))


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (_edit, [(8, "checkpoint"), (4, "chain"), (8, "tree")]),
        (_edit_column, [(3, "columns")]),
        (_delete, [(8, "checkpoint"), (4, "sequence"), (4, "chain"), (8, "tree")]),
        (_delete_tail, [(8, "checkpoint"), (6, "tree")]),
        (_delete_tail_tree_and_checkpoints, [(6, "tree")]),
        (_insert, [(8, "checkpoint"), (4, "sequence"), (4, "chain"), (9, "tree")]),
        (_insert_copy, [(9, "sequence"), (9, "chain"), (9, "tree")]),
        (_reorder, [(8, "checkpoint"), (3, "sequence"), (3, "chain"), (5, "sequence")]),
        (_reorder_rows, [(8, "checkpoint"), (4, "sequence"), (4, "chain"), (5, "chain")]),
        (_forge_checkpoint, [(8, "checkpoint"), (8, "tree")]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_call_log_tamper_detection(world: World, tamper: Any, expected: list[Any]) -> None:
    """Threat: someone with write access to state.db rewrites what agents did.

    Edited, deleted, inserted and reordered entries, a cut tail, a lost tree head
    and a forged checkpoint are each found by ``chit audit log verify`` (exit 1),
    naming the entry.
    """
    _calls(world)
    assert verify_json(world)[0] == 0
    tamper(world)
    code, report = verify_json(world)
    assert code == 1 and not report["ok"]
    found = {(f["seq"], f["check"]) for f in report["findings"]}
    assert set(expected) <= found, report["findings"]
    text = cli(world, "audit", "log", "verify")
    assert text.returncode == 1
    seq, check = expected[0]
    assert f"entry {seq} {check}:" in text.stdout and "FAILED" in text.stdout


def test_deleted_entries_are_named_in_the_reason(world: World) -> None:
    _calls(world)
    _delete(world)
    _code, report = verify_json(world)
    assert any("entry 3 is missing" in f["reason"] for f in report["findings"])
    _delete_tail(world)
    _code, report = verify_json(world)
    assert any("entries 7..8 are missing" in f["reason"] for f in report["findings"])


def _rewrite(world: World) -> None:
    """What someone with state.db but not the key can do: change entry 3, re-chain the
    rest, recompute the tree head, and delete every checkpoint."""
    db = _db(world)
    rows = db.execute("SELECT seq, entry FROM call_log ORDER BY seq").fetchall()
    prev, frontier = bytes(32), ()
    for n, (seq, data) in enumerate(rows):
        entry = cbor.decode(bytes(data))
        assert isinstance(entry, dict)
        if seq == 3:
            entry.update(decision="allowed", code=None)
        entry["prev"] = prev
        new = cbor.encode(entry)
        db.execute("UPDATE call_log SET entry = ? WHERE seq = ?", (new, seq))
        prev = hashlib.sha256(new).digest()
        frontier = merkle.frontier_append(frontier, n, merkle.leaf_hash(new))
    db.execute("DELETE FROM call_log_checkpoint")
    db.execute("UPDATE call_log_tree SET last = ?, frontier = ?, signed = 0, signed_at = 0",
               (prev, merkle.encode_frontier(frontier)))


def test_a_kept_checkpoint_catches_a_rewrite_by_someone_without_the_key(
    world: World, tmp_path: Path
) -> None:
    """The documented limit, and its remedy: a rewritten, re-chained log with its
    checkpoints deleted verifies alone (every entry then shows as not yet signed);
    a checkpoint kept elsewhere catches it, as does an anchor."""
    _calls(world)
    kept = tmp_path / "checkpoint.txt"
    out = cli(world, "audit", "log", "checkpoint")
    assert out.returncode == 0
    kept.write_text(out.stdout)
    _code, before = verify_json(world)
    anchor = f"3:sha256:{hashlib.sha256(_entry(_db(world), 3)).hexdigest()}"
    _rewrite(world)
    code, report = verify_json(world)
    assert code == 0 and report["unsigned"] == {"first": 1, "last": 8}
    assert "entries 1..8 are chained but not yet signed" in cli(
        world, "audit", "log", "verify").stdout
    code, report = verify_json(world, "--checkpoint", str(kept))
    assert code == 1 and {(f["seq"], f["check"]) for f in report["findings"]} == {
        (8, "checkpoint")}
    assert "a given checkpoint" in report["findings"][0]["reason"]
    code, report = verify_json(world, "--anchor", anchor)
    assert code == 1 and report["findings"][0]["check"] == "anchor"
    assert before["head"]["seq"] == 8


def test_an_anchor_catches_a_cut_back_to_an_old_state(world: World) -> None:
    """An old copy of the tables put back after the tail is cut."""
    _calls(world, 3)
    db = _db(world)
    old_tree = db.execute("SELECT * FROM call_log_tree").fetchone()
    old_checkpoints = db.execute("SELECT * FROM call_log_checkpoint").fetchall()
    _calls(world, 3)
    _code, report = verify_json(world)
    anchor = f"{report['head']['seq']}:{report['head']['hash']}"
    db.execute("DELETE FROM call_log WHERE seq > 3")
    db.execute("DELETE FROM call_log_tree")
    db.execute("DELETE FROM call_log_checkpoint")
    db.execute("INSERT INTO call_log_tree VALUES (?, ?, ?, ?, ?, ?, ?)", old_tree)
    db.executemany("INSERT INTO call_log_checkpoint VALUES (?, ?, ?)", old_checkpoints)
    # Without an anchor the shortened log is consistent: this is the limit.
    assert verify_json(world)[0] == 0
    code, report = verify_json(world, "--anchor", anchor)
    assert code == 1 and report["findings"] == [
        {"seq": 6, "check": "anchor", "reason": "anchored entry 6 is missing"}]
    bad = cli(world, "audit", "log", "verify", "--anchor", "6:nothex")
    assert bad.returncode == 2 and "--anchor" in bad.stderr


def test_a_row_inserted_behind_the_engines_back_fails_the_next_call_closed(
    world: World,
) -> None:
    engine = Engine(world.home, world.repo)
    token = world.mint()
    assert call(engine, token, "write_file", {"path": "src/x.py", "content": "x\n"})["ok"]
    db = _db(world)
    db.execute("INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (2, 0, 'x', ?, x'')",
               (_entry(db, 1),))
    answer = call(engine, token, "write_file", {"path": "src/y.py", "content": "y\n"})
    assert answer["ok"] is False and answer["error"]["error"] == "internal_error"
    answer = call(engine, token, "status", {})  # while failing, reads fail closed too
    assert answer["ok"] is False and answer["error"]["error"] == "internal_error"
    assert verify_json(world)[0] == 1
    db.execute("DELETE FROM call_log WHERE seq = 2")
    engine.close()
    code, report = verify_json(world)
    assert code == 0 and report["entries"] == 3  # nothing was dropped


def test_a_malformed_tree_head_fails_calls_closed(world: World) -> None:
    _calls(world, 2)
    _db(world).execute("UPDATE call_log_tree SET frontier = x'00'")
    with Engine(world.home, world.repo) as engine:
        answer = call(engine, world.mint(), "write_file", {"path": "src/m.py", "content": "m"})
    assert answer["ok"] is False and answer["error"]["error"] == "internal_error"
    tree = open_store(world.home).log_tree()
    assert tree is not None and tree.size == 2  # nothing written past the broken head
