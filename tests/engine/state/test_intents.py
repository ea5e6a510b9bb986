"""Intents seen through engines: they end with their token or after an hour.

Threat: an intent outlives its session's token. The store's side of intents
(shared, expiring, bounded, on both stores): test_store_intents.py.
"""

from __future__ import annotations

import time

from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import Caller

call = Caller(per_token=12).ok  # the result of a call that must succeed


def test_an_intent_ends_with_its_token_or_after_an_hour(world: World) -> None:
    now = [1_000_000.0]
    first = Engine(world.home, world.repo, clock=lambda: now[0])
    second = Engine(world.home, world.repo, clock=lambda: now[0])  # another engine
    short = world.mint(agent="alice", ops="read", ttl=600)
    long = world.mint(agent="carol", ops="read", ttl=7200)
    bob = world.mint(agent="bob", ops="read", ttl=7200)
    now[0] = time.time()
    call(first, short, "project_context", {"paths": ["src/app.py"]}, "a")
    call(first, long, "project_context", {"paths": ["src/app.py"]}, "c")
    seen = call(second, bob, "project_context", {"paths": ["src/app.py"]}, "b")
    assert [p["agent"] for p in seen["peers"]] == ["alice", "carol"]
    now[0] += 601  # alice's token expired: so did her intent
    seen = call(second, bob, "project_context", {"paths": ["src/app.py"]}, "b")
    assert [p["agent"] for p in seen["peers"]] == ["carol"]
    now[0] += 3000  # more than an hour after carol declared it
    seen = call(second, bob, "project_context", {"paths": ["src/app.py"]}, "b")
    assert seen["peers"] == []
