"""list_files and search_text over real MCP stdio sessions (the official client).

Threat: an agent whose policy keeps it out of one file in its scope (a
protected file, denied to it) learns that file's name or content through the
listing or a search, over the same transport a real agent uses.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import Client

from tests.conftest import World
from tests.gateway.mcp_client import Edge, payload

POLICY = """version = 1
[paths]
protected = ["src/.env"]

[[rules]]
effect = "deny"
agents = ["alice"]
paths = ["src/.env"]
reason = "secrets are for the release agent"
"""


def test_list_and_search_over_stdio(world: World, edge: Edge) -> None:
    (world.home / "policy.toml").write_text(POLICY)
    token = world.mint(agent="alice", ops="read,write", paths="src/**")

    async def body(client: Client) -> Any:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        listed = payload(await client.call_tool("list_files", {}))
        page = payload(await client.call_tool("list_files", {"limit": 2}))
        rest = payload(await client.call_tool("list_files", {"cursor": page["cursor"]}))
        hidden = payload(await client.call_tool("search_text", {"query": "SECRET"}))
        found = payload(await client.call_tool("search_text",
                                               {"query": "return \\d", "regex": True}))
        await client.call_tool("write_file", {"path": "src/new/mod.py", "content": "x = 2\n"})
        staged = payload(await client.call_tool("list_files", {"path": "src/new"}))
        refused = await client.call_tool("search_text", {"query": "(a)\\1", "regex": True})
        part = payload(await client.call_tool("read_file", {"path": "src/app.py",
                                                            "start_line": 2}))
        return tools, listed, page, rest, hidden, found, staged, refused, part

    tools, listed, page, rest, hidden, found, staged, refused, part = edge.run(token, body)
    assert tools["list_files"].annotations.read_only_hint is True
    assert tools["search_text"].annotations.read_only_hint is True
    assert "start_line" in tools["read_file"].input_schema["properties"]
    assert [(e["path"], e["kind"]) for e in listed["entries"]] == [
        ("src", "folder"), ("src/api", "folder"), ("src/api/v1.py", "file"),
        ("src/app.py", "file"), ("src/data.bin", "file")]
    # README.md, docs and src_old are out of scope; src/.env is denied by the policy.
    assert listed["pruned"] == 4
    assert page["entries"] + rest["entries"] == listed["entries"]
    assert page["truncated"] and not rest["truncated"]
    for answer in (listed, page, rest, hidden):
        assert ".env" not in json.dumps(answer) and "SECRET" not in json.dumps(answer)
    assert hidden["matches"] == [] and not hidden["truncated"]
    assert [(m["path"], m["line"], m["text"]) for m in found["matches"]] == [
        ("src/app.py", 2, "    return 1")]
    assert [e["path"] for e in staged["entries"]] == ["src/new/mod.py"]
    assert refused.is_error and payload(refused)["error"] == "invalid_argument"
    assert part["content"] == "    return 1\n" and part["total_lines"] == 2
