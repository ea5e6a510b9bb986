"""``chit demo``: the main job, end to end, on real code (README.md, "The two commands").

A temporary repository holding the installed ``starlette`` sources; the real CLI
as subprocesses (``chit init``, ``operators add``, ``mint``, ``mcp``,
``approve``, ``audit verify``, ``audit graph``, ``revoke``) and the official MCP
client over stdio for the lead agent and its helper. Each step is narrated and
checked: the demo fails if one did not behave as expected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pygit2
from mcp import Client, types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from engine.admin import create_repository, files_from_directory

__all__ = ["run_demo", "stdio_server_params"]

AGENT = "docs-bot"
SCOPE = "src/starlette/middleware/**"
HELPER = "docs-bot.gzip"
HELPER_SCOPE = "src/starlette/middleware/gzip.py"
IN_SCOPE = "src/starlette/middleware/cors.py"
OUT_OF_SCOPE = "src/starlette/routing.py"
PROTECTED = "src/starlette/middleware/deploy-keys.toml"
OPERATOR = "ops-lead"
APPROVAL_POLICY = f"""
# Added by chit demo: a commit touching the protected file waits for a person.
[[approval]]
tools = ["commit"]
paths = ["{PROTECTED}"]
approvers = ["{OPERATOR}"]
ttl = 900
reason = "protected files change only with an operator's approval"
"""


def _say(text: str = "") -> None:
    print(text, flush=True)


def _step(n: int, text: str) -> None:
    _say(f"\n[{n}] {text}")


def _chit(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gateway.cli", "--home", str(home), *args]
    return subprocess.run(  # noqa: S603 - fixed argv of our own CLI
        cmd, capture_output=True, text=True, env=env, timeout=120, check=False
    )



def _show_attestations(home: Path, repo: Path, public: Path) -> None:
    """Export the lane's in-toto attestations; check one with securesystemslib alone."""
    out = repo.parent / "attestations"
    _say(f"    auditor: chit audit export agent/{AGENT} --out {out.name} (in-toto, DSSE)")
    exported = _chit(home, "audit", "export", f"agent/{AGENT}", "--repo", str(repo),
                     "--keys", str(public), "--out", str(out))
    _say(textwrap.indent(exported.stdout.rstrip(), "    "))
    if exported.returncode != 0:
        raise RuntimeError("the attestations were not exported")
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    keys = [SSlibKey.from_dict(k["keyid"], {n: k[n] for n in ("keytype", "scheme", "keyval")})
            for k in json.loads((out / "keys.json").read_text("utf-8"))["keys"]]
    lines = (out / "attestations.intoto.jsonl").read_text("utf-8").splitlines()
    envelope = Envelope.from_dict(json.loads(lines[0]))
    envelope.verify(keys, 1)  # raises if the signature does not verify
    statement = json.loads(envelope.payload)
    commit = statement["subject"][0]["digest"]["gitCommit"]
    _say(f"    securesystemslib alone: {len(lines)} statements; the first, for commit "
         f"{commit[:12]}, verifies ({statement['predicateType']})")

def _run(fn: Any, *args: Any) -> Any:
    """``anyio.run``, with the first error of a task group raised as itself (for the report)."""
    try:
        return anyio.run(fn, *args)
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        raise leaf from None


def _result(res: Any) -> dict[str, Any]:
    text = res.content[0].text if res.content else "{}"
    doc: dict[str, Any] = json.loads(text)
    return doc


def stdio_server_params(home: Path, repo: Path, token: str) -> StdioServerParameters:
    """How an MCP host starts ``chit mcp`` for one token (the token in the environment).

    Args:
        home: The chit home.
        repo: The repository.
        token: The agent's token text.

    Returns:
        Parameters for the official client's stdio transport.
    """
    env = dict(os.environ, CHIT_TOKEN=token)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.cli", "--home", str(home), "mcp", "--repo", str(repo)],
        env=env,
    )


def _require_approval(home: Path, key: Path) -> None:
    """Operator: register an approver and make the protected file need one (docs/approvals.md)."""
    added = _chit(home, "operators", "add", OPERATOR, "--key-out", str(key))
    if added.returncode != 0:
        raise RuntimeError(added.stderr.strip())
    policy = home / "policy.toml"
    text = policy.read_text(encoding="utf-8")
    if "protected = []" not in text:
        raise RuntimeError("chit init wrote no [paths] protected list")
    text = text.replace("protected = []", f'protected = ["{PROTECTED}"]')
    policy.write_text(text + APPROVAL_POLICY, encoding="utf-8")
    checked = _chit(home, "policy", "check")
    if checked.returncode != 0:
        raise RuntimeError(checked.stdout.strip() + checked.stderr.strip())
    _say(f"    chit operators add {OPERATOR} --key-out {key.name} (its Ed25519 key, mode 0600)")
    _say(f"    policy: {PROTECTED} protected (sealed at rest); a commit touching it "
         f"waits for {OPERATOR}")


