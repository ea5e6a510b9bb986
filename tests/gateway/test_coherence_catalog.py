"""The catalog store's vital sign over a real stdio session (docs/vital-signs.md).

The catalog store (``refs/chit/catalogs``) is pushed to remotes and fetched
from them, so a repository can end up with another repository's store. It
records whose it is when an engine first writes it: an engine on repository A
given B's store says so, naming both, and answers every call as before; its
own store is ok; a store from before the record is silent; the audit still
verifies commits whose catalogs sit beside the record.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2
from mcp import Client

from engine import admin
from engine.admin.seed import create_repository
from engine.catalog.declarations import CATALOG_STORE_REF
from engine.git import Repository
from engine.git.store import OWNER_ENTRY
from tests.conftest import FILES
from tests.gateway.mcp_client import payload, with_client

B_FILES = {"src/b.py": b"def other():\n    return 2\n"}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "src/app.py"}),
    ("search_symbols", {"query": "main", "limit": 5}),
    ("log", {}),
    ("diff", {}),
]


def _reader(home: Path) -> str:
    return str(admin.mint_token(home, agent="rita", operations=["read"], paths=["**"],
                                ttl_seconds=900)["token"])


def _writer(home: Path) -> str:
    return str(admin.mint_token(home, agent="alice", operations=["read", "write", "commit"],
                                paths=["src/**"], ttl_seconds=900)["token"])


def _commit(home: Path, repo: Path, path: str) -> str:
    """One commit on alice's lane: the engine stores its catalog (and so makes the store)."""

    async def body(client: Client) -> str:
        await client.list_tools()
        wrote = await client.call_tool("write_file", {"path": path, "content": "X = 2\n"})
        assert not wrote.is_error, payload(wrote)
        committed = await client.call_tool("commit", {"message": "two"})
        assert not committed.is_error, payload(committed)
        return str(payload(committed)["commit"])

    return with_client(home, repo, _writer(home), body)


def _session(home: Path, repo: Path) -> dict[str, Any]:
    """Each of :data:`CALLS`, then ``effective_scope`` and ``status``, by a read token."""

    async def body(client: Client) -> dict[str, Any]:
        await client.list_tools()
        out: dict[str, Any] = {}
        for name, args in CALLS:
            result = await client.call_tool(name, args)
            out[name] = (result.is_error, payload(result))
        out["scope"] = payload(await client.call_tool("effective_scope", {}))
        out["status"] = payload(await client.call_tool("status", {}))
        out["instructions"] = client.instructions
        return out

    return with_client(home, repo, _reader(home), body)


def _catalog_sign(got: dict[str, Any]) -> dict[str, str] | None:
    found = [s for s in got["status"].get("coherence", []) if s["sign"] == "catalog_store"]
    return found[0] if found else None


def _stable(got: dict[str, Any]) -> list[Any]:
    return [got[name] for name, _args in CALLS]


def _audit(home: Path, repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), "audit",
                           "verify", "--repo", str(repo)],
                          capture_output=True, text=True, timeout=120, check=False)


def _doctor(home: Path, repo: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), "doctor",
                           "--repo", str(repo), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    [found] = json.loads(done.stdout)["repositories"]
    return done.returncode, found


def test_own_store_is_ok_and_audits(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo-a"
    create_repository(repo, FILES)
    admin.init_home(home)
    commit = _commit(home, repo, "src/app.py")
    record = json.loads(Repository(repo).recorded_store_owner(CATALOG_STORE_REF) or b"")
    assert record["name"] == "repo-a" and len(record["roots"]) == 1 and record["keys"]
    got = _session(home, repo)
    sign = _catalog_sign(got)
    assert sign is not None and sign["state"] == "ok"
    assert "warning" not in got["scope"]
    # The audit finds the commit's catalog beside the record.
    audit = _audit(home, repo)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert commit[:12] in audit.stdout
    code, doctor = _doctor(home, repo)
    assert code == 0, doctor
    assert {"sign": "catalog_store", "state": "ok", "reason": "made for this repository"} in \
        doctor["signs"]


def test_a_store_fetched_from_another_repositorys_engine_is_named(tmp_path: Path) -> None:
    """Threat: refs/chit/catalogs of repository B (another engine's) served silently as A's."""
    home, home_b = tmp_path / "home", tmp_path / "home-b"
    a, b = tmp_path / "repo-a", tmp_path / "repo-b"
    create_repository(a, FILES)
    create_repository(b, B_FILES)
    admin.init_home(home)
    admin.init_home(home_b)
    _commit(home_b, b, "src/b.py")  # B's engine makes B's store
    first = _session(home, a)  # A has no store yet: silent
    assert _catalog_sign(first) is None
    subprocess.run(["git", "-C", str(a), "fetch", "--quiet", str(b),
                    f"+{CATALOG_STORE_REF}:{CATALOG_STORE_REF}"], check=True, timeout=60)
    foreign = _session(home, a)
    sign = _catalog_sign(foreign)
    assert sign is not None and sign["state"] == "mismatch"
    assert sign["expected"].startswith("repo-a ") and sign["found"].startswith("repo-b ")
    assert "repo-b" in sign["reason"] and "repo-a" in sign["reason"]
    line = foreign["scope"]["warning"]
    assert line.startswith("warning: ") and "catalog_store" in line
    assert foreign["instructions"].startswith(line + "\n")
    # A sign, not a gate: every call answers as it did before.
    assert _stable(foreign) == _stable(first)
    assert all(not is_error for is_error, _doc in _stable(foreign))
    code, doctor = _doctor(home, a)
    assert code == 1
    [mismatch] = [s for s in doctor["signs"] if s["sign"] == "catalog_store"]
    assert mismatch["state"] == "mismatch" and mismatch["found"].startswith("repo-b ")


def test_a_store_from_before_the_record_is_silent(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo-a"
    create_repository(repo, FILES)
    admin.init_home(home)
    first = _session(home, repo)
    catalog = b"an older engine's catalog"
    Repository(repo).put_blob_in_store(  # as an engine before records wrote it
        CATALOG_STORE_REF, hashlib.sha256(catalog).hexdigest(), catalog)
    git_repo = pygit2.Repository(str(repo))
    tree = git_repo[git_repo.references[CATALOG_STORE_REF].target].peel(pygit2.Commit).tree
    assert OWNER_ENTRY not in {entry.name for entry in tree}
    old = _session(home, repo)
    assert _catalog_sign(old) is None
    assert "warning" not in old["scope"]
    assert _stable(old) == _stable(first)
