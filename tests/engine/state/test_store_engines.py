"""Two engines sharing a PostgreSQL store: what one records, the other acts on at once.

The engine-level view of the contract: commits on a shared lane (under the
store's lane lock), an operator's freeze and revocation through ``--state``,
and one call log that verifies.
"""

from __future__ import annotations

import pygit2

from engine import admin
from engine.auth import signkeys
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call as invoke
from tests.engine.engine_calls import error, land, ok


def test_two_engines_on_one_postgresql_store_share_freeze_revocation_and_log(
    world: World, postgres_url: str
) -> None:
    token = world.mint(agent="alice", ops="read,write,commit")
    token_id = admin.inspect_token(token)["id"]
    with Engine(world.home, world.repo, state=postgres_url) as first, \
            Engine(world.home, world.repo, state=postgres_url) as second:
        land(first, token, "def main():\n    return 2\n", session="a")
        land(second, token, "def main():\n    return 3\n", path="src/api/v1.py", session="b")
        admin.set_freeze(world.home, True, reason="incident", state=postgres_url)
        assert error(invoke(second, token, "write_file",
                            {"path": "src/x.py", "content": "x"}, "b")) == "engine_frozen"
        admin.set_freeze(world.home, False, state=postgres_url)
        admin.revoke(world.home, token_id, state=postgres_url)
        assert error(invoke(first, token, "status", {}, "a")) == "token_revoked"
        assert ok(invoke(first, world.mint(ops="read"), "status", {}, "c")) is not None
    repo = pygit2.Repository(str(world.repo))
    tip = repo.revparse_single("refs/heads/agent/alice")
    assert len(tip.parents) == 1 and tip.parents[0].parents[0].id == repo.head.target
    assert repo[tip.tree["src/app.py"].id].data == b"def main():\n    return 2\n"
    assert repo[tip.tree["src/api/v1.py"].id].data == b"def main():\n    return 3\n"
    keys = signkeys.load_public_keys(admin.export_public(world.home))
    report = admin.verify_call_log(world.home, keys, state=postgres_url)
    assert report["ok"], report["findings"]
    assert report["entries"] >= 8 and report["unsigned"] is None  # signed when they stopped
