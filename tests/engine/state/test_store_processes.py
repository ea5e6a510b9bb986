"""The store contract across processes, on both stores: engines that share only the store.

Each racer (tests/engine/state/racer.py) is its own Python process with its
own store instance; they start together on a signal.
"""

from __future__ import annotations

import time
from pathlib import Path

from engine import admin
from engine.audit import logverify
from engine.auth import signkeys
from engine.state import Store
from tests.engine.state.storekit import MakeStore, race


def test_a_waiter_in_another_process_wakes_with_the_new_position(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    start = store.latest_change()
    announced: list[int] = []

    def announce() -> None:
        time.sleep(0.5)  # the racer is most likely waiting; either way it must see it
        announced.append(store.announce("policy", now=1))

    (answer,) = race(tmp_path, [["wait", store_url, str(start)]], then=announce)
    assert answer["position"] == announced[0] == start + 1  # woke with it, not timed out


def test_one_jti_is_claimed_once_across_8_processes(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    """Threat: racing one JWT through engine processes on several hosts."""
    answers = race(tmp_path, [["jti", store_url]] * 8)
    assert [a["won"] for a in answers].count(True) == 1
    assert store.claim_jti("https://idp.example", "jti-race", keep_until=2**40,
                           now=int(time.time())) is False


def test_a_rate_window_admits_exactly_its_room_across_processes(
    store_url: str, tmp_path: Path
) -> None:
    """Threat: engines on several hosts together exceeding an agent's rate limit."""
    answers = race(tmp_path, [["rate", store_url, "agent-window", "13", "3600", "5"]] * 6)
    assert sum(a["admitted"] for a in answers) == 13


def test_call_log_appends_from_processes_verify_as_one_tree(
    make_store: MakeStore, store_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    admin.init_home(home)
    rounds, batch, racers = 6, 3, 4
    answers = race(tmp_path, [["append", store_url, str(home), str(rounds), str(batch)]]
                   * racers)
    sizes = sorted(size for a in answers for size in a["sizes"])
    total = rounds * batch * racers
    assert sizes == list(range(batch, total + 1, batch))  # every append saw the one before
    store = make_store()
    keys = signkeys.load_public_keys(admin.export_public(home))
    report = logverify.verify(store.log_rows(), store.log_head(), keys, tree=store.log_tree(),
                              checkpoints=store.log_checkpoints())
    assert report["ok"], report["findings"]
    assert report["entries"] == total
    assert report["checkpoint"] is not None


def test_a_lane_lock_excludes_across_processes(postgres_url: str, tmp_path: Path) -> None:
    """Threat: two engines on different hosts moving one lane at once."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    answers = race(tmp_path, [["lane", postgres_url, "repo:agent/x", str(counter), "15"]] * 4)
    assert [a["overlaps"] for a in answers] == [0] * 4
    assert counter.read_text() == "60"  # no lost update: each holder saw the last one's
