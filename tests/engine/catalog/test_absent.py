"""Absent by construction: no token, however broad, reaches a dangerous effect.

Threat: an agent (or whoever holds its token) that obliterates history, changes
the policy, manages keys, force-moves a tag or mints itself an unconstrained
token. No tool does any of that, so no token can unlock it: the broadest token
there is (every operation, ``**``, the delegation flag, and a delegation of it)
is offered no tool whose name or arguments suggest such an effect, and calling
every offered tool with hostile arguments moves no protected ref, deletes no ref,
writes no policy or key file, and delegates nothing wider than its parent. Checked
against the real catalog, the real engine and, for the names, a real MCP stdio
session.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

import anyio
import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

from engine.auth import rootkeys
from engine.auth import verify as tokens
from engine.catalog.declarations import TOOLS
from engine.service import Engine
from gateway.demo import stdio_server_params
from tests.conftest import World
from tests.engine.engine_calls import call, ok

BROADEST = {"agent": "root-bot", "ops": "read,write,commit,sub-token:issue", "paths": "**",
            "ttl": 3600, "delegable": True}

# Words that name an effect no tool may have (names are snake_case).
FORBIDDEN_WORDS = {
    "obliterate", "purge", "prune", "gc", "force", "reset", "rewrite", "filter", "squash",
    "amend", "rebase", "push", "policy", "policies", "rule", "rules", "key", "keys", "keyring",
    "rotate", "retire", "seal", "unseal", "mint", "tag", "tags", "ref", "refs", "branch",
    "branches", "main", "freeze", "unfreeze", "admin", "revoke", "grant", "root", "sudo",
    "exec", "shell", "config", "hook", "hooks", "erase", "wipe", "destroy", "history",
}
FORBIDDEN_FRAGMENTS = ("obliterat", "polic", "force", "mint", "tag", "key", "admin", "sudo")
# The only tool that issues a token, and it is held to strictly narrower (tested below).
TOKEN_TOOLS = {"issue_sub_token"}
# Every argument a tool that is not read-only may take: none names a ref, a tag,
# a branch, a policy, a key or a force flag (``repos`` is a helper's repository
# name globs, each within the caller's: a scope, never a ref).
WRITE_ARGUMENTS = {
    "path", "content", "encoding", "source", "destination", "resolution", "message",
    "agent", "ops", "paths", "ttl_seconds", "delegable", "repos",
}

# Names an agent might try; none is a tool, so each is unknown under any token.
DANGEROUS_NAMES = [
    "obliterate", "obliterate_history", "purge", "gc", "prune", "reset_branch", "reset_main",
    "force_push", "push", "rewrite_history", "filter_branch", "delete_ref", "delete_branch",
    "update_ref", "move_tag", "force_tag", "tag", "create_tag", "delete_tag", "set_policy",
    "update_policy", "write_policy", "reload_policy", "rotate_key", "retire_key", "keys_rotate",
    "export_keys", "mint_token", "mint", "issue_token", "issue_root_token", "revoke",
    "unfreeze", "freeze", "admin", "exec", "shell",
]


def _words(name: str) -> set[str]:
    return set(name.lower().split("_"))


def _input_properties(spec: Any) -> set[str]:
    return set(spec.encoded()["input_schema"].get("properties", {}))


@pytest.mark.parametrize("spec", TOOLS, ids=lambda t: t.name)
def test_no_declared_tool_names_a_dangerous_effect(spec: Any) -> None:
    """Every declared tool, offered or withheld: the surface itself lacks these effects."""
    assert not _words(spec.name) & FORBIDDEN_WORDS, spec.name
    if spec.name not in TOKEN_TOOLS:
        assert "token" not in _words(spec.name), spec.name
    assert not any(f in spec.name.lower() for f in FORBIDDEN_FRAGMENTS), spec.name
    if not spec.read_only:
        assert _input_properties(spec) <= WRITE_ARGUMENTS, spec.name
        # Arguments are closed: nothing beyond the schema is accepted.
        assert spec.input_model.model_config.get("extra") == "forbid", spec.name


def _snapshot_home(home: Path) -> dict[str, str]:
    """Every file under the home but the state store, by content hash."""
    out = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home).as_posix()
        if path.is_file() and not rel.startswith("state.db"):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def guarded(world: World) -> dict[str, Any]:
    """The fixture repository with tags, a release branch and another agent's lane."""
    repo = pygit2.Repository(str(world.repo))
    main = repo.references["refs/heads/main"].target
    repo.references.create("refs/tags/v1", main)
    sig = pygit2.Signature("rel", "rel@example.org", 1_700_000_000, 0)
    repo.create_tag("v2", main, pygit2.enums.ObjectType.COMMIT, sig, "annotated")
    repo.references.create("refs/heads/release", main)
    repo.references.create("refs/heads/agent/bob", main)
    return {"refs": world.refs(), "home": _snapshot_home(world.home)}


