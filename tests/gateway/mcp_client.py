"""Drive ``chit mcp`` over a real stdio subprocess with the official MCP client."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

T = TypeVar("T")


def server_params(home: Path, repo: Path, token: str) -> StdioServerParameters:
    env = dict(os.environ, CHIT_TOKEN=token)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", "--home", str(home), "mcp", "--repo", str(repo)],
        env=env,
    )


def with_client(home: Path, repo: Path, token: str, body: Callable[[Client], Awaitable[T]]) -> T:
    async def run() -> T:
        async with Client(server_params(home, repo, token)) as client:
            return await body(client)

    return anyio.run(run)


def payload(result: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(result.content[0].text)
    return doc
