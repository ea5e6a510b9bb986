"""The call log: every call recorded, nothing secret in it, tampering detected.

Real engine, real SQLite (``<home>/state.db``), real keys, and the real CLI for
``chit audit log verify|show``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from engine import admin
from engine.audit import calllog
from engine.auth import cbor, signkeys
from engine.service import Engine
from engine.state import open_store
from tests.conftest import World
from tests.engine.engine_calls import Caller

ROOT = Path(__file__).resolve().parents[3]


def cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*world.cli(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def verify_json(world: World, *extra: str) -> tuple[int, dict[str, Any]]:
    out = cli(world, "audit", "log", "verify", "--json", *extra)
    assert out.returncode in (0, 1), out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    return out.returncode, report


def entries(world: World, **kw: Any) -> list[dict[str, Any]]:
    return list(admin.call_log_entries(world.home, **kw))


call = Caller(session="s").call


SECRET_CONTENT = "TOP-SECRET-FILE-CONTENT 42\n"


def _some_calls(world: World) -> dict[str, Any]:
    """Eight calls: allowed, refused at every stage, with content and a delegation."""
    engine = Engine(world.home, world.repo)
    lead = world.mint(agent="lead", ops="read,write,commit,sub-token:issue", paths="src/**",
                      delegable=True)
    out: dict[str, Any] = {"lead": lead, "catalog": engine.offer(lead)["catalog_hash"]}
    call(engine, lead, "write_file", {"path": "src/a.py", "content": SECRET_CONTENT})  # 1
    binary = base64.b64encode(b"\x00\x01SECRET-BYTES").decode()
    call(engine, lead, "write_file", {"path": "src/b.bin", "content": binary,
                                      "encoding": "base64"})  # 2
    call(engine, lead, "read_file", {"path": "src_old/legacy.py"})  # 3 refused: scope
    engine.invoke("chit_" + "A" * 40, "read_file", {"path": "src/app.py"}, session="s",
                  offered_catalog_hash=None)  # 4 refused before the token verifies
    issued = call(engine, lead, "issue_sub_token", {"agent": "lead.h", "ops": ["read"],
                                                   "paths": ["src/api/**"], "ttl_seconds": 60})
    out["child"] = issued["result"]["token"]  # 5
    call(engine, out["child"], "read_file", {"path": "src/api/v1.py"}, session="c")  # 6
    call(engine, lead, "obliterate", {"ref": "main"})  # 7 refused: not offered
    call(engine, lead, "commit", {"message": "two files"})  # 8
    engine.close()  # the last checkpoint signs all eight
    return out


def test_every_call_is_recorded_with_its_decision(world: World) -> None:
    made = _some_calls(world)
    log = entries(world)
    assert [e["seq"] for e in log] == list(range(1, 9))
    summary = [(e["agent"], e["tool"], e["decision"], e["code"]) for e in log]
    assert summary == [
        ("lead", "write_file", "allowed", None),
        ("lead", "write_file", "allowed", None),
        ("lead", "read_file", "refused", "path_outside_scope"),
        ("-", "read_file", "refused", "token_malformed"),
        ("lead", "issue_sub_token", "allowed", None),
        ("lead.h", "read_file", "allowed", None),
        ("lead", "obliterate", "refused", "tool_not_offered"),
        ("lead", "commit", "allowed", None),
    ]
    first = log[0]
    assert first["arguments"] == {
        "path": "src/a.py",
        "content": {"size": len(SECRET_CONTENT.encode()),
                    "sha256": "sha256:" + hashlib.sha256(SECRET_CONTENT.encode()).hexdigest()},
    }
    # base64 content: size and hash of the bytes written, so they match the blob.
    assert log[1]["arguments"]["content"]["size"] == len(b"\x00\x01SECRET-BYTES")
    assert log[1]["arguments"]["content"]["sha256"] == (
        "sha256:" + hashlib.sha256(b"\x00\x01SECRET-BYTES").hexdigest())
    assert first["catalog_hash"] == made["catalog"]
    assert first["policy_hash"].startswith("sha256:") and first["session"] == "s"
    assert first["prev"] == "00" * 32 and first["v"] == "chit-call-log/2"
    # The refusal before verification names no agent and carries no token material.
    assert log[3]["chain"] == [] and log[3]["catalog_hash"] is None
    # The helper's entry names the whole delegation chain, root first.
    assert len(log[5]["chain"]) == 2 and log[5]["chain"][0] == log[0]["chain"][0]
    # Each entry's prev is the SHA-256 of the one before.
    rows = list(sqlite3.connect(world.home / "state.db").execute(
        "SELECT seq, entry FROM call_log ORDER BY seq"))
    for (_, before), after in zip(rows, log[1:], strict=False):
        assert after["prev"] == hashlib.sha256(before).hexdigest()
    code, report = verify_json(world)
    assert code == 0 and report["ok"] and report["entries"] == 8
    assert report["head"]["seq"] == 8
    assert report["checkpoint"]["size"] == 8 and report["unsigned"] is None


def test_no_token_key_or_file_content_reaches_the_log(world: World) -> None:
    """Threat: the audit trail becoming a leak of tokens, keys or protected content."""
    made = _some_calls(world)
    engine = Engine(world.home, world.repo)
    lead = made["lead"]
    # An agent pastes tokens into every place it controls.
    body = lead.removeprefix("chit_")
    call(engine, lead, "read_file", {"path": lead, "ref": body}, session=lead)
    call(engine, lead, "write_file", {"path": "src/c.py", "content": lead,
                                      "note": {"deep": [lead]}}, session="t")
    call(engine, lead, lead, {"message": "Bearer " + made["child"]}, session="t")
    engine.close()
    seeds = [k.seed for k in signkeys.signing_keys(world.home)]
    raw = b"".join(
        p.read_bytes() for p in world.home.glob("state.db*") if p.is_file()
    )
    for secret in (lead, body, made["child"], made["child"].removeprefix("chit_")):
        assert secret.encode() not in raw
    assert SECRET_CONTENT.encode() not in raw and b"SECRET-BYTES" not in raw
    for seed in seeds:
        assert seed not in raw and base64.urlsafe_b64encode(seed).rstrip(b"=") not in raw
    for path in (world.home / "keys" / "root").glob("*.json"):
        secret = json.loads(path.read_text())["secret"]
        assert secret.encode() not in raw
    tail = entries(world)[-3:]
    assert tail[0]["session"] == "~token-like"
    assert tail[0]["arguments"]["path"]["redacted"] == "token-like text"
    assert tail[2]["tool"] == "~token-like"
    shown = cli(world, "audit", "log", "show").stdout
    assert lead not in shown and body not in shown


def test_audit_doc_tables_exactly_the_call_log_checks() -> None:
    doc = (ROOT / "docs" / "audit.md").read_text("utf-8")
    section = doc.split("\n## 8. The call log", 1)[1]
    checks = section.split("### The checks", 1)[1].split("\n### ", 1)[0]
    table = set(re.findall(r"^\| `([a-z_]+)` \|", checks, flags=re.MULTILINE))
    source = (ROOT / "engine" / "audit" / "logverify.py").read_text("utf-8")
    used = set(re.findall(r'report\.add\([^"]*"([a-z_]+)"', source))
    assert table == used == {"decodes", "signature", "sequence", "chain", "columns",
                             "checkpoint", "tree", "head", "anchor"}


# --- tampering: tests/engine/audit/test_calllog_tamper.py ---------------------------------


def test_verify_with_exported_keys_and_with_the_wrong_keys(world: World, tmp_path: Path) -> None:
    _some_calls(world)
    exported = tmp_path / "engine-keys.json"
    assert cli(world, "keys", "export-public", "--out", str(exported)).returncode == 0
    code, report = verify_json(world, "--keys", str(exported))
    assert code == 0 and report["entries"] == 8
    # Another engine's keys: nothing verifies.
    other = tmp_path / "other"
    from engine import admin

    admin.init_home(other)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(admin.export_public(other)))
    code, report = verify_json(world, "--keys", str(wrong))
    assert code == 1
    assert {f["check"] for f in report["findings"]} == {"checkpoint", "tree"}
    # After a signing key rotation old checkpoints still verify (retired keys are
    # exported) and the new key signs the next one.
    assert cli(world, "keys", "rotate", "--signing").returncode == 0
    with Engine(world.home, world.repo) as engine:
        call(engine, world.mint(), "status", {})
    code, report = verify_json(world)
    assert code == 0 and report["entries"] == 9 and report["checkpoint"]["size"] == 9
    notes = [c.note for c in open_store(world.home).log_checkpoints()]
    assert len({base64.b64decode(n.rsplit(" ", 1)[1])[:4] for n in notes}) == 2  # two keys


def test_show_filters_and_escapes(world: World) -> None:
    _some_calls(world)
    engine = Engine(world.home, world.repo)
    bob = world.mint(agent="bob", ops="read")
    call(engine, bob, "\x1b[2Jevil", {"path": "\x1b]0;title\x07"}, session="b")
    engine.close()
    shown = cli(world, "audit", "log", "show", "--agent", "bob")
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert len(lines) == 1 and "\x1b" not in shown.stdout and "tool_not_offered" in lines[0]
    assert [e["agent"] for e in entries(world, agent="-")] == ["-"]
    first = entries(world)[0]
    later = cli(world, "audit", "log", "show", "--since", str(first["time"] + 10**6), "--json")
    assert json.loads(later.stdout) == []
    iso = cli(world, "audit", "log", "show", "--since", "2000-01-01T00:00:00", "--json")
    assert len(json.loads(iso.stdout)) == 9
    bad = cli(world, "audit", "log", "show", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr


_WORKER = """
import sys
from engine.service import Engine
home, repo, token, name = sys.argv[1:5]
engine = Engine(home, repo)
listed = engine.offer(token)["catalog_hash"]
for i in range(25):
    tool = "status" if i % 2 else "read_file"
    engine.invoke(token, tool, {"path": "src/app.py"} if tool == "read_file" else {},
                  session=name, offered_catalog_hash=listed)