# The caller's lane and what a commit on it writes: its record, the catalogs, its note.
OURS = ("refs/heads/agent/root-bot", "refs/chit/", "refs/notes/chit")


def _assert_nothing_dangerous_happened(world: World, guarded: dict[str, Any]) -> None:
    refs = world.refs()
    for name, target in guarded["refs"].items():
        assert name in refs, f"{name} was deleted"
        if not name.startswith(OURS):
            assert refs[name] == target, f"{name} moved"
    for name in set(refs) - set(guarded["refs"]):
        assert name.startswith(OURS), f"{name} created"
    assert _snapshot_home(world.home) == guarded["home"], "policy or key files changed"


def _broadest(world: World, engine: Engine) -> tuple[str, str]:
    """The broadest root token, and a delegation of everything it holds."""
    root = world.mint(**BROADEST)
    issued = ok(call(engine, root, "issue_sub_token", {
        "agent": "root-bot.all", "ops": ["read", "write", "commit", "sub-token:issue"],
        "paths": ["**"], "ttl_seconds": 1800, "delegable": True,
    }, session="delegate"))
    return root, issued["token"]


def test_the_broadest_tokens_are_offered_nothing_dangerous(
    world: World, guarded: dict[str, Any]
) -> None:
    engine = Engine(world.home, world.repo)
    for token in _broadest(world, engine):
        offer = engine.offer(token)
        names = {t["name"] for t in offer["tools"]}
        assert "issue_sub_token" in names and "commit" in names  # it really is the broadest
        for tool in offer["tools"]:
            assert not _words(tool["name"]) & FORBIDDEN_WORDS, tool["name"]
            assert not tool["annotations"]["destructiveHint"] or tool["name"] in {
                "delete_file", "move_file",  # stage a change in the session; history stays
                "discard",  # drops the session's staged change; history stays
            }
        for name in DANGEROUS_NAMES:
            answer = engine.invoke(token, name, {"ref": "refs/heads/main", "force": True},
                                   session=f"s-{token[-8:]}",
                                   offered_catalog_hash=offer["catalog_hash"])
            assert answer["error"]["error"] == "tool_not_offered", name
    _assert_nothing_dangerous_happened(world, guarded)


def _hostile_values(world: World) -> list[Any]:
    return [
        "refs/heads/main", "main", "refs/tags/v1", "v2", "refs/heads/agent/bob", "agent/bob",
        "HEAD", "--force", "-f", "+refs/heads/main", ":refs/tags/v1", "refs/chit/catalogs",
        "../policy.toml", "../../keys/root", str(world.home / "policy.toml"),
        str(world.home / "keys"), ".git/refs/heads/main", ".git/refs/tags/v1",
        ".git/config", "policy.toml", "keys/root/k.json", "Chit-Lane: main", "**", "",
        "x\n\nChit-Agent: root", 0, -1, 2**70, True, None, [], {}, ["**"],
        {"force": True}, "0" * 40,
    ]


EXTRA_ARGUMENTS = [
    {"force": True}, {"ref": "refs/heads/main"}, {"branch": "main"}, {"lane": "main"},
    {"tag": "v1"}, {"target": "refs/tags/v1"}, {"delete": True}, {"policy": "version = 1"},
    {"key": "new"}, {"frozen": False}, {"agent": "bob"},
]


DEFAULTS: dict[str, Any] = {
    "path": "src/app.py", "content": "x\n", "encoding": "utf-8", "source": "src/api/v1.py",
    "destination": "src/moved.py", "resolution": "ours", "message": "m", "agent": "root-bot.h",
    "ops": ["read"], "paths": ["src/**"], "ttl_seconds": 60, "handle": "main",
    "symbol": "ROUTES", "query": "main",
}


def _calls(world: World, names: list[str], agent: str) -> list[tuple[str, dict[str, Any]]]:
    """Each offered tool with each argument in turn set to each hostile value, and extras."""
    by_name = {t.name: t for t in TOOLS}
    calls: list[tuple[str, dict[str, Any]]] = []
    defaults = {**DEFAULTS, "agent": f"{agent}.h"}
    for name in names:
        props = sorted(_input_properties(by_name[name]))
        base = {p: defaults[p] for p in props if p in defaults}
        for prop in props:
            for value in _hostile_values(world):
                calls.append((name, {**base, prop: value}))
        for extra in EXTRA_ARGUMENTS:
            calls.append((name, {**base, **extra}))
        calls.append((name, base))
    return calls


