"""``chit mcp --http``: a real uvicorn server on loopback, driven by the official MCP client.

Both protocol eras are exercised: the 2025-11-25 session protocol (``mode="legacy"``:
``initialize``, ``Mcp-Session-Id``, the GET stream) and the stateless 2026-07-28
protocol (``mode="2026-07-28"``, and ``mode="auto"``, which discovers it).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pygit2
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError

from engine import admin
from engine.auth import cbor
from engine.auth import token as tokens
from tests.conftest import World
from tests.gateway.http_client import Edge, http_client, running_edge, start, stop
from tests.gateway.mcp_client import TOKEN_TEXT, Heard, engine_server, payload

MODERN = "2026-07-28"
ERAS = ["legacy", MODERN]
INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}},
}
JSON_HEADERS = {"Accept": "application/json, text/event-stream",
                "Content-Type": "application/json"}


def _run(body: Any) -> Any:
    return anyio.run(body)


def _token_id(token: str) -> str:
    return str(admin.inspect_token(token)["id"])


def _mcp_error(exc: BaseException) -> MCPError:
    """The MCPError inside ``exc`` (the client raises connect failures in a group)."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            with contextlib.suppress(AssertionError):
                return _mcp_error(inner)
    raise AssertionError(f"no MCPError in {exc!r}")


@pytest.mark.parametrize("mode", ["legacy", MODERN, "auto"])
def test_both_eras_offer_per_token_and_commit_on_the_lane(world: World, mode: str) -> None:
    writer = world.mint(agent="alice")
    reader = world.mint(agent="rita", ops="read")

    async def body(edge: Edge) -> Any:
        async with http_client(edge.url, writer, mode=mode) as (client, _):
            version = client.protocol_version
            tools = (await client.list_tools()).tools
            listed = {t.name for t in tools}
            read_only = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
            scope = payload(await client.call_tool("effective_scope", {}))
            wrote = payload(await client.call_tool(
                "write_file", {"path": "src/new.py", "content": "NEW = 1\n"}))
            committed = payload(await client.call_tool("commit", {"message": "add new.py"}))
        async with http_client(edge.url, reader, mode=mode) as (client, _):
            read_listed = {t.name for t in (await client.list_tools()).tools}
        return version, listed, read_only, scope, wrote, committed, read_listed

    with running_edge(world) as edge:
        version, listed, read_only, scope, wrote, committed, read_listed = _run(
            lambda: body(edge))
    assert version == ("2025-11-25" if mode == "legacy" else MODERN)
    assert {"effective_scope", "read_file", "write_file", "commit"} <= listed
    # tools/list is computed from each request's token: the read token sees the read tools.
    assert read_listed == read_only and "read_file" in read_only
    assert "write_file" not in read_listed
    assert scope["agent"] == "alice" and scope["lane"] == "agent/alice"
    assert wrote["change"] == "added"
    assert committed["lane"] == "agent/alice"
    repo = pygit2.Repository(str(world.repo))
    lane = repo.references["refs/heads/agent/alice"].peel(pygit2.Commit)
    assert lane.message.startswith("add new.py")
    assert repo.references["refs/heads/main"].target == pygit2.Oid(hex=world.main_id)


def test_writes_need_a_listed_catalog_in_the_stateless_era_too(world: World) -> None:
    """Threat: a write made without having been shown the catalog it records."""
    token = world.mint()

    async def body(edge: Edge) -> Any:
        async with http_client(edge.url, token, mode=MODERN) as (client, _):
            before = payload(await client.call_tool(
                "write_file", {"path": "src/x.py", "content": "x\n"}))
            await client.list_tools()
            after = payload(await client.call_tool(
                "write_file", {"path": "src/x.py", "content": "x\n"}))
        return before, after

    with running_edge(world) as edge:
        before, after = _run(lambda: body(edge))
    assert before["error"] == "catalog_changed"
    assert after["change"] == "added"


