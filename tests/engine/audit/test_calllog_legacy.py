"""A log written before checkpoints (``chit-call-log/1``) stays verifiable, and grows on.

The old log is written here from its documented format (docs/audit.md §8,
*Entries of the first form*) with hashlib and the ``cryptography`` library, into
a real store; the engine then appends to it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import subprocess
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.auth import cbor, signkeys
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.audit.test_tlog import mth, open_note
from tests.engine.engine_calls import Caller

HEAD_CONTEXT = b"chit-call-log/1 head\x00"


def write_v1_log(world: World, count: int) -> list[bytes]:
    """``count`` signed ``chit-call-log/1`` entries and their chain head, as the engine
    wrote them before checkpoints."""
    open_store(world.home)  # the tables
    key = signkeys.signing_keys(world.home)[0]
    private = Ed25519PrivateKey.from_private_bytes(key.seed)
    db = sqlite3.connect(world.home / "state.db", isolation_level=None)
    prev, out = bytes(32), []
    for seq in range(1, count + 1):
        entry = cbor.encode({
            "v": "chit-call-log/1", "seq": seq, "prev": prev, "time": 1_796_000_000 + seq,
            "kid": key.key_id, "agent": "old", "chain": ["ab" * 16], "session": "s",
            "tool": "read_file", "arguments": {"path": "src/app.py"}, "decision": "allowed",
            "code": None, "policy_hash": "sha256:" + "0" * 64, "catalog_hash": None,
        })
        digest = hashlib.sha256(entry).digest()
        head = cbor.encode({"v": "chit-call-log/1", "seq": seq, "hash": digest,
                            "kid": key.key_id, "time": 1_796_000_000 + seq})
        sig = private.sign(HEAD_CONTEXT + head)
        db.execute("INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (?, ?, ?, ?, ?)",
                   (seq, 1_796_000_000 + seq, "old", entry, sig))
        db.execute("INSERT OR REPLACE INTO call_log_head (id, seq, hash, head, sig)"
                   " VALUES (1, ?, ?, ?, ?)", (seq, digest, head, sig))
        prev = digest
        out.append(entry)
    return out


def verify_json(world: World) -> tuple[int, dict[str, Any]]:
    out = subprocess.run([*world.cli(), "audit", "log", "verify", "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def test_an_old_log_verifies_entry_by_entry(world: World) -> None:
    write_v1_log(world, 5)
    code, report = verify_json(world)
    assert code == 0 and report["entries"] == 5 and report["unsigned"] is None
    db = sqlite3.connect(world.home / "state.db", isolation_level=None)
    entry = cbor.decode(bytes(db.execute("SELECT entry FROM call_log WHERE seq = 2").fetchone()[0]))
    assert isinstance(entry, dict)
    entry["decision"] = "refused"
    db.execute("UPDATE call_log SET entry = ? WHERE seq = 2", (cbor.encode(entry),))
    code, report = verify_json(world)
    assert code == 1
    assert {(f["seq"], f["check"]) for f in report["findings"]} == {(2, "signature"), (3, "chain")}


def test_new_entries_continue_the_old_log_under_one_tree(world: World) -> None:
    old = write_v1_log(world, 5)
    with Engine(world.home, world.repo) as engine:
        Caller(session="n").call(engine, world.mint(), "status", {})
    rows = sqlite3.connect(world.home / "state.db").execute(
        "SELECT entry FROM call_log ORDER BY seq").fetchall()
    entries = [bytes(r[0]) for r in rows]
    assert entries[:5] == old and len(entries) == 6
    new = cbor.decode(entries[5])
    assert isinstance(new, dict)
    assert new["v"] == "chit-call-log/2" and new["seq"] == 6
    assert new["prev"] == hashlib.sha256(old[-1]).digest()  # continues the signed chain
    code, report = verify_json(world)
    assert code == 0 and report["checkpoint"]["size"] == 6, report
    (checkpoint,) = open_store(world.home).log_checkpoints()
    tree = open_store(world.home).log_tree()
    assert tree is not None
    public = signkeys.signing_keys(world.home)[0].public
    lines = open_note(checkpoint.note, tree.origin, public)
    assert lines[1:] == ["6", base64.b64encode(mth(entries)).decode()]


def test_an_old_entry_after_a_new_one_is_a_finding(world: World) -> None:
    write_v1_log(world, 2)
    with Engine(world.home, world.repo) as engine:
        Caller(session="n").call(engine, world.mint(), "status", {})
    db = sqlite3.connect(world.home / "state.db", isolation_level=None)
    first = db.execute("SELECT entry, sig FROM call_log WHERE seq = 1").fetchone()
    db.execute("INSERT INTO call_log (seq, time, agent, entry, sig) VALUES (4, 0, 'old', ?, ?)",
               first)
    code, report = verify_json(world)
    assert code == 1 and (4, "decodes") in {(f["seq"], f["check"]) for f in report["findings"]}
