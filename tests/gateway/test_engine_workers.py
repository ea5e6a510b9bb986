"""``chit engine serve --workers 2``: real worker processes on one socket, one session anywhere.

The kernel decides which worker accepts a connection; a test steers new
connections to one worker by pausing the other (``SIGSTOP``: a stopped process
accepts nothing) and reads ``/proc`` to see who holds what (tests/gateway/procs.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client

from engine import admin
from engine.admin.seed import create_repository
from engine.service import CallAnswer
from gateway.remote_engine import RemoteEngine
from tests.conftest import FILES, World
from tests.gateway import procs
from tests.gateway.mcp_client import EngineServer, engine_server, payload, remote_edge_params


def _workers(server: EngineServer) -> dict[int, int]:
    """``{index: pid}`` of the two workers, once both listen."""
    found: dict[int, int] = {}

    def both() -> bool:
        found.update(procs.worker_indexes(server.process.pid))
        return len(found) == 2 and set(found.values()) <= set(
            procs.children(server.process.pid))

    procs.wait_for(both, "two workers")
    return dict(found)


def _owners(home: Path) -> dict[str, str]:
    """Each placed session (its edge id) and the file name of its worker's socket."""
    with sqlite3.connect(home / "state.db") as db:
        rows = db.execute("SELECT session, owner FROM engine_sessions").fetchall()
    return {key.rpartition("|")[2]: owner.rpartition("/")[2] for key, owner in rows}


def _invoke(url: str, token: str, tool: str, args: dict[str, Any] | None, session: str,
            listed: str | None = None) -> CallAnswer:
    with RemoteEngine(url) as remote:  # a new connection for every call
        return remote.invoke(token, tool, args, session=session, offered_catalog_hash=listed)


def _listed(url: str, token: str) -> str:
    with RemoteEngine(url) as remote:
        offer = remote.offer(token)
    assert offer.ok, offer
    return str(offer["catalog_hash"])


def test_both_workers_serve_offers_and_calls(world: World) -> None:
    token = world.mint()
    with engine_server(world.home, world.repo, "--workers", "2") as server:
        assert "(mode 0600) with 2 workers" in server.output()
        workers = _workers(server)
        for index in workers:
            with procs.paused(workers[1 - index]):  # only worker `index` accepts
                for n in range(3):
                    with RemoteEngine(server.url) as remote:
                        assert remote.offer(token).ok
                    answer = _invoke(server.url, token, "status", {}, f"on-{index}-{n}")
                    assert answer.ok and answer["result"]["session"] == f"on-{index}-{n}"
        # Each session was placed by the worker that received its first call.
        owners = _owners(world.home)
    assert owners == {f"on-{i}-{n}": f"w{i}.sock" for i in (0, 1) for n in range(3)}
    assert _owners(world.home) == {}  # each worker let its own go when it stopped


def test_a_stdio_sessions_calls_reach_both_workers_and_its_change_is_one(
    world: World, tmp_path: Path
) -> None:
    """Threat: a session's staged change split across workers, or lost between them."""
    token = world.mint()
    edge_home = tmp_path / "edge-home"
    edge_home.mkdir()
    out: dict[str, Any] = {}
    with engine_server(world.home, world.repo, "--workers", "2") as server:
        workers = _workers(server)
        first, second = workers[0], workers[1]
        path = server.url.removeprefix("unix:")

        async def write(client: Client, name: str) -> None:
            answer = await client.call_tool("write_file", {"path": f"src/{name}.py",
                                                           "content": f"{name} = 1\n"})
            assert not answer.is_error, payload(answer)

        async def go() -> None:
            os.kill(second, signal.SIGSTOP)  # the edge's first connections go to `first`
            try:
                async with Client(remote_edge_params(server.url, edge_home, token)) as client:
                    await client.list_tools()
                    await write(client, "a")
                    os.kill(second, signal.SIGCONT)
                    out["second_before"] = procs.accepted_unix(path, second)
                    # Calls on new connections now reach `second` only; `first`
                    # holds the session, so they are forwarded to it.
                    os.kill(first, signal.SIGSTOP)
                    try:
                        async with anyio.create_task_group() as tg:
                            for name in ("b", "c", "d"):
                                tg.start_soon(write, client, name)
                            await anyio.to_thread.run_sync(procs.wait_for, lambda: (
                                procs.accepted_unix(path, second) > 0), "a call at `second`")
                            out["second_during"] = procs.accepted_unix(path, second)
                            os.kill(first, signal.SIGCONT)
                    finally:
                        os.kill(first, signal.SIGCONT)
                    out["status"] = payload(await client.call_tool("status", {}))
                    out["commit"] = payload(await client.call_tool("commit", {"message": "all"}))
                    out["owners"] = _owners(world.home)
            finally:
                os.kill(second, signal.SIGCONT)

        anyio.run(go)
    assert out["second_before"] == 0 and out["second_during"] > 0
    assert [e["path"] for e in out["status"]["staged"]] == [f"src/{n}.py" for n in "abcd"]
    assert world.refs()["refs/heads/agent/alice"] == out["commit"]["commit"]
    assert out["commit"]["files"] == 4
    assert list(out["owners"].values()) == ["w0.sock"]  # one session, placed once