def test_no_token_is_401_with_rfc9728_metadata(world: World) -> None:
    """Threat: anonymous use; the challenge tells a client where the metadata lives."""
    with running_edge(world) as edge:
        with httpx2.Client(timeout=30) as http:
            bare = http.post(edge.url, json=INIT, headers=JSON_HEADERS)
            garbage = http.post(edge.url, json=INIT,
                                headers=JSON_HEADERS | {"Authorization": "Bearer chit_AAAA"})
            basic = http.post(edge.url, json=INIT,
                              headers=JSON_HEADERS | {"Authorization": "Basic dXNlcjpwYXNz"})
            modern = http.post(edge.url, json=INIT,
                               headers=JSON_HEADERS | {"MCP-Protocol-Version": MODERN})
            get = http.get(edge.url, headers={"Accept": "text/event-stream"})
            meta_url = edge.origin + "/.well-known/oauth-protected-resource/mcp"
            meta = http.get(meta_url)
            root_meta = http.get(edge.origin + "/.well-known/oauth-protected-resource")
    expected = f'Bearer resource_metadata="{meta_url}"'
    for response in (bare, basic, modern, get):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == expected
        assert response.json()["error"]["data"]["error"] == "token_missing"
    assert garbage.status_code == 401
    assert garbage.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", error_description="token_malformed", '
        f'resource_metadata="{meta_url}"')
    assert garbage.json()["error"]["data"]["error"] == "token_malformed"
    assert meta.status_code == 200 and root_meta.json() == meta.json()
    doc = meta.json()
    assert doc["resource"] == edge.url
    assert doc["bearer_methods_supported"] == ["header"]
    assert "authorization_servers" not in doc  # none configured (--authorization-server)


@pytest.mark.parametrize("era", ERAS)
def test_a_refused_token_is_told_why_in_the_challenge(world: World, era: str) -> None:
    """RFC 6750 §3: a client shows "token expired" instead of starting an OAuth flow."""
    import time

    expired = world.mint(ttl=60, now=int(time.time()) - 3600)
    revoked = world.mint(agent="rex")
    admin.revoke(world.home, _token_id(revoked))
    text = world.mint(agent="kim")
    forged = text[:-4] + ("AAAA" if not text.endswith("AAAA") else "BBBB")
    headers = dict(JSON_HEADERS)
    if era == MODERN:
        headers["MCP-Protocol-Version"] = MODERN
    answers = {}
    with running_edge(world) as edge, httpx2.Client(timeout=30) as http:
        meta_url = edge.origin + "/.well-known/oauth-protected-resource/mcp"
        for name, token in (("token_expired", expired), ("token_revoked", revoked),
                            ("forged", forged)):
            answers[name] = http.post(
                edge.url, json=INIT, headers=headers | {"Authorization": f"Bearer {token}"})
    for code in ("token_expired", "token_revoked"):
        answer = answers[code]
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == (
            f'Bearer error="invalid_token", error_description="{code}", '
            f'resource_metadata="{meta_url}"')
        assert answer.json()["error"]["data"]["error"] == code
    forged_answer = answers["forged"]
    assert forged_answer.status_code == 401
    code = forged_answer.json()["error"]["data"]["error"]
    assert code in ("token_invalid_signature", "token_malformed")
    assert f'error_description="{code}"' in forged_answer.headers["www-authenticate"]
    assert forged not in forged_answer.text and forged not in str(forged_answer.headers)


def test_a_token_the_engine_refuses_opens_no_session(world: World) -> None:
    token = world.mint()
    admin.revoke(world.home, _token_id(token))

    async def body(edge: Edge) -> Any:
        with pytest.raises(BaseException) as legacy:
            async with http_client(edge.url, token, mode="legacy"):
                pass
        async with http_client(edge.url, token, mode=MODERN) as (client, _):
            with pytest.raises(MCPError) as modern:
                await client.list_tools()
            with pytest.raises(MCPError) as called:
                await client.call_tool("effective_scope", {})
        return _mcp_error(legacy.value).error, modern.value.error, called.value.error

    with running_edge(world) as edge:
        legacy, modern, called = _run(lambda: body(edge))
    assert legacy.data["error"] == "token_revoked"
    # A stateless request of an identity the engine refuses is a 401 before any
    # state is kept for it (the JSON-RPC error in its body names the refusal).
    for error in (modern, called):
        assert error.code == -32001 and error.data["error"] == "token_revoked"


