"""Shared fixtures: a real chit home (real keys) and a real git repository."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import pytest
from hypothesis import settings

from engine import admin
from engine.admin.seed import create_repository
from tests.pgserver import PostgresServer

# Tests assert behaviour, never timing: no per-example deadline (a loaded CI
# machine must not turn a slow example into a failure).
# No example database: runs do not depend on (or write) a local .hypothesis folder.
settings.register_profile("chit", deadline=None, database=None)
settings.load_profile("chit")

FILES: dict[str, bytes] = {
    "README.md": b"# fixture\n",
    "src/app.py": b"def main():\n    return 1\n",
    "src/api/v1.py": b"ROUTES = []\n",
    "src/data.bin": bytes(range(256)),
    "src_old/legacy.py": b"OLD = True\n",
    "docs/guide.md": b"# guide\n",
    "src/.env": b"SECRET=1\n",
}


@dataclass
class World:
    """A chit home plus a repository, and helpers to mint tokens and run the CLI."""

    home: Path
    repo: Path
    main_id: str

    def mint(
        self,
        agent: str = "alice",
        ops: str = "read,write,commit",
        paths: str = "src/**",
        ttl: int = 900,
        **kw: Any,
    ) -> str:
        info = admin.mint_token(
            self.home,
            agent=agent,
            operations=ops.split(","),
            paths=paths.split(","),
            ttl_seconds=ttl,
            **kw,
        )
        return str(info["token"])

    def refs(self) -> dict[str, str]:
        repo = pygit2.Repository(str(self.repo))
        return {name: str(repo.references[name].target) for name in repo.references}

    def cli(self) -> list[str]:
        return [sys.executable, "-m", "gateway.cli", "--home", str(self.home)]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    main_id = create_repository(repo, FILES)
    admin.init_home(home)
    yield World(home=home, repo=repo, main_id=main_id)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole run, started on first use (tests/pgserver.py)."""
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> Iterator[str]:
    """A fresh database on that server, its URL; dropped after the test."""
    with postgres.database() as url:
        yield url
