"""An engine whose state store goes away: every call refused, nothing raised, back after.

Real engine, real PostgreSQL: the database stops accepting connections and its
sessions are ended, as during an outage or a restart.

Threat: a database outage turning into calls that are allowed unchecked, into
exceptions that end an edge's connection, or into a log of a traceback per call.
"""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

from engine.service import Engine, Refused
from tests.conftest import World


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def _allow(url: str, allowed: bool) -> None:
    name = _database(url)
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE datname = %s", (name,))


def test_a_store_outage_refuses_calls_and_offers_then_recovers(
    world: World, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token = world.mint()
    with Engine(world.home, world.repo, state=postgres_url) as engine:
        assert engine.offer(token).ok
        _allow(postgres_url, False)
        try:
            caplog.set_level(logging.ERROR, logger="chit.engine")
            offer = engine.offer(token)
            call = engine.invoke(token, "read_file", {"path": "src/app.py"}, session="s1")
        finally:
            _allow(postgres_url, True)
        assert isinstance(offer, Refused) and offer.code == "internal_error"
        assert isinstance(call, Refused) and call.code == "internal_error"
        assert "state store" in call.message
        records = [r for r in caplog.records if r.name == "chit.engine"]
        assert records and all(r.exc_info is None for r in records)  # one line, no traceback
        # The pool reconnects in the background with a backoff that grew while
        # the database refused it: recovery comes without a restart, on a
        # call shortly after (bounded, so a pool that never recovers fails).
        deadline = time.monotonic() + 60
        while not engine.offer(token).ok:
            assert time.monotonic() < deadline, "the engine did not recover from the outage"
            time.sleep(0.5)
        assert engine.invoke(token, "read_file", {"path": "src/app.py"}, session="s1").ok
