"""Vital signs over a real stdio session (docs/vital-signs.md).

The battery of the incident that made them necessary: an engine on
repository A given the semantic index made for repository B says so, naming
both, and answers every call as it would without the sign; its own index is
ok; a new repository says nothing; a name with capitals and dashes is ok.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp import Client

from engine import admin
from engine.admin.seed import create_repository
from engine.git import Repository
from engine.semantic.persist import DB_NAME
from tests.conftest import FILES
from tests.gateway.mcp_client import payload, with_client

B_FILES = {"lib/b.py": b"def other():\n    return 2\n"}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "src/app.py"}),
    ("search_symbols", {"query": "main", "limit": 5}),
    ("log", {}),
]


def _token(home: Path) -> str:
    return str(admin.mint_token(home, agent="alice", operations=["read"], paths=["**"],
                                ttl_seconds=900)["token"])


def _session(home: Path, repo: Path) -> dict[str, Any]:
    """``status``, each of :data:`CALLS`, then ``effective_scope`` and ``status`` again."""

    async def body(client: Client) -> dict[str, Any]:
        await client.list_tools()
        out: dict[str, Any] = {"before": payload(await client.call_tool("status", {}))}
        for name, args in CALLS:
            result = await client.call_tool(name, args)
            out[name] = (result.is_error, payload(result))
        out["scope"] = payload(await client.call_tool("effective_scope", {}))
        out["status"] = payload(await client.call_tool("status", {}))
        return out

    return with_client(home, repo, _token(home), body)


def _index_of(repo: Path) -> Path:
    return Path(Repository(repo).chit_dir) / DB_NAME


def _signs(got: dict[str, Any]) -> dict[str, str]:
    return {s["sign"]: s["state"] for s in got["status"].get("coherence", [])}


def _stable(got: dict[str, Any]) -> list[Any]:
    return [got[name] for name, _args in CALLS]


def test_index_made_for_another_repository_is_named_and_calls_still_answer(
    tmp_path: Path,
) -> None:
    """Threat: a semantic.db copied from repository B served silently as A's."""
    home, a, b = tmp_path / "home", tmp_path / "repo-a", tmp_path / "repo-b"
    create_repository(a, FILES)
    create_repository(b, B_FILES)
    admin.init_home(home)
    first = _session(home, a)  # A's own index, made by serving A
    assert _index_of(a).is_file()
    assert "coherence" not in first["before"]  # nothing indexed yet: silent
    assert _signs(first) == {"semantic_index": "ok"}  # the store was new: silent
    assert "warning" not in first["scope"]
    _session(home, b)  # B's index, made by serving B
    shutil.copyfile(_index_of(b), _index_of(a))
    for suffix in ("-wal", "-shm"):
        _index_of(a).with_name(DB_NAME + suffix).unlink(missing_ok=True)
        if _index_of(b).with_name(DB_NAME + suffix).exists():
            shutil.copyfile(_index_of(b).with_name(DB_NAME + suffix),
                            _index_of(a).with_name(DB_NAME + suffix))
    foreign = _session(home, a)
    [sign] = [s for s in foreign["status"]["coherence"] if s["sign"] == "semantic_index"]
    assert sign["state"] == "mismatch" and sign["sign"] == "semantic_index"
    assert sign["expected"].startswith("repo-a ") and sign["found"].startswith("repo-b ")
    assert "repo-b" in sign["reason"] and "repo-a" in sign["reason"]
    assert foreign["scope"]["warning"].startswith("warning: ")
    assert _stable(foreign) == _stable(first)
    assert all(not is_error for is_error, _doc in _stable(foreign))


def test_a_new_repository_says_nothing(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "fresh"
    create_repository(repo, {"README": b"nothing to index\n"})
    admin.init_home(home)

    async def body(client: Client) -> dict[str, Any]:
        await client.list_tools()
        return {"scope": payload(await client.call_tool("effective_scope", {})),
                "status": payload(await client.call_tool("status", {}))}

    got = with_client(home, repo, _token(home), body)
    assert "coherence" not in got["status"]
    assert "warning" not in got["scope"]


def test_a_name_with_capitals_and_dashes_is_ok(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "My-Repo"
    create_repository(repo, FILES)
    admin.init_home(home)
    _session(home, repo)
    again = _session(home, repo)
    assert _signs(again) == {"semantic_index": "ok", "state_store": "ok"}
    assert "warning" not in again["scope"]


def test_state_store_made_for_another_repository_is_named(tmp_path: Path) -> None:
    """Threat: a state store (sessions, intents, call log) of repository B served as A's."""
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    a, b = tmp_path / "repo-a", tmp_path / "repo-b"
    create_repository(a, FILES)
    create_repository(b, B_FILES)
    admin.init_home(home_a)
    first = _session(home_a, a)
    shutil.copytree(home_a, home_b)  # the same keys: only the store's repository differs
    (home_b / "state.db").unlink()
    _session(home_b, b)  # B's store, made by serving B
    for suffix in ("", "-wal", "-shm"):
        (home_a / f"state.db{suffix}").unlink(missing_ok=True)
        if (home_b / f"state.db{suffix}").exists():
            shutil.copyfile(home_b / f"state.db{suffix}", home_a / f"state.db{suffix}")
    foreign = _session(home_a, a)
    [sign] = [s for s in foreign["status"]["coherence"] if s["sign"] == "state_store"]
    assert sign["state"] == "mismatch" and "repo-b" in sign["reason"]
    assert sign["expected"].startswith("repo-a ") and sign["found"].startswith("repo-b ")
    assert foreign["scope"]["warning"].startswith("warning: ")
    assert _stable(foreign) == _stable(first)


def _doctor(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), "doctor",
                           *args], capture_output=True, text=True, timeout=120, check=False)


