"""Read-only mode: the operator's freeze (state store) and read-only edges, real engine."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from engine.catalog.declarations import TOOLS
from engine.service import Engine
from engine.tools.table import handler_for
from tests.conftest import World
from tests.engine.engine_calls import error as code

READ_ONLY = {t.name for t in TOOLS if t.read_only and handler_for(t.name) is not None}
BROAD = {"ops": "read,write,commit,sub-token:issue", "paths": "**", "delegable": True}


def cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*world.cli(), *args], capture_output=True, text=True, timeout=60, check=False
    )


def freeze(world: World, *args: str) -> dict[str, Any]:
    out = cli(world, "freeze", *args, "--json")
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def test_freeze_from_another_process_changes_the_offer_on_the_next_call(world: World) -> None:
    """Threat: a compromised agent keeps writing while the operator contains an incident."""
    engine = Engine(world.home, world.repo)
    token = world.mint(**BROAD)
    before = engine.offer(token)
    assert "write_file" in {t["name"] for t in before["tools"]}
    listed = before["catalog_hash"]
    assert engine.invoke(token, "write_file", {"path": "src/a.py", "content": "a"},
                         session="s", offered_catalog_hash=listed)["ok"]

    state = freeze(world, "on", "--reason", "incident 7")
    assert state["frozen"] and state["reason"] == "incident 7" and state["logged"]

    frozen = engine.offer(token)
    names = {t["name"] for t in frozen["tools"]}
    assert names == READ_ONLY
    assert all(t["annotations"]["readOnlyHint"] for t in frozen["tools"])
    assert frozen["catalog_hash"] != listed
    # Writes listed before the freeze fail, and so does delegation and commit.
    for tool, args in [
        ("write_file", {"path": "src/b.py", "content": "b"}),
        ("delete_file", {"path": "src/app.py"}),
        ("move_file", {"source": "src/app.py", "destination": "src/x.py"}),
        ("resolve_conflict", {"path": "src/app.py", "resolution": "ours"}),
        ("commit", {"message": "during the freeze"}),
        ("issue_sub_token", {"agent": "alice.h", "ops": ["read"], "paths": ["src/**"],
                             "ttl_seconds": 60}),
    ]:
        for catalog in (listed, frozen["catalog_hash"], None):
            answer = engine.invoke(token, tool, args, session="s", offered_catalog_hash=catalog)
            assert code(answer) == "engine_frozen", tool
            assert answer["error"]["offered"] == sorted(READ_ONLY)
    # Reads still work, and see what was staged before the freeze.
    read = engine.invoke(token, "read_file", {"path": "src/a.py"}, session="s")
    assert read["ok"] and read["result"]["content"] == "a"
    assert engine.invoke(token, "status", {}, session="s")["ok"]
    assert world.refs().get("refs/heads/agent/alice") is None

    assert freeze(world, "status") == {
        "frozen": True, "reason": "incident 7", "changed_at": state["changed_at"],
    }
    assert freeze(world, "off")["frozen"] is False
    # The catalog listed during the freeze is stale now: list again, then write.
    stale = engine.invoke(token, "commit", {"message": "after"}, session="s",
                          offered_catalog_hash=frozen["catalog_hash"])
    assert code(stale) == "catalog_changed"
    again = engine.offer(token)["catalog_hash"]
    assert again == listed
    done = engine.invoke(token, "commit", {"message": "after"}, session="s",
                         offered_catalog_hash=again)
    assert done["ok"], done


@pytest.mark.parametrize(
    "args",
    [
        {"path": "src/b.py", "content": "b", "frozen": False},
        {"path": "src/b.py", "content": "b", "read_only": False, "force": True},
        {"path": "src/b.py", "content": "b", "override": "engine_frozen", "mode": "write"},
        {"path": "src/b.py", "content": "b", "_meta": {"unfreeze": True}},
        {},
        None,
    ],
)
def test_no_tool_argument_lifts_the_freeze(world: World, args: dict[str, Any] | None) -> None:
    """Threat: an agent that finds an argument, session or catalog hash that bypasses the freeze."""
    engine = Engine(world.home, world.repo)
    token = world.mint(**BROAD)
    listed = engine.offer(token)["catalog_hash"]
    freeze(world, "on")
    for session in ("s", "operator", "frozen.false", "read-only.off"):
        answer = engine.invoke(token, "write_file", args, session=session,
                               offered_catalog_hash=listed)
        assert code(answer) == "engine_frozen"
    # Case variants and unknown names stay unknown: the freeze reveals nothing more.
    for name in ("Write_File", "unfreeze", "freeze", "set_mode"):
        answer = engine.invoke(token, name, args, session="s", offered_catalog_hash=listed)
        assert code(answer) == "tool_not_offered"


def test_a_tool_the_token_never_held_stays_not_offered_while_frozen(world: World) -> None:
    engine = Engine(world.home, world.repo)
    token = world.mint(ops="read")
    listed = engine.offer(token)["catalog_hash"]
    freeze(world, "on")
    # A read token's catalog does not change under a freeze: it had only read tools.
    assert engine.offer(token)["catalog_hash"] == listed
    answer = engine.invoke(token, "write_file", {"path": "src/a.py", "content": "x"},
                           session="s", offered_catalog_hash=listed)
    assert code(answer) == "tool_not_offered"


def test_read_only_edge_is_per_process(world: World) -> None:
    """``chit mcp --read-only``: this engine is read-only whatever the operator's mode."""
    token = world.mint(**BROAD)
    reader = Engine(world.home, world.repo, read_only=True)
    writer = Engine(world.home, world.repo)
    offer = reader.offer(token)
    assert {t["name"] for t in offer["tools"]} == READ_ONLY
    answer = reader.invoke(token, "write_file", {"path": "src/a.py", "content": "x"},
                           session="r", offered_catalog_hash=offer["catalog_hash"])
    assert code(answer) == "engine_frozen"
    assert "operator" not in answer["error"]["message"]
    listed = writer.offer(token)["catalog_hash"]
    assert writer.invoke(token, "write_file", {"path": "src/a.py", "content": "x"},
                         session="w", offered_catalog_hash=listed)["ok"]
    assert freeze(world, "off")["frozen"] is False
    assert code(reader.invoke(token, "commit", {"message": "m"}, session="r",
                              offered_catalog_hash=offer["catalog_hash"])) == "engine_frozen"


def test_freeze_cli_text_and_errors(world: World) -> None:
    assert cli(world, "freeze", "status").stdout.strip() == "not frozen"
    out = cli(world, "freeze", "on", "--reason", "maintenance \u2014 back at 10")
    assert out.returncode == 0 and out.stdout.startswith("frozen:")
    status = cli(world, "freeze", "status").stdout
    assert status.startswith("frozen since ") and "maintenance" in status
    bad = cli(world, "freeze", "on", "--reason", "two\nlines")
    assert bad.returncode == 2 and "--reason" in bad.stderr
    assert cli(world, "freeze", "off").stdout.startswith("unfrozen:")
    # Both changes are in the call log, as operator entries.
    shown = json.loads(cli(world, "audit", "log", "show", "--agent", "(operator)",
                           "--json").stdout)
    assert [(e["tool"], e["arguments"]) for e in shown] == [
        ("chit freeze on", {"reason": "maintenance \u2014 back at 10"}),
        ("chit freeze off", {}),
    ]
