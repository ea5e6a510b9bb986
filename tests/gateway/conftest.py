"""The ``edge`` fixture: every MCP contract test runs embedded and against a remote engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import World
from tests.gateway.mcp_client import MODES, TOKEN_TEXT, Edge, engine_server


@pytest.fixture(params=MODES)
def edge(request: pytest.FixtureRequest, world: World) -> Iterator[Edge]:
    """``chit mcp --repo`` (embedded), or ``chit mcp --engine unix:...`` and ``chit engine serve``.

    In remote mode the edge's home is an empty folder: an edge that tried to read
    a key, the policy or the state would fail. The engine's output is checked
    for token text when the test ends.
    """
    if request.param == "embedded":
        yield Edge("embedded", world.home, world.repo)
        return
    edge_home = world.home.parent / "edge-home"
    edge_home.mkdir()
    with engine_server(world.home, world.repo, verbose=True) as server:
        yield Edge("remote", world.home, world.repo, engine=server, edge_home=edge_home)
    assert not TOKEN_TEXT.search(server.output()), "the engine logged a token"
    assert list(edge_home.iterdir()) == [], "the edge wrote to its home"