async def _approved_commit(client: Client, home: Path, key: Path) -> None:
    """A commit touching the protected file waits; the operator approves; the retry lands."""
    content = 'signing_key_id = "deploy-2026-12"\n'
    await client.call_tool("write_file", {"path": PROTECTED, "content": content})
    message = {"message": "Pin the deploy signing key id"}
    waiting = await client.session.call_tool("commit", message, allow_input_required=True)
    if not isinstance(waiting, types.InputRequiredResult):
        raise RuntimeError(f"the protected commit did not wait: {waiting}")
    asked = (waiting.meta or {}).get("chit/approval") or {}
    approval = asked.get("approval") or {}
    _say(f"    commit -> input required ({asked.get('error')}), approval {approval.get('id')}")
    _say(f"    asks {', '.join(approval.get('approvers', []))}: {approval.get('summary')}")
    _say("    nothing landed; the client keeps the request state to retry with")

    def operator() -> subprocess.CompletedProcess[str]:
        return _chit(home, "approve", str(approval.get("id")), "--as", OPERATOR,
                     "--key", str(key), "--note", "key id checked against the vault")

    approved = await anyio.to_thread.run_sync(operator)
    if approved.returncode != 0:
        raise RuntimeError(approved.stderr.strip())
    _say(f"    operator: chit approve {approval.get('id')} --as {OPERATOR} --key {key.name}")
    _say(textwrap.indent(approved.stdout.rstrip(), "      "))
    landed = await client.call_tool("commit", message, request_state=waiting.request_state)
    committed = _result(landed)
    if landed.is_error:
        raise RuntimeError(f"the approved commit was refused: {committed}")
    _say(f"    retried with the request state: {committed['commit'][:12]} on "
         f"{committed['lane']} (the file stored sealed, the approval in its provenance)")


def _intersection(scopes: list[list[str]]) -> str:
    """Each block's path globs, shown as the intersection they grant: ``{a, b} ∩ {c}``."""
    shown = ["{" + ", ".join(globs) + "}" for globs in scopes]
    return " ∩ ".join(shown) if shown else "none"


async def _agent_session(home: Path, repo: Path, token: str, operator_key: Path) -> str:
    async with Client(stdio_server_params(home, repo, token)) as client:
        _say(f"    connected over stdio, protocol {client.protocol_version}")
        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        scope = _result(await client.call_tool("effective_scope", {}))
        _say(f"    offered {len(names)} tools: {', '.join(names)}")
        if scope["withheld"]:
            _say(f"    withheld {scope['withheld']} more (the token's operations or the policy "
                 "do not unlock them)")
        _say(f"    lane {scope['lane']}, paths {_intersection(scope['path_scopes'])}, "
             f"ops {', '.join(scope['operations'])}")
        _say(f"    catalog {scope['catalog_hash']}")

        _step(4, f"read inside the scope: {IN_SCOPE}")
        read = await client.call_tool("read_file", {"path": IN_SCOPE})
        content = _result(read)["content"]
        first = next((ln for ln in content.splitlines() if ln.strip()), "")
        _say(f"    {len(content)} characters; first line: {first}")

        _step(5, f"read outside the scope: {OUT_OF_SCOPE}")
        refused = await client.call_tool("read_file", {"path": OUT_OF_SCOPE})
        err = _result(refused)
        _say(f"    isError={refused.is_error}: {err['error']} - {err['message']}")
        if not refused.is_error or err["error"] != "path_outside_scope":
            raise RuntimeError("the out-of-scope read was not refused")

        _step(6, "write: add a module docstring to the CORS middleware (staged, not landed)")
        doc = '"""Cross-Origin Resource Sharing (CORS) middleware for Starlette."""\n\n'
        staged = _result(
            await client.call_tool("write_file", {"path": IN_SCOPE, "content": doc + content})
        )
        _say(f"    staged {staged['change']} {staged['path']} ({staged['staged_bytes']} bytes)")
        diff = _result(await client.call_tool("diff", {}))
        patch = diff["files"][0]["patch"] or ""
        for line in patch.splitlines()[:7]:
            _say(f"    | {line}")

        _step(7, "commit onto the agent's own lane")
        landed = await client.call_tool(
            "commit", {"message": "Document the CORS middleware module"}
        )
        committed = _result(landed)
        if landed.is_error:
            raise RuntimeError(f"commit refused: {committed}")
        short, parent = committed["commit"][:12], committed["parent"][:12]
        _say(f"    {short} on {committed['lane']} (parent {parent})")
        for key, value in committed["trailers"].items():
            _say(f"    {key}: {value}")

        _step(8, f"a commit touching the protected {PROTECTED.rsplit('/', 1)[1]} waits for "
                 "an operator's approval")
        await _approved_commit(client, home, operator_key)

        _step(9, f"delegation: {AGENT} hands a narrower token to a helper agent")
        wide = _result(
            await client.call_tool(
                "issue_sub_token",
                {
                    "agent": HELPER,
                    "ops": ["read", "write"],
                    "paths": ["src/starlette/**"],
                    "ttl_seconds": 600,
                },
            )
        )
        if wide.get("error") != "delegation_widens":
            raise RuntimeError("a widening delegation was not refused")
        _say(f"    asking for src/starlette/** -> {wide['error']} (held: {wide['held']})")
        issued = await client.call_tool(
            "issue_sub_token",
            {
                "agent": HELPER,
                "ops": ["read", "write", "commit"],
                "paths": [HELPER_SCOPE],
                "ttl_seconds": 600,
            },
        )
        child = _result(issued)
        if issued.is_error:
            raise RuntimeError(f"delegation refused: {child}")
        _say(f"    issued {child['token_id']} to {child['agent']}: {HELPER_SCOPE}, 10 minutes")
        return str(child["token"])