engine.close()
"""


def test_appends_from_several_processes_never_fork_the_chain(world: World) -> None:
    """Threat: a forked tree or chain (two entries claiming one place) hiding entries."""
    token = world.mint(ops="read")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(world.home), str(world.repo), token, f"p{n}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    log = entries(world)
    assert [e["seq"] for e in log] == list(range(1, 101))
    assert sorted(e["session"] for e in log) == sorted(f"p{n}" for n in range(4) for _ in range(25))
    code, report = verify_json(world)
    assert code == 0 and report["entries"] == 100


def test_protected_content_leaves_no_hash_in_the_log(world: World) -> None:
    """Threat: the SHA-256 of a short protected secret, kept in the call log, lets
    anyone who reads state.db guess the secret by hashing candidates."""
    (world.home / "policy.toml").write_text('version = 1\n[paths]\nprotected = ["src/vault/**"]\n')
    engine = Engine(world.home, world.repo)
    token = world.mint()
    secret = "PIN=4711\n"
    assert call(engine, token, "write_file", {"path": "src/vault/pin.txt", "content": secret})["ok"]
    assert call(engine, token, "write_file", {"path": "src/open.txt", "content": secret})["ok"]
    engine.close()
    sealed, plain = entries(world)[-2:]
    assert sealed["arguments"]["content"] == {"size": len(secret), "sealed": True}
    assert set(plain["arguments"]["content"]) == {"size", "sha256"}
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert digest in json.dumps(plain) and digest not in json.dumps(sealed)
    assert cli(world, "audit", "log", "verify").returncode == 0


def _doc_block(doc: str, after: str) -> str:
    """The first fenced block after the line ``after`` in ``doc``, whitespace removed."""
    rest = doc[doc.index(after):]
    start = rest.index("```\n") + 4
    return "".join(rest[start:rest.index("```", start)].split())


def test_the_audit_doc_vector_is_what_the_engine_signs() -> None:
    """docs/audit.md's chit-call-log/1 vector: entry bytes, chain head and signature."""
    doc = (ROOT / "docs" / "audit.md").read_text("utf-8")
    section = doc[doc.index("#### Test vector of a `chit-call-log/1`"):doc.index("### The checks")]
    entry = {
        "v": calllog.LEGACY_VERSION, "seq": 1, "prev": bytes(32), "time": 1796000000,
        "kid": "s20261130-00000000", "agent": "docs-bot",
        "chain": ["00112233445566778899aabbccddeeff"], "session": "s1", "tool": "read_file",
        "arguments": {"path": "src/app.py"}, "decision": "allowed", "code": None,
        "policy_hash": "sha256:" + "0" * 64, "catalog_hash": "sha256:" + "1" * 64,
    }
    data = cbor.encode(entry)
    head = calllog.entry_head(1, data, entry["kid"], entry["time"])
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    signature = key.sign(calllog.HEAD_CONTEXT + head)
    assert _doc_block(section, "Entry bytes") == data.hex()
    assert _doc_block(section, "Chain head at the entry") == head.hex()
    assert _doc_block(section, "Signature over") == signature.hex()
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(
        section.split("public key", 1)[1].split()[0]))
    public.verify(signature, calllog.HEAD_CONTEXT + head)
    assert calllog.decode_entry(data) == entry
