"""Confirmation on real engine calls: ``[confirm]`` asks, previews, and changes nothing.

A listed tool called without ``"confirm": true`` is refused with
``confirmation_required`` and a preview, after the policy and catalog checks
and before the rate limit and the handler; with it, the call runs as before
(docs/policy.md, "Confirmation"; docs/tools.md, "Confirmation").
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

import pygit2
import pytest

from engine import admin
from engine.admin.calllog import call_log_entries
from engine.audit.verify import verify_repository
from engine.auth import signkeys
from engine.service import Engine
from tests.conftest import World

ALL = ["write_file", "delete_file", "move_file", "resolve_conflict", "discard", "commit",
       "issue_sub_token"]


def write_policy(world: World, text: str) -> None:
    path = world.home / "policy.toml"
    fresh = path.with_suffix(".new")
    fresh.write_text(text, encoding="utf-8")
    os.replace(fresh, path)


def confirm_policy(world: World, tools: list[str], extra: str = "") -> None:
    write_policy(world, f"version = 1\n{extra}\n[confirm]\ntools = {tools!r}\n")


class Agent:
    """One session of one token, as an edge that lists tools before each call."""

    def __init__(self, engine: Engine, token: str, session: str = "s1") -> None:
        self.engine, self.token, self.session = engine, token, session

    def offer(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.engine.offer(self.token)
        assert answer["ok"], answer
        return answer

    def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        listed = self.engine.offer(self.token).get("catalog_hash")
        answer: dict[str, Any] = self.engine.invoke(
            self.token, tool, args, session=self.session, offered_catalog_hash=listed
        )
        return answer

    def ok(self, tool: str, **args: Any) -> dict[str, Any]:
        answer = self(tool, **args)
        assert answer["ok"], answer
        result: dict[str, Any] = answer["result"]
        return result

    def asked(self, tool: str, **args: Any) -> dict[str, Any]:
        """The preview of a call that must be refused with confirmation_required."""
        answer = self(tool, **args)
        assert not answer["ok"], answer
        assert answer["error"]["error"] == "confirmation_required", answer
        assert "nothing was changed" in answer["error"]["message"]
        preview: dict[str, Any] = answer["error"]["preview"]
        assert preview["tool"] == tool
        return preview

    def staged(self) -> list[dict[str, str]]:
        staged: list[dict[str, str]] = self.ok("status")["staged"]
        return staged


@pytest.fixture
def engine(world: World) -> Iterator[Engine]:
    with Engine(world.home, world.repo) as running:
        yield running


def refs(world: World) -> dict[str, str]:
    return world.refs()


# --- offers ------------------------------------------------------------------------


def test_without_confirm_nothing_asks_and_the_argument_is_unknown(
    world: World, engine: Engine
) -> None:
    """Off by default: no schema has confirm, and a call that sends it is invalid."""
    alice = Agent(engine, world.mint())
    offer = alice.offer()
    assert all("confirm" not in t["input_schema"]["properties"] for t in offer["tools"])
    refused = alice("delete_file", path="src/app.py", confirm=True)
    assert refused["error"]["error"] == "invalid_argument"
    assert refused["error"]["fields"] == ["confirm"]
    assert alice.ok("delete_file", path="src/app.py")["change"] == "deleted"


def test_listed_tools_offer_confirm_and_others_refuse_it(world: World, engine: Engine) -> None:
    plain_hash = Agent(engine, world.mint()).offer()["catalog_hash"]
    confirm_policy(world, ["delete_file", "commit"])
    alice = Agent(engine, world.mint())
    offer = alice.offer()
    asking = {t["name"] for t in offer["tools"] if "confirm" in t["input_schema"]["properties"]}
    assert asking == {"delete_file", "commit"}
    assert offer["catalog_hash"] != plain_hash
    assert alice.ok("effective_scope")["catalog_hash"] == offer["catalog_hash"]
    refused = alice("write_file", path="src/new.py", content="x", confirm=True)
    assert refused["error"]["error"] == "invalid_argument"
    assert refused["error"]["fields"] == ["confirm"]
    for wrong in ("true", 1, None):
        answer = alice("delete_file", path="src/app.py", confirm=wrong)
        assert answer["error"]["error"] == "invalid_argument", wrong
    # A reader holds none of the listed tools: its catalog is the one without [confirm].
    reader = world.mint(agent="reader", ops="read")
    write_policy(world, "version = 1\n")
    before = Agent(engine, reader).offer()["catalog_hash"]
    confirm_policy(world, ALL)
    assert Agent(engine, reader).offer()["catalog_hash"] == before


def test_a_reload_that_changes_confirm_changes_the_offer(world: World, engine: Engine) -> None:
    """The offer is the current policy's: a stale listing cannot skip the question."""
    alice = Agent(engine, world.mint())
    plain = alice.offer()["catalog_hash"]
    confirm_policy(world, ["delete_file"])
    asking = alice.offer()["catalog_hash"]
    assert asking != plain
    # An edge that still presents the catalog it listed before the reload must list again.
    stale = engine.invoke(alice.token, "delete_file", {"path": "src/app.py"}, session="s1",
                          offered_catalog_hash=plain)
    assert stale["error"]["error"] == "catalog_changed"
    assert stale["error"]["catalog_hash"] == asking
    assert alice.asked("delete_file", path="src/app.py")["exists"] is True
    write_policy(world, "version = 1\n")
    assert alice.offer()["catalog_hash"] == plain
    assert alice.ok("delete_file", path="src/app.py")["change"] == "deleted"