def test_hostile_arguments_to_every_offered_tool_change_nothing_protected(
    world: World, guarded: dict[str, Any]
) -> None:
    engine = Engine(world.home, world.repo)
    for i, token in enumerate(_broadest(world, engine)):
        offer = engine.offer(token)
        # Stage first, commit last, so that commit has something to land.
        names = sorted((t["name"] for t in offer["tools"]),
                       key=lambda n: (n == "commit", n != "write_file", n))
        outcomes = set()
        for tool, args in _calls(world, names, _verify(world, token).agent):
            answer = engine.invoke(token, tool, args, session=f"h{i}",
                                   offered_catalog_hash=offer["catalog_hash"])
            outcomes.add((tool, answer["ok"]))
            if tool == "issue_sub_token" and answer["ok"]:
                _assert_narrower(world, token, answer["result"]["token"])
        # The hostile calls reached the handlers: every tool also succeeded sometimes.
        assert {tool for tool, ok in outcomes if ok} >= set(names) - {"resolve_conflict",
                                                                  "provenance_graph"}
        # A legitimate change whose paths look like refs and home files is only a
        # change in the lane's tree: it commits on the token's own lane.
        for path in ("refs/heads/main", "refs/tags/v1", "policy.toml", "keys/root/k.json"):
            staged = engine.invoke(token, "write_file", {"path": path, "content": "x"},
                                   session=f"legit{i}", offered_catalog_hash=offer["catalog_hash"])
            assert staged["ok"], staged
        forged = engine.invoke(token, "commit", {"message": "m\n\nChit-Lane: main"},
                               session=f"legit{i}", offered_catalog_hash=offer["catalog_hash"])
        assert forged["error"]["error"] == "invalid_argument"
        done = engine.invoke(token, "commit", {"message": "files named like refs"},
                             session=f"legit{i}", offered_catalog_hash=offer["catalog_hash"])
        assert done["ok"], done
        assert done["result"]["lane"].startswith("agent/root-bot")
        _assert_nothing_dangerous_happened(world, guarded)


