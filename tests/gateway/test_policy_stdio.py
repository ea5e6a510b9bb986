"""The policy as an agent meets it over a real MCP stdio connection (official client)."""

from __future__ import annotations

import os
from typing import Any

from mcp import Client

from tests.conftest import World
from tests.gateway.mcp_client import payload, with_client


def test_refusals_reach_the_agent_with_rule_and_retry_after(world: World) -> None:
    """A deny rule, a rate limit and a policy edit made while the connection is open."""
    policy_file = world.home / "policy.toml"
    policy_file.write_text(
        "[[rules]]\neffect = 'deny'\ntools = ['read_file']\npaths = ['src/api/**']\n"
        "reason = 'the API is under review'\n"
        "[[rate_limits]]\ntools = ['status']\ncalls = 2\nper_seconds = 3600\n"
    )
    token = world.mint()

    async def body(client: Client) -> list[Any]:
        await client.list_tools()
        answers = [await client.call_tool("read_file", {"path": "src/api/v1.py"})]
        answers += [await client.call_tool("status", {}) for _ in range(3)]
        fresh = policy_file.with_suffix(".new")
        fresh.write_text("[[rules]]\neffect = 'deny'\ntools = ['read_file']\n")
        os.replace(fresh, policy_file)  # the running engine applies it on the next call
        answers.append(await client.call_tool("read_file", {"path": "src/app.py"}))
        policy_file.write_text("[limits]\nfile_bytes = -1\n")  # broken: fail closed
        answers.append(await client.call_tool("effective_scope", {}))
        return answers

    denied, status1, status2, limited, after_edit, broken = with_client(
        world.home, world.repo, token, body
    )
    assert denied.is_error and payload(denied) == {
        "error": "policy_denied", "message": "the API is under review", "rule": "rules[0]"
    }
    assert not status1.is_error and not status2.is_error
    assert limited.is_error
    error = payload(limited)
    assert error["error"] == "limit_exceeded" and error["rule"] == "rate_limits[0]"
    assert 3590 <= error["retry_after"] <= 3600
    assert after_edit.is_error and payload(after_edit)["rule"] == "rules[0]"
    assert broken.is_error and payload(broken)["rule"] == "policy"
