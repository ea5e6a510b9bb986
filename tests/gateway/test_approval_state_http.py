"""The sealed requestState of 2026-07-28 over real HTTP on loopback, with the official client.

The edge runs in this process in front of the real engine, behind a gate that
makes ``commit`` wait for an approval id the test approves (the engine's own
approval flow has its end-to-end tests in test_approvals_edges.py). What is
tested here is the edge: the input-required result, the sealing, the client's
retry, and the refusal of every state the edge did not mint for this call.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
import uvicorn
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

from engine import admin
from engine.service import CallAnswer, Called, Engine, Refused, resolve_repo_specs
from gateway.http_edge import HttpEdge, HttpSettings
from gateway.http_edge.run import bind, uvicorn_config
from tests.conftest import World
from tests.gateway.http_client import http_client
from tests.gateway.mcp_client import payload

MODERN = "2026-07-28"
APPROVAL_ID = "apr_" + "k" * 26


@dataclass
class Gate:
    """The real engine, except that ``commit`` waits until :attr:`approved` (an edge's view).

    ``status`` lists the approval while it is pending, as the engine lists a
    session's pending approvals.
    """

    engine: Engine
    approved: bool = False
    echoed: list[str | None] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)  # a retry found it pending

    def offer(self, token: str, *, repo: str | None = None) -> Any:
        return self.engine.offer(token, repo=repo)

    def wait_change(self, after: int, timeout: float) -> int:
        return self.engine.wait_change(after, timeout)

    def invoke(self, token: str, tool: str, arguments: dict[str, Any] | None, *, session: str,
               offered_catalog_hash: str | None = None, repo: str | None = None,
               approval: str | None = None) -> CallAnswer:
        if tool == "status":
            answer = self.engine.invoke(token, tool, arguments, session=session,
                                        offered_catalog_hash=offered_catalog_hash, repo=repo)
            if isinstance(answer, Called):  # as the engine lists a session's pending approvals
                pending = [] if self.approved else [{"id": APPROVAL_ID, "tool": "commit"}]
                return Called({**answer.result, "approvals": pending})
            return answer
        if tool == "commit":
            self.echoed.append(approval)
            # The engine finds an approval by the request; an echoed id must name it.
            if not self.approved or approval not in (None, APPROVAL_ID):
                if approval is not None:
                    self.held.set()
                return Refused("approval_required", "this call waits for an approval", {
                    "approval": {"id": APPROVAL_ID, "tool": "commit", "paths": ["src/app.py"],
                                 "approvers": ["ops"], "expires_at": int(time.time()) + 600},
                    "waits": f"chit approve {APPROVAL_ID}"})
        return self.engine.invoke(token, tool, arguments, session=session,
                                  offered_catalog_hash=offered_catalog_hash, repo=repo)


@contextlib.contextmanager
def serving(world: World, keys: list[bytes] | None) -> Iterator[tuple[Gate, str]]:
    settings = HttpSettings("127.0.0.1", 0, watch_interval=0.2)
    with Engine(world.home, resolve_repo_specs(world.home, [str(world.repo)])) as engine:
        gate = Gate(engine)
        sock = bind(settings)
        edge = HttpEdge(gate, settings, port=sock.getsockname()[1], state_keys=keys)
        server = uvicorn.Server(uvicorn_config(edge.app))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not server.started:
                assert time.monotonic() < deadline and thread.is_alive()
                time.sleep(0.02)
            yield gate, edge.resource
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()


@pytest.fixture
def keys(world: World) -> list[bytes]:
    return list(admin.request_state_keys(world.home).keys)


async def _stage(client: Any) -> None:
    await client.list_tools()
    await client.call_tool("write_file", {"path": "src/app.py", "content": "X = 1\n"})


async def _waiting(client: Any, message: str = "m") -> types.InputRequiredResult:
    result = await client.session.call_tool("commit", {"message": message},
                                            allow_input_required=True)
    assert isinstance(result, types.InputRequiredResult)
    return result


def test_the_official_client_retries_and_a_held_retry_lands_once_approved(
    world: World, keys: list[bytes],
) -> None:
    token = world.mint()
    bystander = str(admin.inspect_token(world.mint(agent="bob"))["id"])
    with serving(world, keys) as (gate, url):

        async def go() -> dict[str, Any]:
            async with http_client(url, token, mode=MODERN) as (client, _):
                await _stage(client)

                async def approve() -> None:
                    # Once a retry with the state is held as pending, decide,
                    # and move the engine's change feed (a decision moves it).
                    await anyio.to_thread.run_sync(gate.held.wait, 60)
                    gate.approved = True
                    await anyio.to_thread.run_sync(lambda: admin.revoke(world.home, bystander))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(approve)
                    # The client's own driver retries the input-required result.
                    result = await client.call_tool("commit", {"message": "m"})
                return payload(result)

        committed = anyio.run(go)
    assert committed["commit"] == world.refs()["refs/heads/agent/alice"]
    # The first call carries no state; the retry echoed the id, was held, and
    # was asked again once the feed moved: it landed without another round.
    assert gate.echoed == [None, APPROVAL_ID, APPROVAL_ID]


def test_the_state_is_sealed_and_a_client_passes_it_back(
    world: World, keys: list[bytes],
) -> None:
    token = world.mint()
    with serving(world, keys) as (gate, url):

        async def go() -> tuple[types.InputRequiredResult, dict[str, Any]]:
            async with http_client(url, token, mode=MODERN) as (client, _):
                await _stage(client)
                waiting = await _waiting(client)
                gate.approved = True
                done = await client.call_tool("commit", {"message": "m"},
                                              request_state=waiting.request_state)
                return waiting, payload(done)

        waiting, committed = anyio.run(go)
    state = waiting.request_state or ""
    # Threat: the approval id readable or forgeable by the client: it is encrypted.
    assert state.startswith("v1.") and APPROVAL_ID not in state and "approval" not in state
    meta = waiting.meta or {}
    assert meta["chit/approval"]["approval"]["id"] == APPROVAL_ID
    assert "commit" in committed and gate.echoed == [None, APPROVAL_ID]


def _flip(state: str) -> str:
    i = len(state) // 2
    return state[:i] + ("A" if state[i] != "A" else "B") + state[i + 1:]


@pytest.mark.parametrize("case", ["tampered", "other_arguments", "other_tool", "other_token",
                                  "other_repo_key", "not_sealed"])
def test_a_state_not_minted_for_this_call_never_reaches_the_handler(
    world: World, keys: list[bytes], case: str,
) -> None:
    # Threat: a client (or another agent) replaying, editing or forging a requestState to
    # pass an approval id the edge never gave it for this call.
    token, other = world.mint(), world.mint(agent="bob")
    with serving(world, keys) as (gate, url):

        async def go() -> MCPError:
            async with http_client(url, token, mode=MODERN) as (client, _):
                await _stage(client)
                state = (await _waiting(client)).request_state or ""
            gate.approved = True
            name, arguments, who = "commit", {"message": "m"}, token
            if case == "tampered":
                state = _flip(state)
            elif case == "other_arguments":
                arguments = {"message": "something else"}
            elif case == "other_tool":
                name, arguments = "status", {}
            elif case == "other_token":
                who = other
            elif case == "not_sealed":
                state = json.dumps({"v": 1, "approval": APPROVAL_ID})
            async with http_client(url, who, mode=MODERN) as (client, _):
                await client.list_tools()
                with pytest.raises(MCPError) as err:
                    await client.call_tool(name, arguments, request_state=state)
                return err.value

        if case == "other_repo_key":
            # Minted by an edge of another home: its keys are not this one's.
            with serving(world, [b"\x07" * 32]) as (_elsewhere, there):

                async def mint() -> str:
                    async with http_client(there, token, mode=MODERN) as (client, _):
                        await _stage(client)
                        return (await _waiting(client)).request_state or ""

                foreign = anyio.run(mint)

            async def replay() -> MCPError:
                async with http_client(url, token, mode=MODERN) as (client, _):
                    await client.list_tools()
                    with pytest.raises(MCPError) as err:
                        await client.call_tool("commit", {"message": "m"},
                                               request_state=foreign)
                    return err.value

            gate.approved = True
            error = anyio.run(replay)
            assert gate.echoed == []
        else:
            error = anyio.run(go)
            assert gate.echoed == [None]  # the first call only: the replay never ran
    assert error.error.code == types.INVALID_PARAMS
    assert error.error.message == "Invalid or expired requestState"
    assert "commit" not in world.refs().get("refs/heads/agent/alice", "")


def test_the_2025_era_without_url_elicitation_gets_the_refusal(world: World) -> None:
    token = world.mint()
    with serving(world, None) as (_gate, url):

        async def go() -> Any:
            async with http_client(url, token) as (client, _):
                await _stage(client)
                return await client.call_tool("commit", {"message": "m"})

        result = anyio.run(go)
    assert result.is_error and payload(result)["error"] == "approval_required"
    assert payload(result)["approval"]["id"] == APPROVAL_ID


class _Completed:
    """A client message handler noting ``notifications/elicitation/complete``."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/elicitation/complete":
            self.ids.append(message.params.elicitation_id)
            self.event.set()


async def _never(_ctx: Any, _params: Any) -> types.ElicitResult:
    raise AssertionError("the edge sends no elicitation/create")


def test_the_2025_era_with_url_elicitation_is_sent_to_the_page_then_told(
    world: World,
) -> None:
    token = world.mint()
    bystander = str(admin.inspect_token(world.mint(agent="bob"))["id"])
    completed = _Completed()
    with serving(world, None) as (gate, url):

        async def go() -> tuple[UrlElicitationRequiredError, str, dict[str, Any]]:
            async with http_client(url, token, message_handler=completed,
                                   elicitation_callback=_never) as (client, http):
                await _stage(client)
                with pytest.raises(MCPError) as err:
                    await client.call_tool("commit", {"message": "m"})
                assert err.value.error.code == -32042
                waiting = UrlElicitationRequiredError.from_error(err.value.error)
                page = (await http.get(waiting.elicitations[0].url)).text
                # The decision, then any move of the engine's change feed.
                gate.approved = True
                await anyio.to_thread.run_sync(lambda: admin.revoke(world.home, bystander))
                with anyio.fail_after(15):
                    await completed.event.wait()
                return waiting, page, payload(await client.call_tool("commit", {"message": "m"}))

        waiting, page, committed = anyio.run(go)
    [elicitation] = waiting.elicitations
    assert elicitation.elicitation_id == APPROVAL_ID and elicitation.mode == "url"
    assert elicitation.url == url.removesuffix("/mcp") + f"/approvals/{APPROVAL_ID}"
    assert "commit" in elicitation.message and "ops" in elicitation.message
    assert "src/app.py" in page and f"chit approve {APPROVAL_ID}" in page
    assert completed.ids == [APPROVAL_ID]
    assert committed["commit"] == world.refs()["refs/heads/agent/alice"]


def test_the_page_answers_only_for_approval_ids(world: World) -> None:
    with serving(world, None) as (_gate, url):
        origin = url.removesuffix("/mcp")
        with httpx2.Client(timeout=30) as http:
            unknown = http.get(f"{origin}/approvals/apr_{'z' * 26}")
            bad = http.get(f"{origin}/approvals/..%2Fmcp")
            foreign = http.get(f"{origin}/approvals/apr_{'z' * 26}",
                               headers={"Host": "evil.example:80"})
    assert unknown.status_code == 200 and "no details" in unknown.text
    assert unknown.headers["content-security-policy"].startswith("default-src 'none'")
    assert unknown.headers["cache-control"] == "no-store"
    assert bad.status_code == 404
    assert foreign.status_code == 421  # Threat: DNS rebinding reading the page