# --- calls -------------------------------------------------------------------------


def test_delete_file_asks_then_runs_when_confirmed(world: World, engine: Engine) -> None:
    """Threat: an agent deletes by a slip; without confirm nothing is staged or saved."""
    confirm_policy(world, ["delete_file"])
    alice = Agent(engine, world.mint())
    before = refs(world)
    preview = alice.asked("delete_file", path="src/app.py")
    assert preview == {"tool": "delete_file", "path": "src/app.py", "exists": True, "size": 25}
    assert alice.asked("delete_file", path="src/app.py", confirm=False) == preview
    assert alice.staged() == []
    assert refs(world) == before  # no saved session, no lane
    assert alice.asked("delete_file", path="src/missing.py") == {
        "tool": "delete_file", "path": "src/missing.py", "exists": False, "size": None
    }
    result = alice.ok("delete_file", path="src/app.py", confirm=True)
    assert result["change"] == "deleted"
    assert alice.staged() == [{"path": "src/app.py", "change": "deleted"}]


def test_write_file_preview_says_new_or_replaces(world: World, engine: Engine) -> None:
    confirm_policy(world, ["write_file"])
    alice = Agent(engine, world.mint())
    assert alice.asked("write_file", path="src/new.py", content="héllo\n") == {
        "tool": "write_file", "path": "src/new.py", "bytes": 7, "exists": False
    }
    blob = base64.b64encode(bytes(300)).decode()
    assert alice.asked("write_file", path="src/data.bin", content=blob, encoding="base64") == {
        "tool": "write_file", "path": "src/data.bin", "bytes": 300, "exists": True
    }
    assert alice.staged() == []
    bad = alice("write_file", path="src/new.py", content="%%%", encoding="base64")
    assert bad["error"]["error"] == "invalid_argument"  # the call would fail the same way
    alice.ok("write_file", path="src/new.py", content="x\n", confirm=True)
    assert alice.staged() == [{"path": "src/new.py", "change": "added"}]


def test_move_resolve_and_sub_token_previews(world: World, engine: Engine) -> None:
    confirm_policy(world, ["move_file", "resolve_conflict", "issue_sub_token"])
    alice = Agent(engine, world.mint(ops="read,write,commit,sub-token:issue", delegable=True))
    assert alice.asked("move_file", source="src/app.py", destination="src/main.py") == {
        "tool": "move_file", "source": "src/app.py", "destination": "src/main.py"
    }
    assert alice.asked("resolve_conflict", path="src/app.py", resolution="theirs") == {
        "tool": "resolve_conflict", "path": "src/app.py", "resolution": "theirs"
    }
    grant = {"agent": "alice.helper", "ops": ["read"], "paths": ["src/api/**"], "ttl_seconds": 60}
    assert alice.asked("issue_sub_token", **grant) == {
        "tool": "issue_sub_token",
        "grant": grant | {"delegable": False, "repos": None},
    }
    assert alice.staged() == []
    alice.ok("move_file", source="src/app.py", destination="src/main.py", confirm=True)
    issued = alice.ok("issue_sub_token", **grant, confirm=True)
    assert issued["agent"] == "alice.helper" and issued["token"].startswith("chit_")


def test_commit_and_discard_preview_the_staged_change(world: World, engine: Engine) -> None:
    """Threat: a commit or discard by a slip; unconfirmed, the lane and the session stand."""
    confirm_policy(world, ["commit", "discard"])
    alice = Agent(engine, world.mint())
    alice.ok("write_file", path="src/app.py", content="def main():\n    return 2\n")
    alice.ok("write_file", path="src/new.py", content="x = 1\n")
    alice.ok("delete_file", path="src/api/v1.py")
    before = refs(world)
    staged = [
        {"path": "src/api/v1.py", "change": "deleted"},
        {"path": "src/app.py", "change": "modified"},
        {"path": "src/new.py", "change": "added"},
    ]
    assert alice.asked("commit", message="Return two\n\nAnd more.") == {
        "tool": "commit", "lane": "agent/alice", "subject": "Return two", "staged": staged,
        "hidden": 0,
    }
    assert alice.asked("discard") == {
        "tool": "discard", "staged": staged, "hidden": 0, "conflicts": 0
    }
    assert refs(world) == before
    assert alice.staged() == staged
    landed = alice.ok("commit", message="Return two\n\nAnd more.", confirm=True)
    after = refs(world)
    assert after["refs/heads/agent/alice"] == landed["commit"]
    assert alice.staged() == []
    assert alice.asked("discard") == {"tool": "discard", "staged": [], "hidden": 0,
                                      "conflicts": 0}
    # The commit's recorded catalog is the one with confirm, and it audits clean.
    assert landed["catalog_hash"] == alice.offer()["catalog_hash"]
    keys = signkeys.load_public_keys(signkeys.export_public_keys(world.home))
    report = verify_repository(world.repo, ["agent/alice"], public_keys=keys)
    assert report["ok"], report
    message = pygit2.Repository(str(world.repo)).revparse_single(landed["commit"]).message
    assert f"Chit-Catalog-Hash: {landed['catalog_hash']}" in message


