"""A repository whose base branch is ``master``, end to end: init, MCP over stdio, audit.

Nothing in it is called ``main``: ``chit init --repo`` accepts it, the agent's
lane starts from master and is measured against it, ``master`` is a revision
the tools take, and ``chit audit verify`` checks the lane against master.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2
from mcp import Client

from engine import admin
from engine.admin.seed import create_repository
from tests.conftest import FILES
from tests.gateway.mcp_client import payload, with_client


def _chit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_master_repository_works_end_to_end(tmp_path: Path) -> None:
    repo, home = tmp_path / "repo", tmp_path / "home"
    master = create_repository(repo, FILES, branch="master")
    init = _chit(home, "init", "--repo", str(repo), "--json")
    assert init.returncode == 0, init.stderr
    assert '"base": "master"' in init.stdout
    token = str(admin.mint_token(home, agent="alice", operations=["read", "write", "commit"],
                                 paths=["src/**"], ttl_seconds=900)["token"])

    async def body(client: Client) -> dict[str, Any]:
        await client.list_tools()
        before = payload(await client.call_tool("status", {}))
        on_master = payload(await client.call_tool("read_file", {"path": "src/app.py",
                                                                 "ref": "master"}))
        no_main = await client.call_tool("read_file", {"path": "src/app.py", "ref": "main"})
        await client.call_tool("write_file", {"path": "src/app.py", "content": "def main():\n"
                                              "    return 2\n"})
        committed = payload(await client.call_tool("commit", {"message": "two"}))
        after = payload(await client.call_tool("status", {}))
        log = payload(await client.call_tool("log", {"ref": "master"}))
        conflicts = payload(await client.call_tool("list_conflicts", {}))
        return {"before": before, "on_master": on_master, "no_main": no_main,
                "committed": committed, "after": after, "log": log, "conflicts": conflicts}

    got = with_client(home, repo, token, body)
    assert got["before"]["base_branch"] == "master" and got["before"]["main_head"] == master
    assert got["before"]["remote"] is None
    assert got["on_master"]["content"] == FILES["src/app.py"].decode()
    assert got["no_main"].is_error and payload(got["no_main"])["error"] == "not_found"
    assert got["committed"]["parent"] == master
    assert (got["after"]["ahead"], got["after"]["behind"]) == (1, 0)
    assert [c["id"] for c in got["log"]["commits"]] == [master]
    assert got["conflicts"]["with_main"] == []
    git = pygit2.Repository(str(repo))
    assert str(git.references["refs/heads/master"].target) == master  # never written
    assert "refs/heads/main" not in git.references
    audit = _chit(home, "audit", "verify", "--repo", str(repo))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "verified: 1/1 commits on agent/alice" in audit.stdout
    ranged = _chit(home, "audit", "verify", "--repo", str(repo), "master..agent/alice")
    assert ranged.returncode == 0 and "verified: 1/1" in ranged.stdout
    nothing = _chit(home, "audit", "verify", "--repo", str(repo), "agent/alice..agent/alice")
    assert nothing.returncode == 1 and "no chit commit" in nothing.stdout
