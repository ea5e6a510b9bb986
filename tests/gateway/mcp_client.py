"""Drive ``chit mcp`` over a real stdio subprocess with the official MCP client."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp import Client

from gateway.demo import stdio_server_params

T = TypeVar("T")


def with_client(home: Path, repo: Path, token: str, body: Callable[[Client], Awaitable[T]]) -> T:
    async def run() -> T:
        async with Client(stdio_server_params(home, repo, token)) as client:
            return await body(client)

    return anyio.run(run)


def payload(result: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(result.content[0].text)
    return doc
