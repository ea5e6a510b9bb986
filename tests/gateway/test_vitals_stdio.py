"""Vital signs of lag over real sessions (docs/vital-signs.md): each reports, none refuses.

A remote made unreachable shows as behind (with its lane and since when) in
``status`` and in ``chit doctor``, and clears once the lane reaches it; a call
log left unsigned, a policy turned invalid and a base branch moved since it
was indexed show where the operator and the agent look. Calls are answered as
they would be without the signs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pygit2
from mcp import Client

from engine import admin
from engine.admin.seed import create_repository
from engine.audit import calllog, redact, tlog
from engine.state import open_store
from tests.conftest import FILES
from tests.engine.git.remote_helpers import clone, make_origin
from tests.gateway.mcp_client import engine_server, payload, remote_edge_params, with_client

SETTLE = 60.0  # seconds the engine's background push may take to reach a restored remote


def _doctor(home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), "doctor",
                           "--json", *args], capture_output=True, text=True, timeout=120,
                          check=False)
    return done.returncode, json.loads(done.stdout)


def _signs(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["sign"]: s for s in status.get("coherence", [])}


def _token(home: Path, *ops: str) -> str:
    return str(admin.mint_token(home, agent="alice", operations=list(ops or ("read",)),
                                paths=["**"], ttl_seconds=900)["token"])


def _run(url: str, edge_home: Path, token: str, body: Any) -> Any:
    async def go() -> Any:
        async with Client(remote_edge_params(url, edge_home, token)) as client:
            await client.list_tools()
            return await body(client)

    return anyio.run(go)


def test_a_remote_made_unreachable_shows_as_behind_and_clears(tmp_path: Path) -> None:
    """Threat: a remote that stopped receiving pushes while every commit is answered."""
    home, edge_home = tmp_path / "home", tmp_path / "edge"
    edge_home.mkdir()
    admin.init_home(home)
    origin, away = tmp_path / "origin.git", tmp_path / "away.git"
    make_origin(origin)
    engine_clone = clone(origin, tmp_path / "engine.git")
    (home / "engine.toml").write_text(
        f'[[repo]]\nname = "app"\npath = "{engine_clone}"\nbase = "master"\n'
        f'remote = "{origin}"\n', encoding="utf-8")
    os.chmod(home / "engine.toml", 0o600)
    token = _token(home, "read", "write", "commit")

    async def commit_and_status(client: Client) -> dict[str, Any]:
        await client.call_tool("write_file", {"path": "src/app.py", "content": "X = 2\n"})
        committed = await client.call_tool("commit", {"message": "two"})
        return {"commit": (committed.is_error, payload(committed)),
                "status": payload(await client.call_tool("status", {}))}

    with engine_server(home, None, "--workers", "1") as server:
        origin.rename(away)
        got = _run(server.url, edge_home, token, commit_and_status)
        code, unreachable = _doctor(home)
    assert got["commit"][0] is False, got["commit"]  # the commit is answered as usual
    remote = _signs(got["status"])["remote"]
    assert remote["state"] == "behind" and remote["lanes"] == ["agent/alice"]
    assert remote["age_seconds"] >= 0 and abs(remote["since"] - time.time()) < 600
    assert code == 1
    [repo] = unreachable["repositories"]
    assert {s["sign"]: s["state"] for s in repo["signs"]}["remote"] == "unreachable"
    assert ("engine", "engine") in {(row["kind"], row["role"]) for row in unreachable["seen"]}

    away.rename(origin)
    code, behind = _doctor(home)  # no engine runs: the lane still waits
    [repo] = behind["repositories"]
    [sign] = [s for s in repo["signs"] if s["sign"] == "remote"]
    assert code == 1 and sign["state"] == "behind" and sign["lanes"] == ["agent/alice"]
    # The engine wrote, as it stopped, the edge whose calls it served.
    edges = [row for row in behind["seen"] if row["kind"] == "edge"]
    assert [row["label"].rsplit("/", 1)[0] for row in edges] == [socket.gethostname()]

    async def until_level(client: Client) -> dict[str, Any]:
        deadline = time.monotonic() + SETTLE
        while True:
            status = payload(await client.call_tool("status", {}))
            if "remote" not in _signs(status) or time.monotonic() > deadline:
                return status
            await anyio.sleep(0.2)

    with engine_server(home, None, "--workers", "1") as server:
        level = _run(server.url, edge_home, token, until_level)
    assert "remote" not in _signs(level)  # the engine pushed the lane: the sign cleared
    code, after = _doctor(home)
    [repo] = after["repositories"]
    assert {s["sign"]: s["state"] for s in repo["signs"]}["remote"] == "ok"


def _record(at: int) -> calllog.CallRecord:
    return calllog.CallRecord(
        time=at, agent="alice", chain=("0" * 32,), session="s", tool="read_file",
        arguments=redact.redact_arguments({"path": "src/app.py"}), decision="allowed",
        code=None, policy_hash="sha256:" + "1" * 64, catalog_hash="sha256:" + "2" * 64)


def test_a_call_log_left_unsigned_shows_in_doctor_and_status(tmp_path: Path) -> None:
    """Threat: call-log entries no checkpoint covers (an engine that stopped uncleanly)."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    create_repository(repo, FILES)
    admin.init_home(home)
    store = open_store(home)
    try:  # entries appended an hour ago, and no checkpoint signed since
        tlog.append(store, [_record(int(time.time()) - 3600 + n) for n in range(3)],
                    calllog.LogSigner(home), now=int(time.time()) - 3600,
                    checkpoint_entries=1_000_000)
        tree = store.log_tree()
        assert tree is not None and (tree.size, tree.signed) == (3, 0)
    finally:
        store.close()
    code, report = _doctor(home, "--repo", str(repo))
    [sign] = [s for s in report["signs"] if s["sign"] == "call_log"]
    assert code == 1 and sign["state"] == "unsigned_tail"
    assert 3500 <= sign["age_seconds"] <= 4000 and "3 entries" in sign["reason"]

    async def body(client: Client) -> dict[str, Any]:
        await client.list_tools()
        return {"read": (await client.call_tool("read_file", {"path": "src/app.py"})).is_error,
                "status": payload(await client.call_tool("status", {}))}

    got = with_client(home, repo, _token(home), body)
    assert got["read"] is False
    assert _signs(got["status"])["call_log"]["state"] == "unsigned_tail"