def test_an_invalid_policy_file_is_503_not_a_login_challenge(world: World) -> None:
    """A broken policy is the operator's to fix: a 401 would send an OAuth client to log in."""
    token = world.mint()
    policy_file = world.home / "policy.toml"
    good = policy_file.read_text(encoding="utf-8")
    headers = JSON_HEADERS | {"Authorization": f"Bearer {token}"}
    with running_edge(world) as edge, httpx2.Client(timeout=30) as http:
        assert http.post(edge.url, json=INIT, headers=headers).status_code == 200
        broken = policy_file.with_suffix(".new")
        broken.write_text("[[rules]]\neffect = 'permit'\n", encoding="utf-8")
        os.replace(broken, policy_file)
        refused = http.post(edge.url, json=INIT, headers=headers)
        # Threat: probing the engine's state with a token it would refuse anyway.
        forged = http.post(edge.url, json=INIT, headers=JSON_HEADERS | {
            "Authorization": f"Bearer {_forge_tag(token)}"})
        policy_file.write_text(good, encoding="utf-8")
        again = http.post(edge.url, json=INIT, headers=headers)
    assert refused.status_code == 503
    assert "www-authenticate" not in refused.headers
    data = refused.json()["error"]["data"]
    assert data["error"] == "policy_denied" and data["rule"] == "policy"
    assert token not in refused.text
    assert again.status_code == 200
    assert forged.status_code == 401
    assert forged.json()["error"]["data"]["error"] == "token_invalid_signature"
    assert "policy" not in forged.text


def test_foreign_host_is_421_and_foreign_origin_403(world: World) -> None:
    """Threat: DNS rebinding, a web page driving the local edge through the browser."""
    token = world.mint()
    auth = {"Authorization": f"Bearer {token}"}
    with running_edge(world) as edge:
        port = edge.authority.rpartition(":")[2]
        with httpx2.Client(timeout=30) as http:
            def post(**headers: str) -> httpx2.Response:
                return http.post(edge.url, json=INIT, headers=JSON_HEADERS | auth | headers)

            foreign_host = post(Host=f"attacker.example:{port}")
            foreign_host_meta = http.get(edge.origin + "/.well-known/oauth-protected-resource",
                                         headers={"Host": "attacker.example"})
            foreign_host_no_token = http.post(edge.url, json=INIT, headers=JSON_HEADERS
                                              | {"Host": f"attacker.example:{port}"})
            foreign_origin = post(Origin=f"http://attacker.example:{port}")
            null_origin = post(Origin="null")
            own_origin = post(Origin=edge.origin)
            localhost = post(Host=f"localhost:{port}", Origin=f"http://localhost:{port}")
            doubled_origin = http.post(edge.url, json=INIT, headers=[
                *JSON_HEADERS.items(), *auth.items(),
                ("Origin", edge.origin), ("Origin", "http://attacker.example")])
    assert doubled_origin.status_code == 403  # never judged by its first copy alone
    assert foreign_host.status_code == 421
    assert foreign_host_meta.status_code == 421
    assert foreign_host_no_token.status_code == 421  # before authentication
    assert foreign_origin.status_code == 403
    assert null_origin.status_code == 403
    assert own_origin.status_code == 200 and own_origin.headers["mcp-session-id"]
    assert localhost.status_code == 200


def _forge_tag(token: str) -> str:
    """The same token with one bit of its MAC tag flipped: it parses, it does not verify."""
    body = token.removeprefix("chit_")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    tag = bytes(cbor.decode(raw)["tag"])
    forged = raw.replace(tag, bytes([tag[0] ^ 1]) + tag[1:])
    text = "chit_" + base64.urlsafe_b64encode(forged).rstrip(b"=").decode()
    assert tokens.parse(text).key_id == tokens.parse(token).key_id and text != token
    return text