async def _helper_session(home: Path, repo: Path, token: str) -> str:
    async with Client(stdio_server_params(home, repo, token)) as client:
        await client.list_tools()
        scope = _result(await client.call_tool("effective_scope", {}))
        paths = _intersection(scope["path_scopes"])
        _say(f"    {scope['agent']} on {scope['lane']}, paths {paths}")
        current = _result(await client.call_tool("read_file", {"path": HELPER_SCOPE}))["content"]
        doc = '"""GZip compression middleware for Starlette responses."""\n\n'
        await client.call_tool("write_file", {"path": HELPER_SCOPE, "content": doc + current})
        landed = _result(await client.call_tool("commit", {"message": "Document GZip middleware"}))
        if "commit" not in landed:
            raise RuntimeError(f"helper commit refused: {landed}")
        _say(f"    {landed['commit'][:12]} on {landed['lane']}")
        return str(scope["token_id"])


async def _revoked_call(home: Path, repo: Path, token: str) -> str:
    async with Client(stdio_server_params(home, repo, token)) as client:
        refused = await client.call_tool("effective_scope", {})
        return str(_result(refused).get("error"))


async def _reader_session(home: Path, repo: Path, token: str) -> None:
    async with Client(stdio_server_params(home, repo, token)) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        _say(f"    offered {len(names)} tools: {', '.join(names)}")
        try:
            await client.call_tool("write_file", {"path": "src/starlette/x.py", "content": "x"})
        except MCPError as exc:
            data = exc.error.data or {}
            _say(f"    write_file -> {exc.error.code} {data.get('error')}")
        else:
            raise RuntimeError("a read-only token could call write_file")


def _call_log(home: Path, public: Path) -> None:
    """Verify the call log, show its newest signed checkpoint and prove one entry in it."""
    verified = _chit(home, "audit", "log", "verify", "--keys", str(public))
    _say(textwrap.indent(verified.stdout.rstrip(), "    "))
    if verified.returncode != 0 or "verified:" not in verified.stdout:
        raise RuntimeError("the call log did not verify")
    checkpoint = _chit(home, "audit", "log", "checkpoint", "--keys", str(public))
    if checkpoint.returncode != 0:
        raise RuntimeError(checkpoint.stderr.strip())
    _say("    chit audit log checkpoint (a signed note a witness can keep):")
    _say(textwrap.indent(checkpoint.stdout.rstrip(), "      "))
    proof = _chit(home, "audit", "log", "prove", "--entry", "1", "--keys", str(public))
    if proof.returncode != 0:
        raise RuntimeError(proof.stderr.strip())
    _say("    chit audit log prove --entry 1:")
    _say(textwrap.indent(proof.stdout.rstrip(), "      "))


