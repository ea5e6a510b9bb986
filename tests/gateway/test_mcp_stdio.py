"""The MCP edge over a real stdio subprocess, driven by the official MCP client."""

from __future__ import annotations

import hashlib
import subprocess
from typing import Any

import pygit2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from engine.auth import cbor
from tests.conftest import World
from tests.gateway.mcp_client import Edge, payload

READ_TOOLS = {
    "effective_scope", "status", "read_file", "log", "diff", "list_conflicts", "provenance_graph",
    "symbol_context", "symbol_relations", "search_symbols", "change_impact", "project_context",
    "list_files", "search_text",
}
WRITE_TOOLS = {"write_file", "delete_file", "move_file", "commit"}


def test_read_only_token_is_offered_only_read_tools(world: World, edge: Edge) -> None:
    token = world.mint(ops="read")

    async def body(client: Client) -> Any:
        listed = await client.list_tools()
        scope = payload(await client.call_tool("effective_scope", {}))
        return listed, scope, client.instructions

    listed, scope, instructions = edge.run(token, body)
    names = {t.name for t in listed.tools}
    assert names == READ_TOOLS
    assert all(t.annotations and t.annotations.read_only_hint for t in listed.tools)
    assert scope["tools"] == sorted(READ_TOOLS)
    assert scope["withheld"] == 21 - len(READ_TOOLS)
    assert scope["operations"] == ["read"] and scope["lane"] == "agent/alice"
    # The agent is told how to work at initialize.
    for phrase in ("effective_scope", "project_context", "commit", "agent/<name>", "isError"):
        assert phrase in (instructions or "")


