"""Engines note themselves and the edges they serve (docs/vital-signs.md, "Who was seen")."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from engine.errors import ConfigurationError
from engine.limits import LIMITS
from engine.service import Engine
from engine.service.presence import escape_label
from engine.state import open_store
from tests.conftest import World


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/state.db"
    return str(request.getfixturevalue("postgres_url"))


def test_an_engine_notes_itself_at_start_and_the_edges_it_serves(world: World, state: str) -> None:
    with Engine(world.home, world.repo, state=state, role="worker", clock=lambda: 5_000.0) as eng:
        [me] = eng.store.presence(since=0)
        assert (me.kind, me.role, me.started, me.seen) == ("engine", "worker", 5_000, 5_000)
        assert me.label == f"{socket.gethostname()}/{os.getpid()}"
        eng.note_edge("edge-host/77")
        eng.note_edge(None)  # an edge that names nothing is not noted
        assert eng._presence.write()
        other = open_store(world.home, state)  # what another engine reads
        try:
            rows = {(r.kind, r.label): r for r in other.presence(since=0)}
        finally:
            other.close()
    assert set(rows) == {("engine", me.label), ("edge", "edge-host/77")}
    assert rows[("edge", "edge-host/77")].role == "edge"


def test_an_edge_label_is_escaped_and_cut(world: World) -> None:
    """Threat: an edge's header carrying terminal escapes or a huge value into doctor's report."""
    hostile = "\x1b[31mred\x1b[0m\nhost\\/1 é☃" + "z" * 500
    label = escape_label(hostile)
    assert label is not None and len(label) <= LIMITS.presence_label_chars
    assert label.startswith("\\x1b[31mred\\x1b[0m\\x0ahost\\x5c/1\\x20\\xe9\\u2603")
    assert all("!" <= c <= "~" for c in label)
    assert escape_label("") is None and escape_label(42) is None
    with Engine(world.home, world.repo) as eng:
        eng.note_edge(hostile)
        assert eng._presence.write()
        edges = [r.label for r in eng.store.presence(since=0) if r.kind == "edge"]
    assert edges == [label]


def test_an_unknown_role_is_refused(world: World) -> None:
    with pytest.raises(ConfigurationError):
        Engine(world.home, world.repo, role="intruder")
