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


def _logged(world: World) -> int:
    return sum(1 for _ in admin.call_log_entries(world.home))


@pytest.mark.parametrize("state", [
    "v1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    '{"v":1,"approval":"apr_aaaaaaaaaaaaaaaaaaaaaaaaaa"}',
    "",
])
def test_a_forged_request_state_never_reaches_the_engine(world: World, state: str) -> None:
    # Threat: a client forging requestState to hand the engine an approval id.
    token = world.mint()

    async def go() -> tuple[MCPError, int, int, int]:
        async with Client(stdio_server_params(world.home, world.repo, token),
                          mode=MODERN) as client:
            await client.list_tools()
            before = await anyio.to_thread.run_sync(_logged, world)
            with pytest.raises(MCPError) as err:
                await client.call_tool("status", {}, request_state=state)
            after = await anyio.to_thread.run_sync(_logged, world)
            await client.call_tool("status", {})  # the control: a call is logged at once
            control = await anyio.to_thread.run_sync(_logged, world)
            return err.value, before, after, control

    error, before, after, control = anyio.run(go)
    assert error.error.code == types.INVALID_PARAMS
    assert error.error.message == "Invalid or expired requestState"
    assert after == before  # no call: not even a refused one in the call log
    assert control == before + 1


