"""Two engines on one PostgreSQL store agree on everything (docs/deployment.md).

Two real ``chit engine serve`` processes, as on two hosts: each has its own copy
of the home (the keyring and policy the operator distributes), both serve one
repository and share one PostgreSQL database started by the tests. Edges are
real ``chit mcp --engine`` stdio processes driven by the official client, or
the engine API itself.

Threat: engines on several hosts that each keep their own view of revocations,
the freeze, rate limits, replayed JWTs, the call log or a lane, so that what is
refused on one host is allowed on another, or a commit is lost between them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pygit2
import pytest
from mcp import Client

from engine import admin
from gateway.remote_engine import RemoteEngine
from tests import jwt_issuer as idp
from tests.conftest import World
from tests.gateway.mcp_client import (
    EngineServer,
    Heard,
    engine_server,
    payload,
    remote_edge_params,
)


@dataclass
class Org:
    """Two engines on one store: ``a`` on ``world.home``, ``b`` on a copy of it."""

    world: World
    state: str
    home_b: Path
    a: EngineServer
    b: EngineServer
    edge_home: Path

    def cli(self, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", "--home", str(home), "--state", self.state,
             *args],
            capture_output=True, text=True, timeout=120, check=False,
        )


@pytest.fixture
def org(world: World, postgres_url: str, tmp_path: Path) -> Iterator[Org]:
    home_b = tmp_path / "host-b-home"
    shutil.copytree(world.home, home_b)  # the distributed keyring and policy
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    state = ("--state", postgres_url)
    with (
        engine_server(world.home, world.repo, *state) as a,
        engine_server(home_b, world.repo, *state) as b,
    ):
        yield Org(world, postgres_url, home_b, a, b, edge_home)


def _token_id(token: str) -> str:
    return str(admin.inspect_token(token)["id"])


def test_a_revocation_on_one_engine_refuses_and_notifies_a_session_on_the_other(
    org: Org,
) -> None:
    token = org.world.mint(agent="alice")
    other = org.world.mint(agent="bob")
    heard, heard_other = Heard(), Heard()

    async def body() -> tuple[dict[str, Any], dict[str, Any], int]:
        async with (
            Client(remote_edge_params(org.b.url, org.edge_home, token),
                   mode="legacy", message_handler=heard) as client,
            Client(remote_edge_params(org.a.url, org.edge_home, other),
                   mode="legacy", message_handler=heard_other) as bystander,
        ):
            await client.list_tools()
            await bystander.list_tools()
            before = payload(await client.call_tool("read_file", {"path": "src/app.py"}))
            done = await anyio.to_thread.run_sync(
                lambda: org.cli(org.world.home, "revoke", _token_id(token)))
            assert done.returncode == 0, done.stderr
            with anyio.fail_after(20):
                await heard.event.wait()
            after = payload(await client.call_tool("read_file", {"path": "src/app.py"}))
            assert before["path"] == "src/app.py"
            return before, after, heard_other.count

    _before, after, bystander_heard = anyio.run(body)
    assert after["error"] == "token_revoked"
    assert bystander_heard == 0  # bob's offer did not change


def test_a_freeze_from_the_cli_reaches_both_engines(org: Org) -> None:
    token = org.world.mint(agent="alice")
    done = org.cli(org.home_b, "freeze", "on", "--reason", "incident 7")
    assert done.returncode == 0, done.stderr
    for n, server in enumerate((org.a, org.b)):
        with RemoteEngine(server.url) as engine:
            offer = engine.offer(token)
            assert offer.ok
            assert "write_file" not in {t.name for t in offer.tools}
            refused = engine.invoke(token, "write_file", {"path": "src/x.py", "content": "x"},
                                    session=f"frozen{n}", offered_catalog_hash=offer.catalog_hash)
            assert not refused.ok and refused.code == "engine_frozen"
    assert org.cli(org.world.home, "freeze", "off").returncode == 0
    for server in (org.a, org.b):
        with RemoteEngine(server.url) as engine:
            assert "write_file" in {t.name for t in engine.offer(token).tools}


def test_the_call_log_is_one_tree_after_both_served_sixteen_sessions(org: Org) -> None:
    tokens = [org.world.mint(agent=f"agent{k}") for k in range(4)]

    def session(k: int) -> None:
        server = (org.a, org.b)[k % 2]
        token = tokens[k % 4]
        with RemoteEngine(server.url) as engine:
            listed = engine.offer(token).catalog_hash
            for n in range(5):
                got = engine.invoke(token, "read_file", {"path": "src/app.py"},
                                    session=f"sess{k}", offered_catalog_hash=listed)
                assert got.ok
                wrote = engine.invoke(token, "write_file",
                                      {"path": f"src/s{k}/f{n}.py", "content": f"{n}\n"},
                                      session=f"sess{k}", offered_catalog_hash=listed)
                assert wrote.ok, wrote

    threads = [threading.Thread(target=session, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Stopping each engine writes what it queued and signs a last checkpoint.
    for server in (org.a, org.b):
        server.process.terminate()
        assert server.process.wait(60) == 0
    done = org.cli(org.world.home, "audit", "log", "verify", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["entries"] >= 16 * 10


def _exchange(server: EngineServer, jwt: str) -> tuple[int, dict[str, Any]]:
    """``POST /token`` (RFC 8693) on an engine's unix socket."""
    transport = httpx2.HTTPTransport(uds=server.url.removeprefix("unix:"), trust_env=False)
    with httpx2.Client(transport=transport, trust_env=False, timeout=60.0) as http:
        answer = http.post("http://chit-engine/token", data={
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "subject_token": jwt,
        })
    doc: dict[str, Any] = answer.json()
    return answer.status_code, doc


