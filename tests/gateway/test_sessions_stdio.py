"""Over the real stdio transport: delegation, revocation of live sessions, divergence."""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
from mcp import Client

from tests.conftest import World
from tests.gateway.mcp_client import Edge, payload


def test_delegate_then_revoke_the_parent_kills_the_live_child(world: World, edge: Edge) -> None:
    lead = world.mint(agent="lead", ops="read,write,commit,sub-token:issue", paths="src/**",
                      delegable=True)

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(edge.params(lead)) as parent:
            listed = {t.name for t in (await parent.list_tools()).tools}
            out["parent_tools"] = listed
            issued = await parent.call_tool("issue_sub_token", {
                "agent": "lead.helper", "ops": ["read", "write", "commit"],
                "paths": ["src/api/**"], "ttl_seconds": 600})
            out["issued"] = payload(issued)
            widened = await parent.call_tool("issue_sub_token", {
                "agent": "lead.helper2", "ops": ["read"], "paths": ["src/**/*.py", "docs/**"],
                "ttl_seconds": 600})
            out["widened"] = payload(widened)
            child_token = out["issued"]["token"]
            async with Client(edge.params(child_token)) as child:
                out["child_tools"] = {t.name for t in (await child.list_tools()).tools}
                scope = payload(await child.call_tool("effective_scope", {}))
                out["child_scope"] = scope
                await child.call_tool("write_file", {"path": "src/api/v2.py", "content": "V2\n"})
                out["child_commit"] = payload(await child.call_tool("commit", {"message": "v2"}))
                before = await child.call_tool("read_file", {"path": "src/api/v1.py"})
                out["child_before"] = before.is_error
                # The operator revokes the parent (only) while both sessions are live.
                parent_id = payload(await parent.call_tool("effective_scope", {}))["token_id"]
                revoke = subprocess.run([*world.cli(), "revoke", parent_id],
                                        capture_output=True, text=True, check=False)
                out["revoke_rc"] = revoke.returncode
                after = await child.call_tool("read_file", {"path": "src/api/v1.py"})
                out["child_after"] = (after.is_error, payload(after))
                after = await parent.call_tool("status", {})
                out["parent_after"] = (after.is_error, payload(after))
        return out

    out = anyio.run(run)
    assert "issue_sub_token" in out["parent_tools"]
    assert out["issued"]["agent"] == "lead.helper" and out["issued"]["token"].startswith("chit_")
    assert out["widened"]["error"] == "delegation_widens"
    assert "issue_sub_token" not in out["child_tools"]
    assert out["child_scope"]["lane"] == "agent/lead.helper"
    assert out["child_scope"]["path_scopes"][-1] == ["src/api/**"]
    assert out["child_commit"]["lane"] == "agent/lead.helper"
    assert out["child_commit"]["trailers"]["Chit-Agent"] == "lead.helper"
    assert out["child_before"] is False and out["revoke_rc"] == 0
    assert out["child_after"] == (True, out["child_after"][1])
    assert out["child_after"][1]["error"] == "token_revoked"
    assert out["parent_after"][1]["error"] == "token_revoked"
    audit = subprocess.run([*world.cli(), "audit", "verify", "--repo", str(world.repo)],
                           capture_output=True, text=True, check=False)
    assert audit.returncode == 0, audit.stdout


def test_two_live_sessions_of_one_token_diverge_and_resolve(world: World, edge: Edge) -> None:
    """Divergence over real MCP: same token, two connections, one file edited twice."""
    token = world.mint(paths="**")

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with (
            Client(edge.params(token)) as a,
            Client(edge.params(token)) as b,
        ):
            await a.list_tools()
            await b.list_tools()
            out["sessions"] = (payload(await a.call_tool("status", {}))["session"],
                               payload(await b.call_tool("status", {}))["session"])
            await a.call_tool("read_file", {"path": "src/app.py"})
            await b.call_tool("read_file", {"path": "src/app.py"})
            await a.call_tool("write_file", {"path": "src/app.py", "content": "A\n"})
            ignore = await a.call_tool("write_file", {"path": ".gitignore", "content": "*.pyc\n"})
            assert not ignore.is_error, payload(ignore)
            await b.call_tool("write_file", {"path": "src/app.py", "content": "B\n"})
            await b.call_tool("write_file", {"path": ".github/workflows/ci.yml",
                                             "content": "on: push\n"})
            out["b"] = payload(await b.call_tool("commit", {"message": "B"}))
            refused = await a.call_tool("commit", {"message": "A"})
            out["refused"] = (refused.is_error, payload(refused))
            out["listed"] = payload(await a.call_tool("list_conflicts", {}))
            out["resolved"] = payload(await a.call_tool("resolve_conflict", {
                "path": "src/app.py", "resolution": "content", "content": "A+B\n"}))
            out["a"] = payload(await a.call_tool("commit", {"message": "A"}))
        return out

    out = anyio.run(run)
    assert out["sessions"][0] != out["sessions"][1]
    assert out["refused"][0] and out["refused"][1]["error"] == "conflict"
    assert out["listed"]["session"][0]["ours"] == "A\n"
    assert out["listed"]["session"][0]["theirs"] == "B\n"
    assert out["resolved"]["remaining"] == 0
    import pygit2

    repo = pygit2.Repository(str(world.repo))
    head = repo[repo.references["refs/heads/agent/alice"].target]
    assert str(head.id) == out["a"]["commit"] and str(head.parents[0].id) == out["b"]["commit"]
    assert repo[head.tree["src/app.py"].id].data == b"A+B\n"
    assert repo[head.tree[".gitignore"].id].data == b"*.pyc\n"
    assert repo[head.tree[".github/workflows/ci.yml"].id].data == b"on: push\n"