def test_an_invalid_policy_shows_in_doctor_and_every_call_is_refused(tmp_path: Path) -> None:
    """The engine refuses every call while its policy is invalid: doctor is where it shows."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    create_repository(repo, FILES)
    admin.init_home(home)
    token = _token(home)

    async def body(client: Client) -> dict[str, Any]:
        await client.list_tools()
        (home / "policy.toml").write_text("version = [\n", encoding="utf-8")
        status = await client.call_tool("status", {})
        return {"error": status.is_error, "text": status.content[0].text}

    got = with_client(home, repo, token, body)
    assert got["error"] is True and "policy_denied" in got["text"]
    assert "policy file is invalid" in got["text"]
    code, report = _doctor(home, "--repo", str(repo))
    [sign] = [s for s in report["signs"] if s["sign"] == "policy"]
    assert code == 1 and sign["state"] == "invalid" and "refused" in sign["reason"]


def test_a_base_moved_since_it_was_indexed_is_stale_until_queried(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo"
    create_repository(repo, FILES)
    admin.init_home(home)
    token = _token(home)

    async def query_then_status(client: Client) -> dict[str, Any]:
        await client.list_tools()
        found = await client.call_tool("search_symbols", {"query": "main", "limit": 5})
        return {"found": (found.is_error, payload(found)),
                "status": payload(await client.call_tool("status", {}))}

    async def status_only(client: Client) -> dict[str, Any]:
        await client.list_tools()
        return payload(await client.call_tool("status", {}))

    first = with_client(home, repo, token, query_then_status)
    assert "semantic_index_freshness" not in _signs(first["status"])  # fresh: nothing to say
    git = pygit2.Repository(str(repo))
    old = git.head.target
    tree = git.TreeBuilder(git[old].peel(pygit2.Tree))
    tree.insert("NEW.md", git.create_blob(b"moved\n"), pygit2.GIT_FILEMODE_BLOB)
    who = pygit2.Signature("Operator", "op@example.invalid")
    new = git.create_commit(git.head.name, who, who, "move the base\n", tree.write(), [old])
    stale = with_client(home, repo, token, status_only)
    sign = _signs(stale)["semantic_index_freshness"]
    assert sign["state"] == "stale"
    assert (sign["expected"], sign["found"]) == (str(new), str(old))
    code, report = _doctor(home, "--repo", str(repo))
    [repo_report] = report["repositories"]
    states = {s["sign"]: s["state"] for s in repo_report["signs"]}
    assert states["semantic_index_freshness"] == "stale" and code == 0, json.dumps(report)
    again = with_client(home, repo, token, query_then_status)
    assert again["found"] == first["found"] or not again["found"][0]
    assert "semantic_index_freshness" not in _signs(again["status"])