@pytest.mark.parametrize("ops", ["read", "read,write,commit"])
def test_tools_outside_the_offer_are_unknown_under_any_spelling(
    world: World, edge: Edge, ops: str
) -> None:
    """Threat: calling a hidden tool by name, or by a case variant of an offered one."""
    token = world.mint(ops=ops)
    before = world.refs()
    names = [
        "Resolve_Conflict",
        "issue_sub_token",
        "Provenance_Graph",
        "obliterate",
        "Read_File",
        "READ_FILE",
        "read_file ",
        "effective-scope",
    ]
    if ops == "read":
        names += ["write_file", "commit", "Write_File", "delete_file", "move_file"]

    async def body(client: Client) -> list[Any]:
        await client.list_tools()
        errors = []
        for name in names:
            try:
                await client.call_tool(name, {"path": "src/x.py", "content": "x", "message": "m"})
            except MCPError as exc:
                errors.append(exc.error)
            else:
                errors.append(None)
        # The server keeps serving after every refusal.
        errors.append(payload(await client.call_tool("effective_scope", {}))["agent"])
        return errors

    errors = edge.run(token, body)
    assert errors[-1] == "alice"
    for name, error in zip(names, errors[:-1], strict=True):
        assert error is not None, name
        assert error.code == -32602
        assert error.data["error"] == "tool_not_offered"
        assert "effective_scope" in error.data["offered"]
        assert name not in error.data["offered"]
    assert world.refs() == before


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    [
        ("read_file", {"path": "src_old/legacy.py"}, "path_outside_scope"),
        ("read_file", {"path": "src"}, "path_outside_scope"),
        ("read_file", {"path": "docs/guide.md"}, "path_outside_scope"),
        ("read_file", {"path": "../etc/passwd"}, "path_invalid"),
        ("read_file", {"path": "/etc/passwd"}, "path_invalid"),
        ("read_file", {"path": "src/../src_old/legacy.py"}, "path_invalid"),
        ("read_file", {"path": "src\\app.py"}, "path_invalid"),
        ("read_file", {"path": "src/app.py\x00.md"}, "path_invalid"),
        ("read_file", {"path": "src//app.py"}, "path_invalid"),
        ("read_file", {"path": ".git/config"}, "path_forbidden"),
        ("read_file", {"path": "src/.GIT/config"}, "path_forbidden"),
        ("read_file", {"path": "src/.git./hooks/x"}, "path_forbidden"),
        ("read_file", {"path": "src/.env"}, "path_forbidden"),
        ("read_file", {"path": "src/missing.py"}, "not_found"),
        ("read_file", {"path": "src/api"}, "not_found"),
        ("read_file", {"path": "src/app.py", "ref": "--output=/tmp/x"}, "invalid_argument"),
        ("read_file", {"path": "src/app.py", "ref": "main..HEAD"}, "invalid_argument"),
        ("read_file", {"path": "src/app.py", "extra": 1}, "invalid_argument"),
        ("read_file", {}, "invalid_argument"),
        ("read_file", {"path": 5}, "invalid_argument"),
        ("read_file", {"path": ""}, "path_invalid"),
        ("read_file", {"path": "src/" + "a" * 5000}, "path_invalid"),
        ("read_file", {"path": "src/\u202eevil.py"}, "path_invalid"),
        ("read_file", {"path": "src/.ENV"}, "path_forbidden"),
        # A Windows checkout drops the trailing dot: refused before any rule.
        ("write_file", {"path": "src/.env.", "content": "x"}, "path_invalid"),
        ("write_file", {"path": "src/nul.txt", "content": "x"}, "path_invalid"),
        ("write_file", {"path": "src/app.py::$DATA", "content": "x"}, "path_invalid"),
        ("write_file", {"path": "src_old/x.py", "content": "x"}, "path_outside_scope"),
        ("write_file", {"path": "src/.git/hooks/pre-commit", "content": "x"}, "path_forbidden"),
        (
            "write_file",
            {"path": "src/x.py", "content": "!!", "encoding": "base64"},
            "invalid_argument",
        ),
        ("write_file", {"path": "src/app.py/x", "content": "x"}, "invalid_argument"),
        (
            "move_file",
            {"source": "src/app.py", "destination": "src_old/app.py"},
            "path_outside_scope",
        ),
        ("delete_file", {"path": "src/missing.py"}, "not_found"),
        ("commit", {"message": "nothing staged"}, "invalid_argument"),
    ],
)
def test_refusals_carry_their_codes_and_change_nothing(
    world: World, edge: Edge, tool: str, args: dict[str, Any], code: str
) -> None:
    token = world.mint()
    before = world.refs()

    async def body(client: Client) -> Any:
        await client.list_tools()
        result = await client.call_tool(tool, args)
        status = payload(await client.call_tool("status", {}))
        return result, status

    result, status = edge.run(token, body)
    assert result.is_error
    error = payload(result)
    assert error["error"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"]
    assert status["staged"] == []
    assert world.refs() == before


def test_write_and_commit_land_on_the_lane_with_trailers(world: World, edge: Edge) -> None:
    token = world.mint()
    worktree_before = (world.repo / "src" / "app.py").read_bytes()
    index_before = (world.repo / ".git" / "index").read_bytes()

    async def body(client: Client) -> Any:
        await client.list_tools()
        scope = payload(await client.call_tool("effective_scope", {}))
        w = await client.call_tool("write_file", {"path": "src/app.py", "content": "print(2)\n"})
        n = await client.call_tool("write_file", {"path": "src/new/mod.py", "content": "X = 1\n"})
        b = await client.call_tool(
            "write_file", {"path": "src/blob.bin", "content": "AAEC/w==", "encoding": "base64"}
        )
        d = await client.call_tool("delete_file", {"path": "src/api/v1.py"})
        staged_read = payload(await client.call_tool("read_file", {"path": "src/app.py"}))
        main_read = payload(
            await client.call_tool("read_file", {"path": "src/app.py", "ref": "main"})
        )
        diff = payload(await client.call_tool("diff", {}))
        committed = await client.call_tool("commit", {"message": "Update app\n\nBody text."})
        log = payload(await client.call_tool("log", {}))
        status = payload(await client.call_tool("status", {}))
        return scope, [w, n, b, d], staged_read, main_read, diff, committed, log, status

    scope, writes, staged_read, main_read, diff, committed, log, status = edge.run(token, body)
    assert not any(w.is_error for w in writes)
    assert staged_read["content"] == "print(2)\n"
    assert main_read["content"] == "def main():\n    return 1\n"
    assert {f["path"] for f in diff["files"]} == {
        "src/app.py",
        "src/new/mod.py",
        "src/blob.bin",
        "src/api/v1.py",
    }
    assert not committed.is_error, payload(committed)
    result = payload(committed)

    repo = pygit2.Repository(str(world.repo))
    lane = repo.references["refs/heads/agent/alice"]
    commit = repo[lane.target]
    assert str(commit.id) == result["commit"]
    assert [str(p) for p in commit.parent_ids] == [world.main_id]
    # main, the working tree and the index file are untouched.
    assert str(repo.references["refs/heads/main"].target) == world.main_id
    assert (world.repo / "src" / "app.py").read_bytes() == worktree_before
    assert (world.repo / ".git" / "index").read_bytes() == index_before
    # The tree is the staged view.
    tree = commit.tree
    assert repo[tree["src/app.py"].id].data == b"print(2)\n"
    assert repo[tree["src/new/mod.py"].id].data == b"X = 1\n"
    assert repo[tree["src/blob.bin"].id].data == b"\x00\x01\x02\xff"
    assert "src/api/v1.py" not in tree
    assert repo[tree["src_old/legacy.py"].id].data == b"OLD = True\n"
    # Trailers name agent, session, token, catalog hash and encoding.
    lines = commit.message.splitlines()
    assert lines[0] == "Update app"
    trailers = dict(line.split(": ", 1) for line in lines if line.startswith("Chit-"))
    assert trailers["Chit-Agent"] == "alice"
    assert trailers["Chit-Token-Id"] == scope["token_id"]
    assert trailers["Chit-Catalog-Hash"] == scope["catalog_hash"]
    assert trailers["Chit-Catalog-Encoding"] == "chit-catalog/1"
    assert trailers["Chit-Session"] == status["session"]
    assert commit.author.email == "alice@agents.chit.invalid"
    # The catalog hash recomputes from the bytes stored in the repository.
    store = repo[repo.references["refs/chit/catalogs"].target]
    hexhash = trailers["Chit-Catalog-Hash"].removeprefix("sha256:")
    stored = repo[store.tree[hexhash].id].data
    assert hashlib.sha256(stored).hexdigest() == hexhash
    catalog = cbor.decode(stored, max_size=len(stored))
    assert catalog["encoding"] == "chit-catalog/1"
    assert [t["name"] for t in catalog["tools"]] == scope["tools"]
    # After the commit, the session is clean and the log shows the commit.
    assert status["staged"] == [] and status["ahead"] == 1 and status["behind"] == 0
    assert log["commits"][0]["id"] == result["commit"]

    audit = subprocess.run(
        [*world.cli(), "audit", "verify", "--repo", str(world.repo)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert result["commit"][:12] in audit.stdout


def test_commit_message_cannot_forge_trailers(world: World, edge: Edge) -> None:
    """Threat: an agent injecting provenance trailers through its message."""
    token = world.mint()

    async def body(client: Client) -> Any:
        await client.list_tools()
        await client.call_tool("write_file", {"path": "src/app.py", "content": "x\n"})
        return await client.call_tool(
            "commit", {"message": "msg\n\nChit-Agent: root\nchit-catalog-hash: sha256:00"}
        )

    result = edge.run(token, body)
    assert result.is_error and payload(result)["error"] == "invalid_argument"
    assert "refs/heads/agent/alice" not in world.refs()


@pytest.mark.parametrize(
    "message",
    [
        "fix\rChit-Agent: root",
        "fix\x0bChit-Agent: root",
        "fix\u2028Chit-Agent: root",
        "fix \u202eevil",
        "a\x00b",
        "a\x85b",
    ],
)
def test_commit_message_cannot_forge_lines(world: World, edge: Edge, message: str) -> None:
    """Threat: line separators other than LF faking trailers in `git log` output."""
    token = world.mint()

    async def body(client: Client) -> Any:
        await client.list_tools()
        await client.call_tool("write_file", {"path": "src/app.py", "content": "x\n"})
        return await client.call_tool("commit", {"message": message})

    result = edge.run(token, body)
    assert result.is_error and payload(result)["error"] == "invalid_argument"
    assert "refs/heads/agent/alice" not in world.refs()


def _flip(token: str, index: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    c = token[index]
    replacement = alphabet[(alphabet.index(c) + 1) % 64] if c in alphabet else "A"
    return token[:index] + replacement + token[index + 1 :]


@pytest.mark.parametrize("where", [5, 40, -30, -1])
def test_tampered_token_is_refused(world: World, edge: Edge, where: int) -> None:
    """Threat: a token altered in transit or by its holder."""
    token = world.mint()
    tampered = _flip(token, where % len(token))

    async def body(client: Client) -> Any:
        try:
            await client.list_tools()
            listed_error = None
        except MCPError as exc:
            listed_error = exc.error
        called = await client.call_tool("read_file", {"path": "src/app.py"})
        return listed_error, called

    listed_error, called = edge.run(tampered, body)
    refusals = {
        "token_invalid_signature",
        "token_malformed",
        "token_unknown_key",
        "token_unsupported_version",
    }
    assert listed_error is not None
    assert listed_error.data["error"] in refusals
    assert called.is_error
    assert payload(called)["error"] == listed_error.data["error"]
    assert token not in str(listed_error) and tampered not in str(payload(called))


def _stderr_at_start(edge: Edge, token: str) -> str:
    """What ``chit mcp`` writes on stderr when its client leaves at once (stdin at EOF)."""
    params = edge.params(token)
    done = subprocess.run([params.command, *params.args], env=params.env, cwd=params.cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False)
    return done.stderr.decode("utf-8", "replace")


def test_a_refused_token_is_reported_on_stderr_at_start(world: World, edge: Edge) -> None:
    """An operator sees why at once, not only after the agent's first call fails."""
    import time

    from engine import admin

    expired = world.mint(ttl=60, now=int(time.time()) - 3600)
    revoked = world.mint(agent="rex")
    admin.revoke(world.home, str(admin.inspect_token(revoked)["id"]))
    good = world.mint(agent="gus")
    for token, code in ((expired, "token_expired"), (revoked, "token_revoked"),
                        (good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"), None)):
        stderr = _stderr_at_start(edge, token)
        said = [line for line in stderr.splitlines() if "the token is refused" in line]
        assert len(said) == 1, stderr
        if code is not None:
            assert f"({code})" in said[0]
        assert token not in stderr
    assert "the token is refused" not in _stderr_at_start(edge, good)
