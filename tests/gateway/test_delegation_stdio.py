"""issue_sub_token over the real stdio transport, and revocation of live sessions."""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
from mcp import Client

from gateway.demo import stdio_server_params
from tests.conftest import World
from tests.gateway.mcp_client import payload


def test_delegate_then_revoke_the_parent_kills_the_live_child(world: World) -> None:
    lead = world.mint(agent="lead", ops="read,write,commit,sub-token:issue", paths="src/**",
                      delegable=True)

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(stdio_server_params(world.home, world.repo, lead)) as parent:
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
            async with Client(stdio_server_params(world.home, world.repo, child_token)) as child:
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
