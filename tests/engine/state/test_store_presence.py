"""The presence table (docs/vital-signs.md, "Who was seen") on SQLite and a real PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.limits import LIMITS
from engine.state import Presence, Store
from tests.engine.state.storekit import MakeStore

ENGINE = Presence("engine", "host-a/101", "worker", 1_000, 1_000)
EDGE = Presence("edge", "host-b/202", "edge", 1_010, 1_020)


def test_engines_and_edges_seen_are_read_back_newest_first(make_store: MakeStore) -> None:
    first, second = make_store(), make_store()
    first.note_presence([ENGINE, EDGE], now=1_020)
    assert second.presence(since=0) == [EDGE, ENGINE]
    assert second.presence(since=1_001) == [EDGE]  # the window: seen at or after `since`


def test_a_row_moves_forward_and_an_edge_keeps_when_it_was_first_seen(store: Store) -> None:
    store.note_presence([ENGINE, EDGE], now=1_020)
    store.note_presence([replace(ENGINE, started=1_500, seen=1_600),
                         replace(EDGE, started=1_550, seen=1_600)], now=1_600)
    store.note_presence([replace(EDGE, started=1_590, seen=1_590)], now=1_590)  # late, older
    rows = {r.kind: r for r in store.presence(since=0)}
    assert rows["engine"] == replace(ENGINE, started=1_500, seen=1_600)  # a new process
    assert rows["edge"] == replace(EDGE, started=1_010, seen=1_600)  # seen never goes back


def test_rows_not_seen_for_the_keep_time_are_deleted(store: Store) -> None:
    store.note_presence([ENGINE], now=1_000)
    later = 1_000 + LIMITS.presence_keep_seconds + 1
    store.note_presence([replace(EDGE, seen=later)], now=later)
    assert [r.kind for r in store.presence(since=0)] == ["edge"]


def test_the_table_keeps_the_most_recently_seen_rows_only(store: Store) -> None:
    """Threat: an edge naming itself anew on every call fills the store without bound."""
    rows = [Presence("edge", f"flood/{i}", "edge", 2_000, 2_000 + i)
            for i in range(LIMITS.presence_rows + 5)]
    store.note_presence(rows, now=2_000 + len(rows))
    kept = store.presence(since=0)
    assert len(kept) == LIMITS.presence_rows
    assert {r.label for r in kept} == {f"flood/{i}" for i in range(5, len(rows))}


@pytest.mark.parametrize("bad", [
    replace(EDGE, kind="ghost"),
    replace(EDGE, label=""),
    replace(EDGE, label="x" * (LIMITS.presence_label_chars + 1)),
    replace(EDGE, role=""),
    replace(EDGE, seen=-1),
])
def test_a_malformed_row_is_refused_and_nothing_is_written(store: Store, bad: Presence) -> None:
    with pytest.raises(ValueError):
        store.note_presence([ENGINE, bad], now=1_020)
    assert store.presence(since=0) == []