_ARG = st.one_of(
    st.sampled_from(["refs/heads/main", "refs/tags/v1", "../policy.toml", ".git/HEAD", "**",
                     "src/app.py", "main", "--force", "agent/bob", "root-bot.x", "bob"]),
    st.text(max_size=20),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.booleans(),
    st.none(),
    st.lists(st.sampled_from(["read", "write", "commit", "sub-token:issue", "admin", "**",
                              "*", "src/**", "../**"]), max_size=5),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_arguments_to_any_offered_tool_change_nothing_protected(
    data: st.DataObject, world: World, guarded: dict[str, Any]
) -> None:
    """Property: whatever the arguments, protected refs and the home's files stand."""
    engine = Engine(world.home, world.repo)
    token = world.mint(**BROADEST)
    offer = engine.offer(token)
    names = sorted(t["name"] for t in offer["tools"])
    by_name = {t.name: t for t in TOOLS}
    for _ in range(data.draw(st.integers(1, 4))):
        tool = data.draw(st.sampled_from(names))
        keys_ = sorted(_input_properties(by_name[tool]) | {"force", "ref", "branch", "tag"})
        args = data.draw(st.dictionaries(st.sampled_from(keys_), _ARG, max_size=6))
        answer = engine.invoke(token, tool, args, session="p",
                               offered_catalog_hash=offer["catalog_hash"])
        if tool == "issue_sub_token" and answer["ok"]:
            _assert_narrower(world, token, answer["result"]["token"])
    _assert_nothing_dangerous_happened(world, guarded)


def _verify(world: World, token: str) -> tokens.VerifiedToken:
    return tokens.verify_at_time(token, rootkeys.Keyring(world.home).lookup, int(time.time()))


PATHS = ["src/app.py", "src/api/v1.py", "docs/guide.md", "README.md", "src_old/legacy.py",
         "a", "refs/heads/main", "x/y/z/w.py"]


def _assert_narrower(world: World, parent: str, child: str) -> None:
    p, c = _verify(world, parent), _verify(world, child)
    assert c.operations <= p.operations
    assert c.expires_at <= p.expires_at
    assert c.delegable <= p.delegable
    assert c.delegable <= ("sub-token:issue" in c.operations)
    assert c.depth == p.depth + 1 and c.chain[:-1] == p.chain
    assert re.fullmatch(re.escape(p.agent) + r"\.[a-z0-9][a-z0-9_-]*", c.agent), c.agent
    for path in PATHS:
        assert not c.allows_path(path) or p.allows_path(path), path


@pytest.mark.parametrize(
    ("args", "codes"),
    [
        ({"agent": "bob"}, {"invalid_argument"}),                  # a root name
        ({"agent": "alice.x"}, {"invalid_argument"}),              # someone else's helper
        ({"agent": "root-bot"}, {"invalid_argument"}),             # itself, again
        ({"ops": ["admin"]}, {"invalid_argument"}),
        ({"ops": ["read", "read"]}, {"invalid_argument"}),
        ({"ops": ["read"], "delegable": True}, {"invalid_argument"}),
        ({"paths": ["../**"]}, {"delegation_widens"}),
        ({"paths": ["/**"]}, {"invalid_argument"}),
        ({"paths": []}, {"invalid_argument"}),
        ({"ttl_seconds": 10**9}, {"delegation_widens", "limit_exceeded"}),
        ({"ttl_seconds": 0}, {"invalid_argument"}),
        ({"ttl_seconds": -5}, {"invalid_argument"}),
        ({"expires_at": None}, {"invalid_argument"}),              # no expiry
        ({"no_expiry": True}, {"invalid_argument"}),
        ({"root": True}, {"invalid_argument"}),
        ({"depth": 0}, {"invalid_argument"}),
        ({"parent": None}, {"invalid_argument"}),
    ],
)
def test_issue_sub_token_mints_nothing_unconstrained(
    world: World, args: dict[str, Any], codes: set[str]
) -> None:
    engine = Engine(world.home, world.repo)
    root = world.mint(**BROADEST)
    base = {"agent": "root-bot.h", "ops": ["read"], "paths": ["src/**"], "ttl_seconds": 60}
    answer = call(engine, root, "issue_sub_token", {**base, **args}, session="d")
    assert answer["ok"] is False and answer["error"]["error"] in codes, answer


def test_delegation_from_the_broadest_token_is_narrower_and_bounded_in_depth(
    world: World,
) -> None:
    engine = Engine(world.home, world.repo)
    token = world.mint(**BROADEST)
    depth = 0
    while True:
        holder = _verify(world, token)
        listed = engine.offer(token)["catalog_hash"]
        answer = engine.invoke(token, "issue_sub_token", {
            "agent": f"{holder.agent}.d{depth}",
            "ops": ["read", "write", "commit", "sub-token:issue"], "paths": ["**"],
            "ttl_seconds": 3600, "delegable": True,
        }, session=f"d{depth}", offered_catalog_hash=listed)
        if not answer["ok"]:
            # Asking for the parent's full lifetime from later on widens its expiry,
            # or the chain is as deep as policy allows.
            assert answer["error"]["error"] in {"delegation_widens", "delegation_depth_exceeded"}
            if answer["error"]["error"] == "delegation_widens":
                answer = engine.invoke(token, "issue_sub_token", {
                    "agent": f"{holder.agent}.d{depth}",
                    "ops": ["read", "write", "commit", "sub-token:issue"], "paths": ["**"],
                    "ttl_seconds": 600, "delegable": True,
                }, session=f"e{depth}", offered_catalog_hash=listed)
            if not answer["ok"]:
                assert answer["error"]["error"] == "delegation_depth_exceeded"
                break
        _assert_narrower(world, token, answer["result"]["token"])
        token = answer["result"]["token"]
        depth += 1
        assert depth <= 8
    assert depth == 3  # the default policy's limits.delegation_depth


def test_dangerous_names_are_unknown_tools_over_mcp(world: World) -> None:
    """Over a real stdio session with the broadest token: each name is an unknown tool."""
    token = world.mint(**BROADEST)
    before = world.refs()

    async def run() -> tuple[set[str], list[Any]]:
        async with Client(stdio_server_params(world.home, world.repo, token)) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            errors = []
            for name in DANGEROUS_NAMES:
                try:
                    await client.call_tool(name, {"ref": "refs/heads/main", "force": True})
                except MCPError as exc:
                    errors.append(exc.error)
                else:
                    errors.append(None)
            return listed, errors

    listed, errors = anyio.run(run)
    assert "issue_sub_token" in listed
    assert not {n for n in listed if _words(n) & FORBIDDEN_WORDS}
    for name, error in zip(DANGEROUS_NAMES, errors, strict=True):
        assert error is not None, name
        assert error.code == -32602 and error.data["error"] == "tool_not_offered", name
        assert name not in error.data["offered"]
    assert world.refs() == before
