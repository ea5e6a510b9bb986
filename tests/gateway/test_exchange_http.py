"""``chit engine serve`` as an authorization server, and ``chit mcp --http`` pointing at it.

Real subprocesses (a unix socket, loopback TCP), the real HTTP client, the official
MCP client, keys generated here and JWTs signed with pyjwt (tests/jwt_issuer.py):
RFC 8414 metadata on the engine, RFC 9728 ``authorization_servers`` on the edge,
and an agent that follows them from the edge to a token it can use.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.auth import ProtectedResourceMetadata

from engine import admin
from engine.auth import signkeys
from gateway import _oauth
from tests import jwt_issuer as idp
from tests.conftest import World
from tests.gateway.http_client import http_client, start
from tests.gateway.http_client import stop as stop_edge
from tests.gateway.mcp_client import TOKEN_TEXT, engine_server, payload, stop
from tests.gateway.test_engine_server import _client as unix_client

READY = re.compile(r"chit engine: serving chit-engine/1 on (\S+)")
METADATA = "/.well-known/oauth-authorization-server"
FORM = {
    "grant_type": _oauth.GRANT_TYPE,
    "subject_token_type": _oauth.JWT_TOKEN_TYPE,
}


@pytest.fixture
def trusted(world: World) -> World:
    """A world whose home trusts the test identity providers."""
    idp.trust(world.home)
    return world


@contextlib.contextmanager
def tcp_engine(world: World, *extra: str) -> Iterator[tuple[str, Path]]:
    """``chit engine serve --listen 127.0.0.1:0``; yields its URL and its output file."""
    scratch = Path(tempfile.mkdtemp(prefix="chit-as-"))
    log = scratch / "engine.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*world.cli(), "-v", "engine", "serve", "--repo", str(world.repo),
             "--listen", "127.0.0.1:0", *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while (match := READY.search(log.read_text(errors="replace"))) is None:
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "chit engine serve did not start"
            time.sleep(0.05)
        yield match.group(1), log
    finally:
        stop(process)  # type: ignore[arg-type]
        shutil.rmtree(scratch, ignore_errors=True)


def _exchange_entries(home: Path) -> list[dict[str, Any]]:
    return [e for e in admin.call_log_entries(home) if e["tool"] == "token_exchange"]


def _log_verifies(home: Path) -> None:
    report = admin.verify_call_log(home, signkeys.load_public_keys(admin.export_public(home)))
    assert report["ok"], report["findings"]


# --- RFC 8414 on chit engine serve -----------------------------------------------------


def test_tcp_engine_publishes_its_metadata_and_its_token_endpoint_works(
    trusted: World,
) -> None:
    """A client that knows only the engine's URL finds /token (RFC 8414 section 3)."""
    jwt_text = idp.ci_jwt()
    with tcp_engine(trusted) as (url, log), httpx2.Client(trust_env=False, timeout=30) as http:
        meta = http.get(url + METADATA)
        doc = meta.json()
        minted = http.post(doc["token_endpoint"], data={**FORM, "subject_token": jwt_text})
        replayed = http.post(doc["token_endpoint"], data={**FORM, "subject_token": jwt_text})
        port = url.rsplit(":", 1)[1]
        rebound = http.get(url + METADATA, headers={"host": f"evil.example:{port}"})
        browser = http.get(url + METADATA, headers={"origin": "https://evil.example"})
        output = log.read_text(errors="replace")
    assert meta.status_code == 200
    assert meta.headers["content-type"] == "application/json"
    assert meta.headers["cache-control"] == "no-store"
    assert doc == {
        "issuer": url,  # section 3.3: the issuer is the URL the document was fetched from
        "token_endpoint": url + "/token",
        "grant_types_supported": ["urn:ietf:params:oauth:grant-type:token-exchange"],
        "token_endpoint_auth_methods_supported": ["none"],
    }
    assert minted.status_code == 200, minted.text
    assert minted.json()["issued_token_type"] == _oauth.ACCESS_TOKEN_TYPE
    assert replayed.status_code == 400 and replayed.json()["reason"] == "replayed"
    assert (rebound.status_code, browser.status_code) == (403, 403)
    entries = _exchange_entries(trusted.home)
    assert [(e["decision"], e["arguments"]["via"]) for e in entries] == [
        ("allowed", "token_endpoint"), ("refused", "token_endpoint"),
    ]
    assert jwt_text not in output and minted.json()["access_token"] not in output
    assert not TOKEN_TEXT.search(output)
    _log_verifies(trusted.home)


