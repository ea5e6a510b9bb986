"""The engine and its policy: rules on real calls, hot reload, fail-closed reload,
the recorded policy hash, commit requirements and rate limits."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

import policy
from engine.audit import provenance
from engine.auth import signkeys
from engine.errors import ConfigurationError
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import refusal as refused


class Clock:
    """A clock the test moves by hand (unix seconds)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


def write_policy(world: World, text: str) -> None:
    """Replace policy.toml atomically, as docs/policy.md says to."""
    path = world.home / "policy.toml"
    fresh = path.with_suffix(".new")
    fresh.write_text(text, encoding="utf-8")
    os.replace(fresh, path)


class Agent:
    """One session of one token against an engine, as an edge that listed tools first."""

    def __init__(self, engine: Engine, token: str, session: str = "s1") -> None:
        self.engine, self.token, self.session = engine, token, session
        self.listed: str | None = None

    def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        offer = self.engine.offer(self.token)
        if offer["ok"]:
            self.listed = offer["catalog_hash"]
        return self.engine.invoke(
            self.token, tool, args, session=self.session, offered_catalog_hash=self.listed
        )


def record_policy(world: World, commit_id: str, agent: str = "alice") -> str:
    repo = pygit2.Repository(str(world.repo))
    blob = repo.revparse_single(f"refs/chit/provenance/{agent}:{commit_id[:2]}/{commit_id[2:]}")
    envelope = bytes(blob.peel(pygit2.Blob).data)
    public = signkeys.load_public_keys(signkeys.export_public_keys(world.home))
    record: dict[str, Any] = provenance.open_envelope(envelope, public)
    return str(record["policy"])


def test_the_engine_refuses_to_start_on_an_invalid_or_missing_policy(world: World) -> None:
    write_policy(world, "[[rules]]\neffect = 'permit'\n")
    with pytest.raises(ConfigurationError, match=r"rules\[0\]\.effect"):
        Engine(world.home, world.repo)
    (world.home / "policy.toml").unlink()
    with pytest.raises(ConfigurationError, match="no policy"):
        Engine(world.home, world.repo)


def test_a_deny_rule_refuses_with_its_rule_and_reason(world: World) -> None:
    write_policy(
        world,
        "[[rules]]\neffect = 'deny'\nagents = ['alice']\ntools = ['write_file']\n"
        "paths = ['src/api/**']\nreason = 'the API is frozen this week'\n",
    )
    alice = Agent(Engine(world.home, world.repo), world.mint())
    error = refused(alice("write_file", path="src/api/v1.py", content="x"))
    assert error == {
        "error": "policy_denied",
        "message": "the API is frozen this week",
        "rule": "rules[0]",
    }
    assert alice("write_file", path="src/app.py", content="x")["ok"]
    assert alice("read_file", path="src/api/v1.py")["ok"]


def test_default_deny_lets_a_docs_agent_touch_only_docs(world: World) -> None:
    """docs/examples/docs-only.toml, on a real engine."""
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "docs-only.toml"
    write_policy(world, example.read_text(encoding="utf-8"))
    engine = Engine(world.home, world.repo)
    docs = Agent(engine, world.mint(agent="docs-bot", paths="**"))
    assert docs("effective_scope")["ok"] and docs("status")["ok"]
    assert docs("read_file", path="docs/guide.md")["ok"]
    assert refused(docs("read_file", path="src/app.py"))["rule"] == "default"
    assert docs("write_file", path="docs/new.md", content="# new\n")["ok"]
    assert refused(docs("commit", message="add a page"))["rule"] == "commit.message_pattern"
    assert docs("commit", message="docs: add a page")["ok"]
    # A listing shows only what the policy lets the agent read.
    logged = docs("log", limit=10)
    assert logged["ok"]
    shown = {p for c in logged["result"]["commits"] for p in c.get("paths", [])}
    assert shown <= {"docs/guide.md", "docs/new.md", "README.md"}
    other = Agent(engine, world.mint(agent="eve", paths="**"), session="s2")
    assert refused(other("read_file", path="docs/guide.md"))["rule"] == "default"


def test_a_policy_change_takes_effect_on_the_next_call(world: World) -> None:
    engine = Engine(world.home, world.repo)
    alice = Agent(engine, world.mint())
    assert alice("read_file", path="src/app.py")["ok"]
    write_policy(world, "[[rules]]\neffect = 'deny'\ntools = ['read_file']\n")
    assert refused(alice("read_file", path="src/app.py"))["rule"] == "rules[0]"
    write_policy(world, policy.DEFAULT_POLICY_TOML)
    assert alice("read_file", path="src/app.py")["ok"]