def test_a_lane_signed_by_a_foreign_key_shows_in_doctor(tmp_path: Path) -> None:
    """Threat: lanes whose provenance a key outside this home's keyring signed, unnoticed."""
    home, other, repo = tmp_path / "home", tmp_path / "other", tmp_path / "repo"
    create_repository(repo, FILES)
    admin.init_home(home)
    admin.init_home(other)
    token = str(admin.mint_token(home, agent="alice", operations=["read", "write", "commit"],
                                 paths=["src/**"], ttl_seconds=900)["token"])

    async def body(client: Client) -> None:
        await client.list_tools()
        await client.call_tool("write_file", {"path": "src/app.py", "content": "X = 2\n"})
        committed = await client.call_tool("commit", {"message": "two"})
        assert not committed.is_error, payload(committed)

    with_client(home, repo, token, body)
    own = _doctor(home, "--repo", str(repo), "--json")
    assert own.returncode == 0, own.stdout + own.stderr
    [mine] = json.loads(own.stdout)["repositories"]
    assert {s["sign"]: s["state"] for s in mine["signs"]}["lane_signer"] == "ok"
    assert "schema version 4" in json.dumps(json.loads(own.stdout)["checks"])

    foreign = _doctor(other, "--repo", str(repo), "--json")
    assert foreign.returncode == 1, foreign.stdout + foreign.stderr
    [theirs] = json.loads(foreign.stdout)["repositories"]
    [lane] = [s for s in theirs["signs"] if s["sign"] == "lane_signer"]
    assert lane["state"] == "mismatch" and "alice" in lane["reason"]
    assert lane["found"].startswith("e") and lane["found"] not in lane["expected"]
    text = _doctor(other, "--repo", str(repo))
    assert text.returncode == 1 and "lane_signer: mismatch" in text.stdout


def _record_store_owner(home: Path, repo: Path) -> None:
    """Write the state store's owner record as an engine serving ``repo`` would."""
    from engine.admin.state import state_store
    from engine.auth.signkeys import signing_keys
    from engine.service.coherence import Identity, store_record

    vcs = Repository(repo)
    try:
        root = vcs.history_root()
    finally:
        vcs.close()
    keys = [key.key_id for key in signing_keys(home)]
    identity = Identity.of(repo.name, () if root is None else (root,), keys)
    with state_store(home) as store:
        store.record_owner(json.dumps(store_record([identity]), sort_keys=True))


def test_doctor_names_a_state_store_made_for_another_repository(tmp_path: Path) -> None:
    """Threat: doctor saying "all good" for a home whose state store is repository B's."""
    home, a, b = tmp_path / "home", tmp_path / "repo-a", tmp_path / "repo-b"
    create_repository(a, FILES)
    create_repository(b, B_FILES)
    admin.init_home(home)
    _record_store_owner(home, b)
    before = (home / "state.db").read_bytes()
    foreign = _doctor(home, "--repo", str(a), "--json")
    assert foreign.returncode == 1, foreign.stdout + foreign.stderr
    report = json.loads(foreign.stdout)
    [sign] = [s for s in report["signs"] if s["sign"] == "state_store"]
    assert sign["state"] == "mismatch" and "repo-b" in sign["reason"]
    assert sign["found"].startswith("repo-b ")
    assert report["verdict"] == "wrong"
    text = _doctor(home, "--repo", str(a))
    assert text.returncode == 1 and "state_store" in text.stdout
    own = _doctor(home, "--repo", str(b), "--json")
    assert own.returncode == 0, own.stdout + own.stderr
    [ok] = [s for s in json.loads(own.stdout)["signs"] if s["sign"] == "state_store"]
    assert ok["state"] == "ok"
    assert (home / "state.db").read_bytes() == before  # doctor never writes the record


def test_doctor_writes_no_record_into_a_store_without_one(tmp_path: Path) -> None:
    home, a = tmp_path / "home", tmp_path / "repo-a"
    create_repository(a, FILES)
    admin.init_home(home)
    from engine.admin.state import state_store

    with state_store(home) as store:
        assert store.recorded_owner() is None
    out = _doctor(home, "--repo", str(a), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not [s for s in json.loads(out.stdout)["signs"] if s["sign"] == "state_store"]
    with state_store(home) as store:
        assert store.recorded_owner() is None