def test_a_killed_worker_is_replaced_and_other_sessions_keep_their_work(world: World) -> None:
    token = world.mint()
    with engine_server(world.home, world.repo, "--workers", "2") as server:
        workers = _workers(server)
        listed = _listed(server.url, token)
        for index in (0, 1):
            with procs.paused(workers[1 - index]):
                assert _invoke(server.url, token, "write_file", {
                    "path": f"src/on{index}.py", "content": "x\n"}, f"on-{index}", listed).ok
        os.kill(workers[0], signal.SIGKILL)
        procs.wait_for(lambda: procs.worker_indexes(server.process.pid).get(0) not in (
            None, workers[0]), "a new worker 0")
        answers = [_invoke(server.url, token, "status", {}, "on-1") for _ in range(6)]
        resumed = _invoke(server.url, token, "status", {}, "on-0")
        fresh = _invoke(server.url, token, "status", {}, "new")
        assert server.process.poll() is None
        output = server.output()
    for answer in answers:  # wherever they landed
        assert answer.ok and [e["path"] for e in answer["result"]["staged"]] == ["src/on1.py"]
    # The killed worker's session is read back from its saved reference.
    assert resumed.ok and [e["path"] for e in resumed["result"]["staged"]] == ["src/on0.py"]
    assert fresh.ok
    assert "worker 0" in output and "replacing it" in output


def test_workers_that_cannot_start_fail_the_command_and_leave_nothing(
    world: World, tmp_path: Path
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chit-t-"))  # short: socket paths
    try:
        sock = scratch / "e.sock"
        run = scratch / "tmp"
        run.mkdir()
        done = subprocess.run(
            [*world.cli(), "engine", "serve", "--repo", str(tmp_path), "--socket", str(sock),
             "--workers", "2"],
            capture_output=True, text=True, timeout=120, check=False,
            env=dict(os.environ, TMPDIR=str(run)),
        )
        assert done.returncode == 2, done.stderr
        assert "chit: " in done.stderr and "failed to start" in done.stderr
        assert "serving" not in done.stderr
        assert not sock.exists() and list(run.iterdir()) == []  # no socket, no run folder
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- SIGTERM under load ------------------------------------------------------------------

AGENTS = ("a0", "a1", "a2", "a3")


@pytest.fixture
def big_world(tmp_path: Path) -> Iterator[World]:
    """Enough source files for the semantic index to start its parse pool."""
    files = dict(FILES)
    for n in range(40):
        files[f"src/pkg/m{n}.py"] = f"def f{n}(x):\n    return x + {n}\n".encode()
    home, repo = tmp_path / "home", tmp_path / "repo"
    main_id = create_repository(repo, files)
    admin.init_home(home)
    yield World(home=home, repo=repo, main_id=main_id)


def _hold_lane(repo: Path, agent: str) -> tuple[int, int]:
    """Take ``agent``'s lane lock as another chit process would: ``(fd, inode)``."""
    folder = repo / ".git" / "chit" / "locks"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = hashlib.sha256(f"refs/heads/agent/{agent}".encode()).hexdigest() + ".flock"
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, os.fstat(fd).st_ino


def _waiting_on(inodes: set[int]) -> int:
    """Processes blocked in ``flock`` on one of ``inodes`` (``/proc/locks`` waiters)."""
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "->" in parts and "FLOCK" in parts:
            device = parts[parts.index("->") + 5]
            count += int(device.rsplit(":", 1)[1]) in inodes
    return count


def test_sigterm_under_load_answers_calls_in_flight_and_leaves_nothing(
    big_world: World,
) -> None:
    world = big_world
    tokens = {agent: world.mint(agent=agent) for agent in AGENTS}
    answers: dict[str, CallAnswer] = {}
    with engine_server(world.home, world.repo, "--workers", "2") as server:
        supervisor = server.process.pid
        workers = _workers(server)
        path = server.url.removeprefix("unix:")
        run_folder = Path(procs.private_sockets(supervisor)[0][1]).parent
        for index in (0, 1):  # each worker starts its parse pool
            with procs.paused(workers[1 - index]):
                found = _invoke(server.url, tokens["a0"], "search_symbols", {"query": "f1"},
                                f"sem-{index}")
                assert found.ok and found["result"]["symbols"], found
        tree = procs.descendants(supervisor)
        helpers = [p for p in tree if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(helpers) >= 2, "no parse pool started"
        for agent, token in tokens.items():
            listed = _listed(server.url, token)
            assert _invoke(server.url, token, "write_file", {
                "path": f"src/{agent}.py", "content": f"{agent}\n"}, f"s-{agent}", listed).ok
        held = [_hold_lane(world.repo, agent) for agent in AGENTS]
        try:

            def commit(agent: str) -> None:
                answers[agent] = _invoke(server.url, tokens[agent], "commit",
                                         {"message": f"by {agent}"}, f"s-{agent}",
                                         _listed(server.url, tokens[agent]))

            threads = [threading.Thread(target=commit, args=(a,)) for a in AGENTS]
            for thread in threads:
                thread.start()
            inodes = {inode for _, inode in held}
            procs.wait_for(lambda: _waiting_on(inodes) == len(AGENTS), "commits in flight")
            listening = procs.listening_inodes(path)
            server.process.send_signal(signal.SIGTERM)
            # Every worker stops accepting (and the socket file goes) while the
            # commits still wait for their lanes.
            procs.wait_for(lambda: not os.path.exists(path) and not any(
                listening & procs.socket_inodes(pid) for pid in workers.values()),
                "the workers to stop accepting")
            assert _waiting_on(inodes) == len(AGENTS)
        finally:
            for fd, _ in held:
                os.close(fd)  # the lanes free up: the commits go on
        for thread in threads:
            thread.join(60)
        assert server.process.wait(60) == 0
        output = server.output()
    for agent in AGENTS:
        assert answers[agent].ok, answers[agent]
        assert world.refs()[f"refs/heads/agent/{agent}"] == answers[agent]["result"]["commit"]
    assert not os.path.exists(path)
    assert not run_folder.exists()
    assert procs.alive(tree) == []
    assert procs.naming(str(world.home)) == []
    assert "Traceback" not in output