def test_an_in_place_edit_is_noticed_too(world: World) -> None:
    engine = Engine(world.home, world.repo)
    alice = Agent(engine, world.mint())
    assert alice("read_file", path="src/app.py")["ok"]
    path = world.home / "policy.toml"
    with open(path, "a", encoding="utf-8") as fh:  # same inode, new size
        fh.write("\n[[rules]]\neffect = 'deny'\ntools = ['read_file']\n")
    assert refused(alice("read_file", path="src/app.py"))["rule"] == "rules[0]"


@pytest.mark.parametrize("breakage", ["invalid", "missing", "syntax"])
def test_an_invalid_policy_on_reload_fails_closed_until_fixed(
    world: World, breakage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Threat: a broken policy edit silently leaving the engine on an older, laxer policy
    (or on none)."""
    engine = Engine(world.home, world.repo)
    alice = Agent(engine, world.mint())
    assert alice("read_file", path="src/app.py")["ok"]
    with caplog.at_level(logging.WARNING, logger="chit.engine"):
        if breakage == "missing":
            (world.home / "policy.toml").unlink()
        elif breakage == "syntax":
            write_policy(world, "[limits\n")
        else:
            write_policy(world, "[limits]\nfile_bytes = 0\n")
        for _ in range(3):
            error = refused(alice("read_file", path="src/app.py"))
            assert error["error"] == "policy_denied" and error["rule"] == "policy"
            assert "policy file is invalid" in error["message"]
        listing = engine.offer(alice.token)
        assert listing["ok"] is False and listing["error"]["rule"] == "policy"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # logged once per version of the file, not once per call
    if breakage == "invalid":
        assert "limits.file_bytes" in errors[0].getMessage()
    write_policy(world, policy.DEFAULT_POLICY_TOML)
    assert alice("read_file", path="src/app.py")["ok"]


def test_each_commit_records_the_hash_of_the_policy_that_decided_it(world: World) -> None:
    engine = Engine(world.home, world.repo)
    alice = Agent(engine, world.mint())
    assert alice("write_file", path="src/a.py", content="1\n")["ok"]
    first = alice("commit", message="one")["result"]["commit"]
    stricter = policy.DEFAULT_POLICY_TOML.replace("staged_files = 256", "staged_files = 9")
    write_policy(world, stricter)
    assert alice("write_file", path="src/b.py", content="2\n")["ok"]
    second = alice("commit", message="two")["result"]["commit"]
    assert record_policy(world, first) == provenance.policy_hash(
        policy.load(policy.DEFAULT_POLICY_TOML)
    )
    assert record_policy(world, second) == provenance.policy_hash(policy.load(stricter))


def test_commit_requirements_and_files_per_commit_on_the_engine(world: World) -> None:
    write_policy(
        world,
        "[limits]\nfiles_per_commit = 2\n[commit]\nmessage_min_length = 5\n"
        "message_pattern = '(feat|fix): .{1,50}'\n",
    )
    alice = Agent(Engine(world.home, world.repo), world.mint())
    assert alice("write_file", path="src/a.py", content="1\n")["ok"]
    assert alice("write_file", path="src/b.py", content="2\n")["ok"]
    assert refused(alice("commit", message="fix"))["rule"] == "commit.message_min_length"
    error = refused(alice("commit", message="update things"))
    assert error["rule"] == "commit.message_pattern" and error["error"] == "policy_denied"
    assert alice("write_file", path="src/c.py", content="3\n")["ok"]
    error = refused(alice("commit", message="feat: three files"))
    assert (error["error"], error["rule"]) == ("limit_exceeded", "limits.files_per_commit")
    unstaged = alice("delete_file", path="src/c.py")
    assert unstaged["ok"] and unstaged["result"]["change"] == "unstaged"
    assert len(alice("status")["result"]["staged"]) == 2  # the refusals changed nothing
    assert alice("commit", message="feat: two files")["ok"]


def test_rate_limits_refuse_with_retry_after_then_admit(world: World) -> None:
    clock = Clock()
    write_policy(
        world,
        "[[rate_limits]]\nagents = ['alice']\ntools = ['read_file', 'status']\n"
        "calls = 3\nper_seconds = 10\n",
    )
    engine = Engine(world.home, world.repo, clock=clock)
    alice = Agent(engine, world.mint())
    assert alice("read_file", path="src/app.py")["ok"]
    clock.now += 4
    assert alice("status")["ok"]
    assert alice("read_file", path="src/app.py")["ok"]
    error = refused(alice("read_file", path="src/app.py"))
    assert error["error"] == "limit_exceeded" and error["rule"] == "rate_limits[0]"
    assert error["retry_after"] == 6  # the first call leaves the window 10 s after it
    assert alice("log", limit=1)["ok"]  # other tools are not counted by this entry
    clock.now += 5.5
    assert refused(alice("status"))["retry_after"] == 1  # refusals did not count
    clock.now += 0.5
    assert alice("status")["ok"]  # the first call has left the window
    bob = Agent(engine, world.mint(agent="bob"), session="s2")
    for _ in range(5):
        assert bob("read_file", path="src/app.py")["ok"]  # bob is not limited


def test_rate_limits_count_per_agent_and_only_allowed_calls(world: World) -> None:
    clock = Clock()
    write_policy(
        world,
        "[[rules]]\neffect = 'deny'\ntools = ['read_file']\npaths = ['src/api/**']\n"
        "[[rate_limits]]\ntools = ['read_file']\ncalls = 2\nper_seconds = 60\n",
    )
    engine = Engine(world.home, world.repo, clock=clock)
    alice = Agent(engine, world.mint())
    bob = Agent(engine, world.mint(agent="bob"), session="s2")
    for _ in range(3):
        assert refused(alice("read_file", path="src/api/v1.py"))["rule"] == "rules[0]"
    assert alice("read_file", path="src/app.py")["ok"]
    assert alice("read_file", path="src/app.py")["ok"]
    assert refused(alice("read_file", path="src/app.py"))["rule"] == "rate_limits[0]"
    assert bob("read_file", path="src/app.py")["ok"]  # each agent has its own budget


def test_rate_limit_counts_survive_a_reload_that_keeps_the_entry(world: World) -> None:
    clock = Clock()
    limit = "[[rate_limits]]\ntools = ['status']\ncalls = 1\nper_seconds = 60\n"
    write_policy(world, limit)
    engine = Engine(world.home, world.repo, clock=clock)
    alice = Agent(engine, world.mint())
    assert alice("status")["ok"]
    write_policy(world, "[limits]\nfile_bytes = 999\n" + limit)
    assert refused(alice("status"))["rule"] == "rate_limits[0]"
    write_policy(world, limit.replace("calls = 1", "calls = 2"))
    assert alice("status")["ok"]  # a changed entry starts a fresh count


def test_token_lifetime_limit_at_its_boundary(world: World) -> None:
    from engine import admin

    write_policy(world, "[limits]\ntoken_lifetime_seconds = 600\n")
    assert world.mint(ttl=600)
    with pytest.raises(ValueError, match="token_lifetime_seconds"):
        admin.mint_token(world.home, agent="alice", operations=["read"], paths=["**"],
                         ttl_seconds=601)
    engine = Engine(world.home, world.repo)
    lead = Agent(engine, world.mint(agent="lead", ops="read,sub-token:issue", ttl=600,
                                    delegable=True))
    ok = lead("issue_sub_token", agent="lead.a", ops=["read"], paths=["src/**"],
              ttl_seconds=500)
    assert ok["ok"], ok
    write_policy(world, "[limits]\ntoken_lifetime_seconds = 499\n")  # takes effect next call
    error = refused(lead("issue_sub_token", agent="lead.b", ops=["read"], paths=["src/**"],
                         ttl_seconds=500))
    assert (error["error"], error["rule"]) == ("limit_exceeded", "limits.token_lifetime_seconds")
    assert lead("issue_sub_token", agent="lead.c", ops=["read"], paths=["src/**"],
                ttl_seconds=499)["ok"]


def test_delegation_depth_limit_at_its_boundary_and_on_reload(world: World) -> None:
    write_policy(world, "[limits]\ndelegation_depth = 1\n")
    engine = Engine(world.home, world.repo)
    lead = Agent(engine, world.mint(agent="lead", ops="read,sub-token:issue", delegable=True))
    child = lead("issue_sub_token", agent="lead.a", ops=["read", "sub-token:issue"],
                 paths=["src/**"], ttl_seconds=300, delegable=True)
    assert child["ok"], child
    helper = Agent(engine, child["result"]["token"], session="s2")
    assert helper("status")["ok"]  # depth 1: at the limit
    error = refused(helper("issue_sub_token", agent="lead.a.b", ops=["read"],
                           paths=["src/**"], ttl_seconds=100))
    assert error["error"] == "delegation_depth_exceeded"
    write_policy(world, "[limits]\ndelegation_depth = 0\n")
    assert refused(helper("status"))["error"] == "delegation_depth_exceeded"
    assert refused(lead("issue_sub_token", agent="lead.z", ops=["read"], paths=["src/**"],
                        ttl_seconds=100))["error"] == "delegation_depth_exceeded"