def test_stateless_requests_of_unverified_identities_keep_nothing(world: World) -> None:
    """Threat: tokens forged with made-up keys, each a new identity, pushing the edge's
    per-identity state (and so real agents' staged work) out of its bounded table."""
    import os
    import time

    real = world.mint(agent="alice")
    key_id = tokens.parse(real).key_id
    stateless = JSON_HEADERS | {"MCP-Protocol-Version": MODERN, "Mcp-Method": "ping"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}}}}

    async def genuine(edge: Edge) -> Any:
        async with http_client(edge.url, real, mode=MODERN) as (client, _):
            return await client.list_tools()

    with running_edge(world) as edge, httpx2.Client(timeout=30) as http:
        answers = []
        for n in range(3):
            forged = tokens.mint(os.urandom(32), key_id, agent=f"ghost{n}", operations=["read"],
                                 paths=["**"], expires_at=int(time.time()) + 600)
            answers.append(http.post(edge.url, json=ping, headers=stateless | {
                "Authorization": f"Bearer {forged}"}))
        listed = _run(lambda: genuine(edge))
    for answer in answers:
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["data"]["error"] == "token_invalid_signature"
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    assert "write_file" in {tool.name for tool in listed.tools}


def test_two_authorization_headers_are_an_invalid_request(world: World) -> None:
    """Threat: two tokens in one request, read differently by a proxy and by the edge."""
    alice, bob = world.mint(agent="alice"), world.mint(agent="bob")
    with running_edge(world) as edge, httpx2.Client(timeout=30) as http:
        both = http.post(edge.url, json=INIT, headers=[
            *JSON_HEADERS.items(), ("Authorization", f"Bearer {alice}"),
            ("Authorization", f"Bearer {bob}")])
        one = http.post(edge.url, json=INIT,
                        headers=JSON_HEADERS | {"Authorization": f"Bearer {alice}"})
    assert both.status_code == 400 and "mcp-session-id" not in both.headers
    assert both.headers["www-authenticate"].startswith('Bearer error="invalid_request"')
    assert both.json()["error"]["data"]["error"] == "invalid_argument"
    assert one.status_code == 200  # and the edge serves on


def test_one_token_cannot_use_up_every_session(world: World) -> None:
    """Threat: one token holder opening sessions until no other agent can open one."""
    from gateway.http_edge import MAX_SESSIONS_PER_IDENTITY

    greedy, other = world.mint(agent="greedy"), world.mint(agent="other")
    with running_edge(world) as edge, httpx2.Client(timeout=30) as http:
        def open_session(token: str) -> httpx2.Response:
            return http.post(edge.url, json=INIT,
                             headers=JSON_HEADERS | {"Authorization": f"Bearer {token}"})

        opened = [open_session(greedy) for _ in range(MAX_SESSIONS_PER_IDENTITY)]
        refused = open_session(greedy)
        theirs = open_session(other)
        closed = http.delete(edge.url, headers={
            "Authorization": f"Bearer {greedy}", "MCP-Protocol-Version": "2025-11-25",
            "Mcp-Session-Id": opened[0].headers["mcp-session-id"]})
        again = open_session(greedy)
    assert all(r.status_code == 200 and r.headers.get("mcp-session-id") for r in opened)
    assert refused.status_code == 429 and "mcp-session-id" not in refused.headers
    assert refused.json()["error"]["data"]["error"] == "limit_exceeded"
    # RFC 6585 §4: when to come back; the soonest of its idle sessions expires in 30 min.
    assert 1700 <= int(refused.headers["retry-after"]) <= 1800
    assert theirs.status_code == 200
    assert closed.status_code < 300 and again.status_code == 200


