"""The state store's owner record (docs/vital-signs.md) on SQLite and a real PostgreSQL."""

from __future__ import annotations

from engine.limits import LIMITS
from engine.state import Store
from tests.engine.state.storekit import MakeStore


def test_the_first_record_stays_and_reads_back(make_store: MakeStore) -> None:
    first, second = make_store(), make_store()
    assert first.recorded_owner() is None
    assert first.record_owner('{"keys": []}') == '{"keys": []}'
    assert second.record_owner('{"other": 1}') == '{"keys": []}'
    assert second.recorded_owner() == '{"keys": []}'


def test_a_record_over_the_bound_is_never_read(store: Store) -> None:
    """Threat: a planted owner row of many megabytes loaded on every engine start and status."""
    huge = "x" * (LIMITS.identity_record_bytes + 1)
    store.record_owner(huge)
    assert store.recorded_owner() is None
    assert store.record_owner('{"keys": []}') == '{"keys": []}'  # the planted row not returned
    assert store.recorded_owner() is None  # and still not replaced
