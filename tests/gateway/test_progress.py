"""Progress notifications of a long call, received by the official client (stdio and HTTP).

The long call is the first semantic call on a cold tree of a few hundred real
files (several installed packages' sources): the engine reports files indexed
of how many, and the edge sends ``notifications/progress`` for the client's
progress token. Nothing here asserts on timings: the tree is large enough that
its first index outlasts the edge's first tick many times over.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import hypothesis
import mcp
import pydantic
import pytest
import starlette
from mcp import Client

from engine import admin
from engine.admin.seed import create_repository, files_from_directory
from gateway.demo import stdio_server_params
from tests.conftest import World
from tests.gateway.http_client import http_client, running_edge
from tests.gateway.mcp_client import payload

PACKAGES = (hypothesis, pydantic, mcp, starlette)


@pytest.fixture
def big(tmp_path: Path) -> World:
    """A repository of several packages' real sources, and a home."""
    files: dict[str, bytes] = {}
    for package in PACKAGES:
        root = Path(package.__file__).parent
        files |= files_from_directory(root, f"src/{package.__name__}")
    home, repo = tmp_path / "home", tmp_path / "repo"
    main_id = create_repository(repo, files)
    admin.init_home(home)
    return World(home=home, repo=repo, main_id=main_id)


@dataclasses.dataclass
class Heard:
    """The progress notifications one call received."""

    values: list[tuple[float, float | None, str | None]] = dataclasses.field(
        default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.values.append((progress, total, message))


def _check(heard: Heard) -> None:
    assert heard.values, "no progress notification arrived"
    progress = [p for p, _t, _m in heard.values]
    assert progress == sorted(progress) and len(set(progress)) == len(progress)  # it rises
    for value, total, _message in heard.values:
        assert total is None or value <= total
    assert any(m == "indexing the repository" for _p, _t, m in heard.values)
    # Threat: a narrow token learning how many files the repository holds
    # outside its scope. The view is shared, so its progress is in 5% steps of 100.
    # (Engine counts continue from the heartbeats sent before them, if any.)
    indexing = [(v, t) for v, t, m in heard.values if m == "indexing the repository"]
    offset = len([m for _v, _t, m in heard.values[: heard.values.index(
        next(h for h in heard.values if h[2] == "indexing the repository"))]])
    for value, total in indexing:
        assert total == offset + 100 and (value - offset) % 5 == 0


async def _calls(client: Client) -> tuple[Heard, dict[str, Any], dict[str, Any]]:
    heard = Heard()
    first = payload(await client.call_tool(
        "search_symbols", {"query": "BaseModel", "limit": 1}, progress_callback=heard))
    # A call without a progress token gets its answer and nothing else.
    second = payload(await client.call_tool("search_symbols", {"query": "Router", "limit": 1}))
    return heard, first, second


def test_a_cold_index_reports_progress_over_stdio(big: World) -> None:
    token = big.mint(ops="read")

    async def run() -> tuple[Heard, dict[str, Any], dict[str, Any]]:
        async with Client(stdio_server_params(big.home, big.repo, token)) as client:
            return await _calls(client)

    heard, first, second = anyio.run(run)
    _check(heard)
    assert first["symbols"] and first["symbols"][0]["symbol"] == "BaseModel"
    assert second["symbols"][0]["symbol"] == "Router"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_cold_index_reports_progress_over_http(big: World, mode: str) -> None:
    token = big.mint(ops="read")

    async def run() -> tuple[Heard, dict[str, Any], dict[str, Any]]:
        async with http_client(edge.url, token, mode=mode) as (client, _):
            return await _calls(client)

    with running_edge(big) as edge:
        heard, first, _second = anyio.run(run)
    _check(heard)
    assert first["symbols"][0]["symbol"] == "BaseModel"
