"""Many agents and sessions at once, over real MCP connections (one `chit mcp` each).

The failure to fear is one session's write landing in another's lane or commit
while everything looks healthy, so every commit's content is checked against what
the session that made it wrote.
"""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
import pygit2
from mcp import Client

from tests.conftest import World
from tests.gateway.mcp_client import Edge, payload

AGENTS = 4
SESSIONS_PER_AGENT = 4
COMMITS = 25


FILLER = "--\n" * 4  # context between sessions' lines, so their edits merge cleanly


def _shared_file(agent: str) -> bytes:
    lines = [f"{agent}s{s}: start\n" + FILLER for s in range(SESSIONS_PER_AGENT)]
    return ("".join(lines)).encode()


def _with_line(text: str, label: str, value: str) -> str:
    return "".join(
        f"{label}: {value}\n" if line.startswith(f"{label}: ") else line + "\n"
        for line in text.splitlines()
    )


async def _session(edge: Edge, token: str, agent: str, label: str,
                   log: list[dict[str, Any]]) -> None:
    async with Client(edge.params(token)) as client:
        await client.list_tools()
        session = payload(await client.call_tool("status", {}))["session"]
        shared = f"src/{agent}/shared.txt"
        for i in range(COMMITS):
            own = f"src/{agent}/{label}/f{i}.txt"
            own_text = f"{label} wrote {i}\n"
            written = await client.call_tool("write_file", {"path": own, "content": own_text})
            assert not written.is_error, payload(written)
            for _attempt in range(100):  # read-modify-write of this session's line
                current = payload(await client.call_tool("read_file", {"path": shared}))
                written = await client.call_tool("write_file", {
                    "path": shared, "content": _with_line(current["content"], label, str(i))})
                if not written.is_error:
                    break
                assert payload(written)["error"] == "conflict", payload(written)
            last: dict[str, Any] = {}
            for _attempt in range(200):
                result = await client.call_tool("commit", {"message": f"{label} commit {i}"})
                if not result.is_error:
                    done = payload(result)
                    log.append({"session": session, "agent": agent, "label": label, "i": i,
                                "commit": done["commit"], "own": own, "own_text": own_text})
                    break
                last = payload(result)
                assert last["error"] == "conflict", last
                for conflict in payload(await client.call_tool("list_conflicts", {}))["session"]:
                    merged = _with_line(conflict["theirs"], label, str(i))
                    await client.call_tool("resolve_conflict", {
                        "path": conflict["path"], "resolution": "content", "content": merged})
            else:
                raise AssertionError(f"{label} could not land commit {i}: {last}")


def test_sixteen_sessions_four_agents_no_write_lands_elsewhere(world: World, edge: Edge) -> None:
    tokens = {f"a{n}": world.mint(agent=f"a{n}", ops="read,write,commit", paths="src/**")
              for n in range(AGENTS)}
    # Each agent's sessions share one file (a line each), committed to main first.
    repo = pygit2.Repository(str(world.repo))
    main = repo.references["refs/heads/main"]
    index = pygit2.Index()
    index.read_tree(repo[main.target].tree)
    for agent in tokens:
        index.add(pygit2.IndexEntry(f"src/{agent}/shared.txt",
                                    repo.create_blob(_shared_file(agent)),
                                    pygit2.enums.FileMode.BLOB))
    sig = pygit2.Signature("setup", "setup@example.com", 1_800_000_000, 0)
    repo.create_commit("refs/heads/main", sig, sig, "shared files", index.write_tree(repo),
                       [main.target])
    log: list[dict[str, Any]] = []

    async def run() -> None:
        with anyio.fail_after(600):  # a deadlock fails the test instead of hanging it
            async with anyio.create_task_group() as group:
                for agent, token in tokens.items():
                    for s in range(SESSIONS_PER_AGENT):
                        group.start_soon(_session, edge, token, agent, f"{agent}s{s}", log)

    anyio.run(run)

    repo = pygit2.Repository(str(world.repo))
    assert len(log) == AGENTS * SESSIONS_PER_AGENT * COMMITS  # no commit lost
    by_id = {entry["commit"]: entry for entry in log}
    for agent in tokens:
        lane = repo.references[f"refs/heads/agent/{agent}"].target
        walker = repo.walk(lane, pygit2.enums.SortMode.TOPOLOGICAL)
        walker.hide(repo.references["refs/heads/main"].target)
        seen = []
        for commit in walker:
            entry = by_id.get(str(commit.id))
            assert entry is not None, f"unknown commit {commit.id} on agent/{agent}"
            assert entry["agent"] == agent  # on its own agent's lane
            trailers = dict(line.split(": ", 1) for line in commit.message.splitlines()
                            if line.startswith("Chit-"))
            assert trailers["Chit-Agent"] == agent
            assert trailers["Chit-Session"] == entry["session"]
            # Exactly what this session wrote: its own file, and nothing of any
            # other session's own files.
            changed = {p.delta.new_file.path for p in
                       repo.diff(commit.parents[0], commit)} if commit.parents else set()
            own_changes = {p for p in changed if not p.endswith("shared.txt")}
            assert own_changes == {entry["own"]}, (entry["label"], entry["i"], changed)
            assert repo[commit.tree[entry["own"]].id].data.decode() == entry["own_text"]
            shared_now = repo[commit.tree[f"src/{agent}/shared.txt"].id].data.decode()
            assert f"{entry['label']}: {entry['i']}\n" in shared_now
            seen.append(str(commit.id))
        assert len(seen) == SESSIONS_PER_AGENT * COMMITS
    fsck = subprocess.run(["git", "-C", str(world.repo), "fsck", "--strict"],
                          capture_output=True, text=True, check=False)
    assert fsck.returncode == 0, fsck.stderr