def test_the_session_limit_holds_under_concurrent_openers(world: World) -> None:
    """Threat: one token racing many initialize requests past its session limit.

    The requests arrive together, so each is counted while the others are
    still being opened; the limit must hold all the same.
    """
    from concurrent.futures import ThreadPoolExecutor

    from gateway.http_edge import MAX_SESSIONS_PER_IDENTITY

    greedy = world.mint(agent="greedy")
    openers = MAX_SESSIONS_PER_IDENTITY + 36
    with running_edge(world) as edge:
        start_together = threading.Barrier(openers)

        def open_session(_: int) -> httpx2.Response:
            with httpx2.Client(timeout=60) as http:  # a connection of its own each
                start_together.wait()
                return http.post(edge.url, json=INIT, headers=JSON_HEADERS | {
                    "Authorization": f"Bearer {greedy}"})

        with ThreadPoolExecutor(openers) as pool:
            answers = list(pool.map(open_session, range(openers)))
        with httpx2.Client(timeout=30) as http:
            after = http.post(edge.url, json=INIT, headers=JSON_HEADERS | {
                "Authorization": f"Bearer {greedy}"})
    statuses = sorted(answer.status_code for answer in answers)
    opened = [a for a in answers if a.status_code == 200 and a.headers.get("mcp-session-id")]
    assert statuses.count(200) == len(opened) == MAX_SESSIONS_PER_IDENTITY, statuses
    assert statuses.count(429) == openers - MAX_SESSIONS_PER_IDENTITY, statuses
    assert len({a.headers["mcp-session-id"] for a in opened}) == MAX_SESSIONS_PER_IDENTITY
    assert after.status_code == 429
    assert after.json()["error"]["data"]["error"] == "limit_exceeded"