def test_a_jwt_exchanged_on_one_engine_is_a_replay_on_the_other(org: Org) -> None:
    for home in (org.world.home, org.home_b):  # the operator trusts the IdP on both hosts
        idp.trust(home)
    jwt = idp.ci_jwt()
    first_status, first = _exchange(org.a, jwt)
    again_status, again = _exchange(org.b, jwt)
    assert first_status == 200, first
    assert first["access_token"].startswith("chit_")
    assert again_status == 400
    assert again["chit_error"] == "exchange_refused" and again["reason"] == "replayed"
    fresh_status, _ = _exchange(org.b, idp.ci_jwt())  # another jti is fine there
    assert fresh_status == 200


def test_a_rate_limit_is_hit_at_n_across_both_engines(org: Org) -> None:
    limit = ('\n[[rate_limits]]\nagents = ["alice"]\ntools = ["read_file"]\n'
             "calls = 7\nper_seconds = 3600\n")
    for home in (org.world.home, org.home_b):
        with open(home / "policy.toml", "a", encoding="utf-8") as fh:
            fh.write(limit)
    token = org.world.mint(agent="alice")
    admitted = refused = 0
    for k in range(12):
        server = (org.a, org.b)[k % 2]
        with RemoteEngine(server.url) as engine:
            got = engine.invoke(token, "read_file", {"path": "src/app.py"}, session=f"r{k}")
        if got.ok:
            admitted += 1
        else:
            assert got.code == "limit_exceeded", got
            refused += 1
    assert (admitted, refused) == (7, 5)


def test_two_engines_eight_sessions_twenty_five_commits_lose_nothing(org: Org) -> None:
    agents = ["alice", "bob"]
    tokens = {a: org.world.mint(agent=a) for a in agents}
    landed: dict[str, list[str]] = {a: [] for a in agents}
    lock = threading.Lock()
    errors: list[Any] = []

    def session(k: int) -> None:
        agent = agents[k % 2]
        token = tokens[agent]
        server = (org.a, org.b)[(k // 2) % 2]
        with RemoteEngine(server.url) as engine:
            listed = engine.offer(token).catalog_hash
            for n in range(25):
                path = f"src/{agent}/s{k}-{n}.txt"
                wrote = engine.invoke(token, "write_file", {"path": path, "content": f"{k} {n}\n"},
                                      session=f"c{k}", offered_catalog_hash=listed)
                if not wrote.ok:
                    errors.append(wrote)
                    return
                for _ in range(100):
                    got = engine.invoke(token, "commit", {"message": f"session {k} commit {n}"},
                                        session=f"c{k}", offered_catalog_hash=listed)
                    if got.ok or got.code != "conflict":
                        break
                if not got.ok:
                    errors.append(got)
                    return
                with lock:
                    landed[agent].append(path)

    threads = [threading.Thread(target=session, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    repo = pygit2.Repository(str(org.world.repo))
    for agent in agents:
        head = repo.references[f"refs/heads/agent/{agent}"].peel(pygit2.Commit)
        walker = repo.walk(head.id)
        walker.hide(repo.references["refs/heads/main"].target)
        commits = list(walker)
        assert len(commits) == 8 * 25  # every commit on its own lane, none lost
        for path in landed[agent]:
            assert path in head.tree or _has_path(head.tree, path), path
        assert all(c.message.startswith("session ") for c in commits)
    fsck = subprocess.run(["git", "-C", str(org.world.repo), "fsck", "--strict"],
                          capture_output=True, text=True, check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def _has_path(tree: pygit2.Tree, path: str) -> bool:
    with contextlib.suppress(KeyError):
        tree[path]
        return True
    return False
