"""The README's MCP host configurations, run as written with the official MCP client.

The stdio ``mcpServers`` entry is started as the host would start it (its
command, args and env); the HTTP entry's command line is run and the entry's
``url`` and ``headers`` are what the client sends. Only the README's
placeholders change: the ``chit`` path, the home, the repository, the token and
the port (0, so the test picks a free one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import World
from tests.gateway.http_client import start, stop
from tests.gateway.mcp_client import payload

README = Path(__file__).resolve().parents[2] / "README.md"
CHIT = "/opt/chit/.venv/bin/chit"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start_at = text.index("## Agent hosts: MCP host set-up")
    return text[start_at:text.index("\n## ", start_at + 1)]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _section(), flags=re.DOTALL)


def _entry(kind: str) -> dict[str, Any]:
    for block in _blocks("json"):
        entry: dict[str, Any] = json.loads(block)["mcpServers"]["chit"]
        if (kind == "http") == ("url" in entry):
            return entry
    raise AssertionError(f"no {kind} entry in the README's host set-up")


def _localise(value: str, world: World, token: str) -> str:
    return (value.replace("/home/me/.chit", str(world.home))
            .replace("/srv/repos/app", str(world.repo))
            .replace("chit_...", token))


async def _use(client: Client) -> tuple[set[str], dict[str, Any]]:
    listed = {t.name for t in (await client.list_tools()).tools}
    return listed, payload(await client.call_tool("effective_scope", {}))


def test_readme_stdio_entry(world: World) -> None:
    token = world.mint(agent="docs-bot")
    entry = _entry("stdio")
    assert entry["command"] == CHIT
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", *(_localise(a, world, token) for a in entry["args"])],
        env=dict(os.environ) | {k: _localise(v, world, token) for k, v in entry["env"].items()},
    )

    async def body() -> Any:
        async with Client(params) as client:
            return await _use(client)

    listed, scope = anyio.run(body)
    assert "write_file" in listed and scope["agent"] == "docs-bot"


def test_readme_http_entry(world: World) -> None:
    token = world.mint(agent="docs-bot")
    entry = _entry("http")
    (command,) = [b for b in _blocks("sh") if "--http" in b]
    argv = shlex.split(_localise(command, world, token))
    assert argv[0] == "chit"
    listen = argv[argv.index("--http") + 1]
    argv[argv.index("--http") + 1] = listen.rpartition(":")[0] + ":0"
    edge = start([sys.executable, "-m", "gateway.cli", *argv[1:]])
    try:
        url = entry["url"].replace(listen, edge.url.removeprefix("http://").removesuffix("/mcp"))
        assert url == edge.url
        headers = {k: _localise(v, world, token) for k, v in entry["headers"].items()}

        async def body(mode: str) -> Any:
            async with httpx2.AsyncClient(headers=headers) as http:
                async with Client(streamable_http_client(url, http_client=http),
                                  mode=mode) as client:
                    return client.protocol_version, *await _use(client)

        for mode, version in (("auto", "2026-07-28"), ("legacy", "2025-11-25")):
            negotiated, listed, scope = anyio.run(body, mode)
            assert negotiated == version
            assert "write_file" in listed and scope["agent"] == "docs-bot"
    finally:
        stop(edge)