def test_a_preview_never_names_staged_paths_the_caller_cannot_see(
    world: World, engine: Engine
) -> None:
    """Threat: an attenuated token sharing the session learns paths outside its scope."""
    confirm_policy(world, ["commit", "discard"])
    wide = world.mint()
    alice = Agent(engine, wide)
    alice.ok("write_file", path="src/api/v1.py", content="ROUTES = [1]\n")
    alice.ok("write_file", path="src/app.py", content="def main():\n    return 3\n")
    narrow = str(admin.attenuate_token(wide, paths=["src/app.py"])["token"])
    helper = Agent(engine, narrow)  # same token id: the same session
    preview = helper.asked("commit", message="Three")
    assert preview["staged"] == [{"path": "src/app.py", "change": "modified"}]
    assert preview["hidden"] == 1
    assert "src/api" not in repr(preview)
    assert helper.asked("discard")["hidden"] == 1
    # Confirmed, the call is refused as before, and still names nothing.
    refused = helper("commit", message="Three", confirm=True)
    assert refused["error"]["error"] == "path_outside_scope"


def test_policy_and_catalog_checks_come_first(world: World, engine: Engine) -> None:
    """A call the policy refuses gets its refusal, never a preview of what it cannot do."""
    confirm_policy(
        world, ["delete_file"],
        extra="[[rules]]\neffect = 'deny'\ntools = ['delete_file']\npaths = ['src/api/**']\n",
    )
    alice = Agent(engine, world.mint())
    denied = alice("delete_file", path="src/api/v1.py")
    assert denied["error"]["error"] == "policy_denied" and "preview" not in denied["error"]
    outside = alice("delete_file", path="docs/guide.md")
    assert outside["error"]["error"] == "path_outside_scope"
    unlisted = engine.invoke(alice.token, "delete_file", {"path": "src/app.py"}, session="s1",
                             offered_catalog_hash=None)
    assert unlisted["error"]["error"] == "catalog_changed"
    frozen = Engine(world.home, world.repo, read_only=True)
    try:
        answer = frozen.invoke(alice.token, "delete_file", {"path": "src/app.py"}, session="s9")
        assert answer["error"]["error"] == "engine_frozen"
    finally:
        frozen.close()


def test_unconfirmed_calls_use_no_rate_limit(world: World, engine: Engine) -> None:
    """Asking changes nothing, the rate-limit counts included."""
    confirm_policy(
        world, ["delete_file"],
        extra="[[rate_limits]]\ntools = ['delete_file']\ncalls = 1\nper_seconds = 3600\n",
    )
    alice = Agent(engine, world.mint())
    for _ in range(3):
        alice.asked("delete_file", path="src/app.py")
    alice.ok("delete_file", path="src/app.py", confirm=True)
    limited = alice("delete_file", path="src/api/v1.py", confirm=True)
    assert limited["error"]["error"] == "limit_exceeded"
    assert limited["error"]["rule"] == "rate_limits[0]"


def test_the_refusal_is_in_the_call_log(world: World, engine: Engine) -> None:
    confirm_policy(world, ["delete_file"])
    alice = Agent(engine, world.mint())
    alice.asked("delete_file", path="src/app.py")
    alice.ok("delete_file", path="src/app.py", confirm=True)
    assert engine.flush_log()
    entries = [e for e in call_log_entries(world.home) if e.get("tool") == "delete_file"]
    assert [(e["decision"], e["code"]) for e in entries] == [
        ("refused", "confirmation_required"), ("allowed", None)
    ]
    assert entries[1]["arguments"]["confirm"] is True


def test_a_token_that_cannot_read_is_not_told_the_size(world: World, engine: Engine) -> None:
    """Threat: a token learns something of content it may not read."""
    confirm_policy(
        world, ["delete_file"],
        extra="[[rules]]\neffect = 'deny'\noperations = ['read']\npaths = ['src/api/**']\n",
    )
    writer = Agent(engine, world.mint(agent="wendy", ops="write"))
    assert writer.asked("delete_file", path="src/app.py") == {
        "tool": "delete_file", "path": "src/app.py", "exists": True, "size": None
    }
    assert writer.asked("delete_file", path="src/gone.py")["exists"] is False
    alice = Agent(engine, world.mint(), session="s2")
    assert alice.asked("delete_file", path="src/app.py")["size"] == 25
    # The policy lets alice delete under src/api/ but not read there.
    assert alice.asked("delete_file", path="src/api/v1.py") == {
        "tool": "delete_file", "path": "src/api/v1.py", "exists": True, "size": None
    }
