"""chit inspect, attenuate, mint and revoke: what an operator is told (real homes and keys)."""

from __future__ import annotations

import json

from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call
from tests.gateway.test_cli import run


def test_inspect_names_the_attenuation_id_beside_the_family_id(world: World) -> None:
    """An operator can end one leaked attenuation without ending the agent's own token."""
    token = world.mint(ops="read,write", paths="src/**")
    narrowed = json.loads(run(world, "attenuate", "-", "--ops", "read", "--json",
                              stdin=token).stdout)["token"]
    plain = run(world, "inspect", token).stdout
    shown = run(world, "inspect", narrowed)
    info = json.loads(run(world, "inspect", narrowed, "--json").stdout)
    assert shown.returncode == 0, shown.stderr
    family, last = info["id"], info["last_block_id"]
    assert family != last and last == info["blocks"][-1]["id"]
    assert f"chit revoke {family}" in shown.stdout and f"chit revoke {last}" in shown.stdout
    assert "only this attenuation" in shown.stdout
    assert "only this attenuation" not in plain  # nothing attenuated: one id

    engine = Engine(world.home, world.repo)
    revoked = run(world, "revoke", last)
    assert revoked.returncode == 0, revoked.stderr
    assert engine.offer(narrowed)["error"]["error"] == "token_revoked"
    assert engine.offer(token)["ok"]  # the family lives on


def test_revoke_says_what_it_revoked_and_when_it_knows_nothing(world: World) -> None:
    token = world.mint(agent="alice")
    engine = Engine(world.home, world.repo)
    call(engine, token, "effective_scope", {}, session="s")  # the id is now in the call log
    token_id = json.loads(run(world, "inspect", token, "--json").stdout)["id"]
    known = run(world, "revoke", token_id)
    assert known.returncode == 0, known.stderr
    assert "agent \"alice\"" in known.stdout and "no record" not in known.stdout
    as_json = json.loads(run(world, "revoke", token_id, "--json").stdout)
    assert as_json["new"] is False and as_json["known"] == {"agent": "alice", "seen": "calls"}

    unknown = run(world, "revoke", "0" * 32)
    assert unknown.returncode == 0, unknown.stderr
    assert "no record" in unknown.stdout
    assert json.loads(run(world, "revoke", "1" * 32, "--json").stdout)["known"] is None


def test_attenuate_refuses_to_leave_no_authority(world: World) -> None:
    """A useless token is refused, not minted: disjoint operations or paths."""
    token = world.mint(ops="read,write", paths="src/**")
    # Scope globs match case-sensitively: SRC/** meets nothing of src/**.
    for extra in (["--ops", "commit"], ["--paths", "docs/**"], ["--paths", "SRC2/*.py"],
                  ["--paths", "SRC/**"], ["--paths", "Src/a.py"]):
        out = run(world, "attenuate", "-", *extra, stdin=token)
        assert out.returncode == 2, (extra, out.stdout)
        assert "no authority would be left" in out.stderr
        assert "chit_" not in out.stdout
    for extra in (["--ops", "read,commit"], ["--paths", "**/*.py"], ["--paths", "src/a/**"]):
        out = run(world, "attenuate", "-", *extra, stdin=token)
        assert out.returncode == 0, (extra, out.stderr)


def test_mint_delegable_needs_sub_token_issue(world: World) -> None:
    base = ["mint", "--agent", "lead", "--paths", "src/**", "--ttl", "1h", "--repos", "*"]
    refused = run(world, *base, "--ops", "read", "--delegable")
    assert refused.returncode == 2 and "sub-token:issue" in refused.stderr
    assert "chit_" not in refused.stdout
    minted = run(world, *base, "--ops", "read,sub-token:issue", "--delegable")
    assert minted.returncode == 0, minted.stderr