def test_on_a_unix_socket_the_metadata_needs_a_public_url(trusted: World) -> None:
    with engine_server(trusted.home, trusted.repo) as server, unix_client(server.url) as http:
        missing = http.get(METADATA)
    assert missing.status_code == 404
    assert missing.json()["error"]["error"] == "not_found"
    assert "--public-url" in missing.json()["error"]["message"]

    with (engine_server(trusted.home, trusted.repo, "--public-url", "https://auth.example.com/")
          as server, unix_client(server.url) as http):
        doc = http.get(METADATA).json()
    assert doc["issuer"] == "https://auth.example.com"
    assert doc["token_endpoint"] == "https://auth.example.com/token"


def test_the_cli_and_the_token_endpoint_share_one_replay_cache(
    trusted: World, tmp_path: Path
) -> None:
    """Threat: exchanging one JWT once on the operator's side and again over HTTP."""
    jwt_text = idp.ci_jwt()
    jwt_file = tmp_path / "ci.jwt"
    jwt_file.write_text(jwt_text)
    with engine_server(trusted.home, trusted.repo) as server:
        done = subprocess.run(
            [*trusted.cli(), "exchange", "--jwt", str(jwt_file), "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, done.stderr
        with unix_client(server.url) as http:
            again = http.post("/token", data={**FORM, "subject_token": jwt_text})
    assert again.status_code == 400
    assert (again.json()["chit_error"], again.json()["reason"]) == (
        "exchange_refused", "replayed"
    )
    assert [e["arguments"]["via"] for e in _exchange_entries(trusted.home)] == [
        "cli", "token_endpoint"
    ]


@pytest.mark.parametrize(("url", "why"), [
    ("http://auth.example.com", "loopback"),
    ("https://auth.example.com/chit", "no path"),
    ("https://auth.example.com?x=1", "no query"),
    ("https://user:pw@auth.example.com", "user information"),
    ("ftp://auth.example.com", "https://"),
    ("https://", "https://"),
    ("https://auth.example.com:99999", "not a URL"),
])
def test_a_bad_public_url_is_refused_before_binding(
    world: World, url: str, why: str
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chit-pu-"))
    try:
        sock = scratch / "e.sock"
        done = subprocess.run(
            [*world.cli(), "engine", "serve", "--repo", str(world.repo), "--socket", str(sock),
             "--public-url", url],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 2, done
        assert "--public-url" in done.stderr and why in done.stderr
        assert not sock.exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_behind_a_proxy_the_public_host_is_accepted_on_tcp(trusted: World) -> None:
    with (tcp_engine(trusted, "--public-url", "https://auth.example.com") as (url, _log),
          httpx2.Client(base_url=url, trust_env=False, timeout=30) as http):
        proxied = http.get(METADATA, headers={"host": "auth.example.com"})
        direct = http.get(METADATA)
        other = http.get(METADATA, headers={"host": "auth.example.org"})
    assert proxied.status_code == 200
    assert proxied.json()["issuer"] == "https://auth.example.com"
    assert direct.json() == proxied.json()
    assert other.status_code == 403


@pytest.mark.parametrize("url", [
    "https://auth.example.com", "https://auth.example.com/realms/acme",
    "https://auth.example.com:8443", "http://127.0.0.1:8700", "http://[::1]:8700",
    "http://localhost:8700",
])
def test_issuer_urls_accepted(url: str) -> None:
    assert _oauth.check_issuer_url(url, option="--x") == url


@pytest.mark.parametrize("url", [
    "http://auth.example.com", "http://10.0.0.5", "https://auth.example.com#frag",
    "https://auth.example.com/?", "https://a@auth.example.com", "javascript:alert(1)",
    "https://auth.example.com/ x", "https://auth.exämple.com", "", "https://:443",
    "http://127.0.0.1:0",
])
def test_issuer_urls_refused(url: str) -> None:
    with pytest.raises(ValueError, match="--x"):
        _oauth.check_issuer_url(url, option="--x")


# --- RFC 9728 on chit mcp --http ----------------------------------------------------------


def test_the_edge_names_its_authorization_server(world: World) -> None:
    edge = start([*world.cli(), "mcp", "--repo", str(world.repo), "--http", "127.0.0.1:0",
                  "--authorization-server", "https://auth.example.com"])
    try:
        with httpx2.Client(trust_env=False, timeout=30) as http:
            doc = http.get(edge.origin + "/.well-known/oauth-protected-resource/mcp").json()
            bare = http.post(edge.url, json={})
    finally:
        stop_edge(edge)
    assert doc["authorization_servers"] == ["https://auth.example.com"]
    ProtectedResourceMetadata.model_validate(doc)  # what the official SDK accepts
    assert bare.status_code == 401
    assert "resource_metadata=" in bare.headers["www-authenticate"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--http", "127.0.0.1:0", "--authorization-server", "http://auth.example.com"],
     "loopback"),
    (["--http", "127.0.0.1:0", "--authorization-server", "https://auth.example.com?a=b"],
     "no query"),
    (["--authorization-server", "https://auth.example.com"], "applies to --http"),
])
def test_a_bad_authorization_server_is_refused(
    world: World, extra: list[str], message: str
) -> None:
    done = subprocess.run(
        [*world.cli(), "mcp", "--repo", str(world.repo), *extra],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
        env=dict(os.environ, CHIT_TOKEN=world.mint()),
    )
    assert done.returncode == 2, done
    assert message in done.stderr
    assert "MCP over streamable HTTP" not in done.stderr


def test_an_agent_follows_the_metadata_from_the_edge_to_a_token(
    trusted: World, tmp_path: Path
) -> None:
    """The whole discovery chain: RFC 9728 -> RFC 8414 -> RFC 8693 -> an MCP call."""
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    jwt_text = idp.ci_jwt()

    async def agent(resource: str, metadata_url: str) -> dict[str, Any]:
        async with httpx2.AsyncClient(trust_env=False, timeout=30) as http:
            protected = (await http.get(metadata_url)).json()
            issuer = protected["authorization_servers"][0]
            server = (await http.get(issuer + METADATA)).json()
            assert server["issuer"] == issuer
            assert _oauth.GRANT_TYPE in server["grant_types_supported"]
            answer = await http.post(server["token_endpoint"],
                                     data={**FORM, "subject_token": jwt_text})
            assert answer.status_code == 200, answer.text
            token = answer.json()["access_token"]
        async with http_client(resource, token) as (client, _):
            names = {t.name for t in (await client.list_tools()).tools}
            await client.call_tool("write_file", {"path": "src/ci.py", "content": "CI = 1\n"})
            committed = payload(await client.call_tool("commit", {"message": "from CI"}))
        return {"names": names, "committed": committed}

    with tcp_engine(trusted) as (engine_url, log):
        edge = start([sys.executable, "-m", "gateway.cli", "--home", str(edge_home), "mcp",
                      "--engine", engine_url, "--http", "127.0.0.1:0",
                      "--authorization-server", engine_url])
        try:
            done = anyio.run(agent, edge.url,
                             edge.origin + "/.well-known/oauth-protected-resource/mcp")
        finally:
            stop_edge(edge)
        output = log.read_text(errors="replace")
    assert {"read_file", "write_file", "commit"} <= done["names"]
    assert "issue_sub_token" not in done["names"]
    assert done["committed"]["lane"] == "agent/ci-acme"
    assert trusted.refs()["refs/heads/agent/ci-acme"] == done["committed"]["commit"]
    entries = list(admin.call_log_entries(trusted.home))
    exchange = next(e for e in entries if e["tool"] == "token_exchange")
    after = [e for e in entries if e["seq"] > exchange["seq"]]
    assert exchange["arguments"]["minted"]["agent"] == "ci-acme"
    assert {e["agent"] for e in after} == {"ci-acme"}
    assert {e["chain"][0] for e in after} == {exchange["arguments"]["minted"]["token_id"]}
    assert jwt_text not in output and not TOKEN_TEXT.search(output)
    assert not TOKEN_TEXT.search("".join(edge.stderr))
    assert list(edge_home.iterdir()) == []
    _log_verifies(trusted.home)