def run_demo(*, keep: bool = False) -> int:
    """Run the demo in a temporary folder and print what happens.

    Args:
        keep: Keep the temporary folder (its path is printed).

    Returns:
        0 when every step behaved as expected, 1 otherwise.
    """
    import starlette

    workdir = Path(tempfile.mkdtemp(prefix="chit-demo-"))
    home, repo = workdir / "home", workdir / "repo"
    try:
        _say("chit demo: one agent, one token, one real repository")
        _step(1, "a repository whose main holds real code (the installed starlette package)")
        files = files_from_directory(Path(starlette.__file__).parent, "src/starlette")
        files["README.md"] = b"# demo\n\nThe starlette sources, as a repository for chit.\n"
        main_id = create_repository(repo, files, message="Import starlette sources")
        _say(f"    {repo}: {len(files)} files, main at {main_id[:12]}")

        _step(2, "operator: chit init, an approver, then a token for one agent on a sub-folder")
        init = _chit(home, "init", "--repo", str(repo))
        if init.returncode != 0:
            raise RuntimeError(init.stderr.strip())
        _say(textwrap.indent(init.stdout.rstrip(), "    "))
        key = workdir / f"{OPERATOR}.key"
        _require_approval(home, key)
        mint = _chit(
            home,
            "mint",
            "--agent",
            AGENT,
            "--ops",
            "read,write,commit,sub-token:issue",
            "--paths",
            SCOPE,
            "--repos",
            repo.name,
            "--ttl",
            "15m",
            "--delegable",
            "--json",
        )
        if mint.returncode != 0:
            raise RuntimeError(mint.stderr.strip())
        minted = json.loads(mint.stdout)
        _say(f"    token {minted['token_id']} for {AGENT}: read, write, commit and delegation")
        _say(f"    on {SCOPE} of repository {repo.name!r}, 15 minutes "
             "(text form: chit_..., never logged)")

        _step(3, "agent host: start `chit mcp` and connect with the official MCP client")
        child_token = _run(_agent_session, home, repo, minted["token"], key)

        _step(10, "the helper connects with its own token and commits on its own lane")
        helper_id = _run(_helper_session, home, repo, child_token)

        git = pygit2.Repository(str(repo))
        base = str(git.references["HEAD"].target)  # the base branch: the one HEAD names
        main_now = str(git.references[base].target)
        _say(f"    {base.removeprefix('refs/heads/')} is still {main_now[:12]} "
             f"(unchanged: {main_now == main_id})")
        if main_now != main_id:
            raise RuntimeError("the base branch moved")

        _step(11, "auditor: chit audit verify with the engine's public keys only")
        public = repo.parent / "engine-keys.json"
        exported = _chit(home, "keys", "export-public", "--out", str(public))
        if exported.returncode != 0:
            raise RuntimeError(exported.stderr.strip())
        _say(f"    operator: chit keys export-public --out {public.name} (no secret in it)")
        audit = _chit(home, "audit", "verify", "--repo", str(repo), "--keys", str(public))
        _say(textwrap.indent(audit.stdout.rstrip(), "    "))
        if audit.returncode != 0 or "verified: 3/3 commits" not in audit.stdout:
            raise RuntimeError("audit did not verify the three commits")
        if f"by {OPERATOR} at" not in audit.stdout:
            raise RuntimeError("the audit does not name the approver")
        _say(f"    auditor: chit audit graph {minted['token_id']} --format mermaid")
        drawn = _chit(home, "audit", "graph", minted["token_id"], "--repo", str(repo),
                      "--keys", str(public), "--format", "mermaid")
        _say(textwrap.indent(drawn.stdout.rstrip(), "    "))
        if (drawn.returncode != 0 or "-->|delegated|" not in drawn.stdout
                or "-->|approved|" not in drawn.stdout):
            raise RuntimeError("the provenance graph does not show the delegation")
        _show_attestations(home, repo, public)

        _step(12, "operator: chit revoke the helper's token; its next call fails")
        revoke = _chit(home, "revoke", helper_id)
        _say(textwrap.indent(revoke.stdout.rstrip(), "    "))
        code = _run(_revoked_call, home, repo, child_token)
        _say(f"    the helper's next call -> {code}")
        if code != "token_revoked":
            raise RuntimeError("the revoked token still worked")

        _step(13, "a read-only token is offered only the read tools")
        reader = _chit(
            home,
            "mint",
            "--agent",
            "reviewer",
            "--ops",
            "read",
            "--paths",
            "src/**",
            "--repos",
            repo.name,
            "--ttl",
            "15m",
        )
        if reader.returncode != 0:
            raise RuntimeError(reader.stderr.strip())
        _run(_reader_session, home, repo, reader.stdout.strip())

        _step(14, "auditor: the call log of every call above, verified against its checkpoint")
        _call_log(home, public)

        _say("\ndemo complete: every step behaved as expected")
        return 0
    except (RuntimeError, OSError, MCPError, KeyError, ValueError) as exc:
        _say(f"\ndemo FAILED: {exc}")
        return 1
    finally:
        if keep:
            _say(f"(kept {workdir})")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