def test_a_session_id_alone_grants_nothing(world: World) -> None:
    """Threat: session hijack with a stolen Mcp-Session-Id."""
    alice = world.mint(agent="alice")
    narrower = admin.attenuate_token(alice, operations=["read"])["token"]
    bob = world.mint(agent="bob")
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    with running_edge(world) as edge, httpx2.Client(timeout=30) as http:
        opened = http.post(edge.url, json=INIT,
                           headers=JSON_HEADERS | {"Authorization": f"Bearer {alice}"})
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"],
                   "MCP-Protocol-Version": "2025-11-25"}

        def post(token: str | None, doc: dict[str, Any]) -> httpx2.Response:
            auth = {"Authorization": f"Bearer {token}"} if token else {}
            return http.post(edge.url, json=doc, headers=JSON_HEADERS | session | auth)

        post(alice, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        bare = post(None, listing)
        other = post(bob, listing)
        mine = post(alice, listing)
        attenuated = post(narrower, listing)  # the same identity, narrowed by its holder
        # The same identity with a forged tag: parses alike, but the engine refuses it,
        # so it may neither act on the session nor close it.
        forged = _forge_tag(alice)
        forged_list = post(forged, listing)
        forged_close = http.delete(edge.url,
                                   headers=session | {"Authorization": f"Bearer {forged}"})
        still = post(alice, listing)
        unknown = http.post(edge.url, json=listing, headers=JSON_HEADERS | session | {
            "Authorization": f"Bearer {alice}", "Mcp-Session-Id": "f" * 32})
    assert bare.status_code == 401
    assert other.status_code == 403
    error = other.json()["error"]
    assert error["data"]["error"] == "session_token_mismatch"
    assert mine.status_code == 200 and "write_file" in mine.text
    assert attenuated.status_code == 200 and "write_file" not in attenuated.text
    assert forged_list.status_code == 401 and forged_close.status_code == 401
    assert still.status_code == 200 and "write_file" in still.text
    assert unknown.status_code == 404


def test_session_token_mismatch_reaches_the_official_client(world: World) -> None:
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")

    async def body(edge: Edge) -> Any:
        async with http_client(edge.url, alice, mode="legacy") as (client, http):
            await client.list_tools()
            http.headers["Authorization"] = f"Bearer {bob}"  # same session, another token
            with pytest.raises(MCPError) as mismatch:
                await client.call_tool("effective_scope", {})
            http.headers["Authorization"] = f"Bearer {alice}"
            scope = payload(await client.call_tool("effective_scope", {}))
        return mismatch.value.error, scope

    with running_edge(world) as edge:
        error, scope = _run(lambda: body(edge))
    assert error.data["error"] == "session_token_mismatch"
    assert scope["agent"] == "alice"


def test_list_changed_on_revocation_reaches_only_that_session(world: World) -> None:
    """Legacy era: the notification rides the revoked token's GET stream, no other."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    heard_a, heard_b = Heard(), Heard()

    async def body(edge: Edge) -> Any:
        async with (
            http_client(edge.url, alice, message_handler=heard_a) as (a, _),
            http_client(edge.url, bob, message_handler=heard_b) as (b, _),
        ):
            assert a.server_capabilities.tools and a.server_capabilities.tools.list_changed
            await a.list_tools()
            await b.list_tools()
            await anyio.sleep(1.0)  # a few checks pass: nothing changed, nothing is sent
            quiet = (heard_a.count, heard_b.count)
            admin.revoke(world.home, _token_id(alice))
            with anyio.fail_after(15):
                await heard_a.event.wait()
            await anyio.sleep(1.5)
            refused = payload(await a.call_tool("effective_scope", {}))
            with pytest.raises(MCPError) as relist:
                await a.list_tools()
            still = payload(await b.call_tool("effective_scope", {}))
            return quiet, heard_a.count, heard_b.count, refused, relist.value.error, still

    with running_edge(world) as edge:
        quiet, count_a, count_b, refused, relist, still = _run(lambda: body(edge))
    assert quiet == (0, 0)
    assert count_a == 1  # once per change, not once per check
    assert count_b == 0
    assert refused["error"] == "token_revoked"
    assert relist.code == -32001 and relist.data["error"] == "token_revoked"
    assert still["agent"] == "bob"


def test_list_changed_on_revocation_reaches_only_that_listen_stream(world: World) -> None:
    """2026-07-28 era: subscriptions/listen streams hear only their own token's changes."""
    parent = world.mint(agent="alice", delegable=True, ops="read,write,commit,sub-token:issue")
    bob = world.mint(agent="bob")
    events: dict[str, list[Any]] = {"alice": [], "bob": []}

    async def listen(client: Client, name: str, acked: anyio.Event, done: anyio.Event) -> None:
        async with client.listen(tools_list_changed=True) as sub:
            acked.set()
            with anyio.move_on_after(30):
                async for event in sub:
                    events[name].append(event)
                    if done.is_set():
                        break
                    if name == "alice":
                        done.set()
                        break

    async def body(edge: Edge) -> Any:
        async with (
            http_client(edge.url, parent, mode=MODERN) as (a, _),
            http_client(edge.url, bob, mode=MODERN) as (b, _),
        ):
            await a.list_tools()
            await b.list_tools()
            done = anyio.Event()
            acked = [anyio.Event(), anyio.Event()]
            async with anyio.create_task_group() as tg:
                tg.start_soon(listen, a, "alice", acked[0], done)
                tg.start_soon(listen, b, "bob", acked[1], done)
                with anyio.fail_after(15):
                    for event in acked:
                        await event.wait()
                await anyio.sleep(1.0)
                quiet = (len(events["alice"]), len(events["bob"]))
                admin.revoke(world.home, _token_id(parent))
                with anyio.fail_after(15):
                    await done.wait()
                await anyio.sleep(1.5)
                tg.cancel_scope.cancel()
            refused = payload(await a.call_tool("effective_scope", {}))
            return quiet, refused

    with running_edge(world) as edge:
        quiet, refused = _run(lambda: body(edge))
    assert quiet == (0, 0)
    assert [type(e) for e in events["alice"]] == [ToolsListChanged]
    assert events["bob"] == []
    assert refused["error"] == "token_revoked"


@pytest.mark.parametrize("mode", ERAS)
def test_freeze_notifies_every_connection(world: World, mode: str) -> None:
    """A freeze changes every token's offer: each connection hears it and relists."""
    token = world.mint()
    heard = Heard()

    async def body(edge: Edge) -> Any:
        async with http_client(edge.url, token, mode=mode, message_handler=heard) as (client, _):
            tools = (await client.list_tools()).tools
            before = {t.name for t in tools}
            read_only = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
            if mode == "legacy":
                admin.set_freeze(world.home, True, reason="test")
                with anyio.fail_after(15):
                    await heard.event.wait()
            else:
                async with client.listen(tools_list_changed=True) as sub:
                    admin.set_freeze(world.home, True, reason="test")
                    with anyio.fail_after(15):
                        async for event in sub:
                            assert isinstance(event, ToolsListChanged)
                            break
            after = {t.name for t in (await client.list_tools()).tools}
        return before, read_only, after

    with running_edge(world) as edge:
        before, read_only, after = _run(lambda: body(edge))
    assert "write_file" in before
    assert after == read_only and "read_file" in after


def test_non_loopback_bind_is_refused_without_the_unsafe_flag(world: World) -> None:
    done = subprocess.run(
        [*world.cli(), "mcp", "--repo", str(world.repo), "--http", "0.0.0.0:0"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "TLS" in done.stderr and "--unsafe-non-loopback" in done.stderr


def test_each_session_stages_its_own_change(world: World) -> None:
    """Two sessions of one token: a write staged in one is not seen by the other's commit."""
    token = world.mint()

    async def body(edge: Edge) -> Any:
        async with (
            http_client(edge.url, token) as (one, _),
            http_client(edge.url, token) as (two, _),
        ):
            await one.list_tools()
            await two.list_tools()
            await one.call_tool("write_file", {"path": "src/one.py", "content": "1\n"})
            empty = payload(await two.call_tool("commit", {"message": "nothing"}))
            status = payload(await one.call_tool("status", {}))
        return empty, status

    with running_edge(world) as edge:
        empty, status = _run(lambda: body(edge))
    assert empty["error"] == "invalid_argument"
    assert json.dumps(status).count("src/one.py") >= 1


def test_http_edge_in_front_of_a_separate_engine(world: World, tmp_path: Path) -> None:
    """``chit mcp --engine URL --http``: an edge with an empty home; the engine still decides."""
    alice = world.mint(agent="alice")
    bob = world.mint(agent="bob")
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    heard_a, heard_b = Heard(), Heard()

    async def body(edge: Edge) -> Any:
        async with (
            http_client(edge.url, alice, message_handler=heard_a) as (a, _),
            http_client(edge.url, bob, message_handler=heard_b) as (b, _),
        ):
            await a.list_tools()
            await b.list_tools()
            await a.call_tool("write_file", {"path": "src/remote.py", "content": "R = 1\n"})
            committed = payload(await a.call_tool("commit", {"message": "via the engine"}))
            admin.revoke(world.home, _token_id(alice))
            with anyio.fail_after(15):
                await heard_a.event.wait()
            await anyio.sleep(1.0)
            refused = payload(await a.call_tool("effective_scope", {}))
        async with http_client(edge.url, bob, mode=MODERN) as (b, _):
            modern = {t.name for t in (await b.list_tools()).tools}
        return committed, refused, heard_b.count, modern

    with engine_server(world.home, world.repo) as server:
        edge = start([sys.executable, "-m", "gateway.cli", "--home", str(edge_home), "mcp",
                      "--engine", server.url, "--http", "127.0.0.1:0", "--watch-interval", "0.2"])
        try:
            committed, refused, bob_heard, modern = _run(lambda: body(edge))
        finally:
            stop(edge)
    assert committed["lane"] == "agent/alice"
    assert refused["error"] == "token_revoked"
    assert bob_heard == 0
    assert "write_file" in modern
    assert list(edge_home.iterdir()) == []
    assert not TOKEN_TEXT.search("".join(edge.stderr))
