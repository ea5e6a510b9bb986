"""``chit index``: the first index is paid before any agent asks (real repository, real CLI)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from engine.git.repository import Repository
from engine.semantic.persist import DB_NAME
from gateway.demo import stdio_server_params
from tests.conftest import World
from tests.gateway.test_cli import run
from tests.gateway.test_progress import Heard, big  # noqa: F401 - the fixture
from tests.gateway.mcp_client import payload


def _rows(repo: Path) -> int:
    db = Path(Repository(repo).chit_dir) / DB_NAME
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables
                   if t != "meta")


def test_index_ahead_of_time_then_no_agent_waits(big: World) -> None:  # noqa: F811
    assert _rows(big.repo) == 0
    first = run(big, "index", "--repo", str(big.repo), "--json")
    assert first.returncode == 0, first.stderr
    [done] = json.loads(first.stdout)
    assert done["files"] > 300 and done["parsed"] == done["files"] and not done["up_to_date"]
    assert done["base"] == "main" and done["commit"] == big.main_id
    assert _rows(big.repo) > 0
    again = run(big, "index", "--repo", str(big.repo))
    assert again.returncode == 0 and "up to date" in again.stdout
    assert "\r" not in again.stderr  # no bar when stderr is not a terminal

    token = big.mint(ops="read")

    async def call() -> tuple[Heard, dict[str, Any]]:
        heard = Heard()
        async with Client(stdio_server_params(big.home, big.repo, token)) as client:
            found = payload(await client.call_tool(
                "search_symbols", {"query": "BaseModel", "limit": 1}, progress_callback=heard))
        return heard, found

    heard, found = anyio.run(call)
    assert found["symbols"][0]["symbol"] == "BaseModel"
    assert not any(m and m.startswith("indexing") for _p, _t, m in heard.values)


def test_index_names_an_unknown_repository(world: World) -> None:
    out = run(world, "index", "--repo", "nosuch")
    assert out.returncode == 2 and "nosuch" in out.stderr and "Traceback" not in out.stderr


def _on_a_terminal(argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal: (status, stdout, what the terminal got)."""
    import os
    import pty
    import subprocess

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=follower, text=True,
                              timeout=120, check=False)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return done.returncode, done.stdout, b"".join(chunks).decode("utf-8", "replace")


def test_the_bar_is_drawn_on_a_terminal_only(world: World) -> None:
    status, stdout, terminal = _on_a_terminal([*world.cli(), "index", "--repo", str(world.repo)])
    assert status == 0 and "indexed" in stdout
    assert "indexing" in terminal and "[" in terminal and "\r" in terminal
    assert "\r" not in stdout
    token = world.mint()
    from engine.service import Engine
    from tests.engine.engine_calls import land

    with Engine(world.home, world.repo) as engine:
        land(engine, token, {"src/a.py": "A = 1\n"}, message="add a")
    status, stdout, terminal = _on_a_terminal(
        [*world.cli(), "audit", "verify", "--repo", str(world.repo)])
    assert status == 0, stdout + terminal
    assert "verifying agent/alice" in terminal and "verified" in stdout
