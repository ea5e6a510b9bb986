"""Approval waits over real stdio (``chit mcp`` subprocesses) with the official client."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from engine import admin
from gateway.demo import stdio_server_params
from tests.conftest import World

MODERN = "2026-07-28"


def _tools_logged(world: World) -> list[str]:
    """The tool of each call-log entry (operators' entries and listings aside)."""
    return [str(e.get("tool")) for e in admin.call_log_entries(world.home, agent="alice")
            if e.get("tool")]


@pytest.mark.parametrize("state", [
    "v1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    '{"v":1,"approval":"apr_aaaaaaaaaaaaaaaaaaaaaaaaaa"}',
    "",
])
def test_a_forged_request_state_never_reaches_the_engine(world: World, state: str) -> None:
    # Threat: a client forging requestState to hand the engine an approval id.
    token = world.mint()

    async def go() -> tuple[MCPError, list[str]]:
        async with Client(stdio_server_params(world.home, world.repo, token),
                          mode=MODERN) as client:
            await client.list_tools()
            with pytest.raises(MCPError) as err:
                await client.call_tool("status", {}, request_state=state)
            # The control: a call that reached the engine. The log is written in
            # order, in the background: once it holds the control, it holds
            # whatever came before it.
            await client.call_tool("effective_scope", {})
            with anyio.fail_after(30):
                while "effective_scope" not in (tools := await anyio.to_thread.run_sync(
                        _tools_logged, world)):
                    await anyio.sleep(0.05)
            return err.value, tools

    error, tools = anyio.run(go)
    assert error.error.code == types.INVALID_PARAMS
    assert error.error.message == "Invalid or expired requestState"
    assert tools == ["effective_scope"]  # the forged call is not even a refused entry


