"""Fixtures of the store contract suite: every test runs on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.state import Store, open_store
from tests.engine.state.storekit import MakeStore


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A state URL of each kind: a SQLite file in tmp_path, a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/state.db"
    return str(request.getfixturevalue("postgres_url"))


def _factory(url: str, tmp_path: Path) -> Iterator[MakeStore]:
    opened: list[Store] = []

    def make(other: str | None = None, *, migrate: bool = True) -> Store:
        store = open_store(tmp_path / "home", other or url, migrate=migrate)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def make_store(store_url: str, tmp_path: Path) -> Iterator[MakeStore]:
    """Opens stores (another engine's instance each time), closed after the test."""
    yield from _factory(store_url, tmp_path)


@pytest.fixture
def make_pg_store(postgres_url: str, tmp_path: Path) -> Iterator[MakeStore]:
    """The same on PostgreSQL only, for what SQLite has no counterpart of."""
    yield from _factory(postgres_url, tmp_path)


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    return make_store()
