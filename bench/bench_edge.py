"""chit's MCP edges: per-call overhead against a bare MCP server, and 64 clients under load.

1. Edge overhead. ``tools/call read_file`` from one official ``mcp`` client, on
   four servers started in the same run:

   - chit over stdio: ``chit mcp --repo`` as a subprocess (the token in
     ``CHIT_TOKEN``), the embedded engine verifying the token, checking scope and
     policy, logging the call and reading the file from git;
   - chit over HTTP: a real ``chit mcp --http 127.0.0.1:0 --repo`` subprocess
     (uvicorn), the token as a bearer header on every request, 2025-11-25
     session protocol (``mode="legacy"``);
   - the bare peers: this script with ``--bare stdio|http DIR``, a low-level
     ``mcp.server.lowlevel.Server`` from the same SDK with one tool,
     ``read_file``, that reads the file from a temporary folder and answers the
     same result shape as chit (``{path, ref, encoding, content, size}``, as
     structured content and as JSON text), with no authorisation at all; over
     stdio, and over streamable HTTP with the SDK's
     ``StreamableHTTPSessionManager`` under uvicorn on 127.0.0.1.

   All four clients are connected at once and have listed tools; after a
   warm-up of ``WARMUP_CALLS`` calls each, ``ROUNDS`` interleaved rounds each
   make ``CALLS_PER_ROUND`` sequential calls on every side (the order of sides
   rotates per round), so drift hits each alike. Reported: the median (and p90)
   of every timed call per side, and chit / bare per transport. Target: at most
   ``TARGET_RATIO``.

2. Load. One ``chit mcp --http`` server (one engine process) and
   ``CLIENTS`` official clients as asyncio tasks, spread over ``WORKERS``
   client processes (``spawn``) so that the clients are not all behind one GIL,
   and over ``AGENTS`` tokens (agents), so ``CLIENTS / AGENTS`` MCP sessions
   share each lane. Every client loops ``read_file`` (a seed file),
   ``write_file`` (its own file), ``read_file``, ``commit``. A ``conflict``
   (another session of the same agent moved the lane in between) is retried
   and counted apart; any other non-ok result or exception is an error.
   Each client first connects, lists tools and makes ``LOAD_WARMUP_CYCLES``
   full cycles; once every client has, all of them keep the same load going,
   untimed, for ``LOAD_WARM_SECONDS`` (the engine's bounded caches fill: the
   git object cache, the tree name index, SQLite's page caches), then the
   server's RSS is read (``VmRSS`` of ``/proc/<pid>/status``) and the timed
   window of ``LOAD_SECONDS`` starts; RSS is sampled every
   ``RSS_SAMPLE_SECONDS`` and read again as the window ends, with every
   connection still open. Reported: operations per second, p50 and p99 per
   operation, errors (target 0), conflicts retried, RSS at start and end
   (target: growth at most ``TARGET_RSS_GROWTH``).

Start-up checks: each of the four servers must return the expected file
content before anything is timed; every timed ``read_file`` result is checked
(content, not just ``isError``); after the load run the commits counted by the
clients (warm-up included) must be the commits on the agents' lanes (walked
from each head to ``main``), so no side can silently measure a failing path.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_edge.py [--load-seconds S]
[--warm-seconds S] [--skip-overhead] [--skip-load]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FILE_PATH = "src/bench/module.py"
FILE_CONTENT = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(60))  # ~2 KB
SEED_FILES = {"README.md": b"# bench\n", FILE_PATH: FILE_CONTENT.encode()}
OPERATIONS = ["read", "write", "commit"]
WARMUP_CALLS = 50
ROUNDS = 10
CALLS_PER_ROUND = 30  # 300 timed calls per side
TARGET_RATIO = 1.3
CLIENTS = 64
WORKERS = 2
AGENTS = 8
LOAD_SECONDS = 30.0
LOAD_WARMUP_CYCLES = 2
LOAD_WARM_SECONDS = 30.0
RSS_SAMPLE_SECONDS = 5.0
TARGET_RSS_GROWTH = 0.10
READY = "chit: MCP over streamable HTTP at "
BARE_READY = "bare: MCP over streamable HTTP at "


# --- the bare peer ------------------------------------------------------------

def bare_server(transport: str, folder: Path, *, stateless: bool = False) -> None:
    """A low-level MCP server with one tool, ``read_file``, and no authorisation.

    ``stateless``: over HTTP, the SDK's manager in stateless JSON mode (no
    sessions, one JSON answer per POST), as bench_scale.py drives it.
    """
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    # The same tool contract as chit's read_file (its input and output schemas,
    # from chit's catalog), so the client does the same work on both sides: it
    # validates every structured result against the declared output schema.
    sys.path.insert(0, str(ROOT))
    from engine.catalog.declarations import tool_by_name

    spec = tool_by_name("read_file")
    if spec is None:
        raise SystemExit("chit's catalog has no read_file")
    declared = spec.encoded()
    tool = types.Tool(
        name="read_file",
        description=declared["description"],
        input_schema=declared["input_schema"],
        output_schema=declared["output_schema"],
    )

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        path = str((params.arguments or {})["path"])
        data = (folder / path).read_bytes()
        result = {"path": path, "ref": "main", "encoding": "utf-8",
                  "content": data.decode("utf-8"), "size": len(data)}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, sort_keys=True))],
            structured_content=result, is_error=False,
        )

    server: Server[Any] = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async def main() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(main)
        return

    import socket

    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(app=server, stateless=stateless,
                                           json_response=stateless)

    class Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> Any:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="on", log_config=None, access_log=False,
                            server_header=False, ws="none")
    print(f"{BARE_READY}http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])


# --- processes ----------------------------------------------------------------

def start_http(argv: list[str], ready: str, env: dict[str, str] | None = None
               ) -> tuple[subprocess.Popen[str], str]:
    """Start an HTTP server subprocess and wait for its URL on stderr."""
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env)
    url: list[str] = []
    lines: list[str] = []
    seen = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if line.startswith(ready) and not url:
                url.append(line[len(ready):].strip())
                seen.set()
        seen.set()

    threading.Thread(target=drain, daemon=True).start()
    if not seen.wait(60) or not url:
        process.kill()
        raise SystemExit("server did not start:\n" + "".join(lines))
    return process, url[0]


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def chit_cli(home: Path) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "--home", str(home)]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def make_world(base: Path, agents: int) -> tuple[Path, Path, list[str]]:
    from engine import admin
    from engine.admin.seed import create_repository

    home, repo = base / "home", base / "repo"
    create_repository(repo, SEED_FILES)
    admin.init_home(home)
    tokens = [str(admin.mint_token(home, agent=f"bench{a}", operations=OPERATIONS,
                                   paths=["src/**"], ttl_seconds=3600)["token"])
              for a in range(agents)]
    return home, repo, tokens


def structured(result: Any) -> dict[str, Any]:
    if result.is_error:
        doc: dict[str, Any] = json.loads(result.content[0].text)
        return {"ok": False, **doc}
    return {"ok": True, **(result.structured_content or json.loads(result.content[0].text))}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- 1. edge overhead -----------------------------------------------------------

def overhead() -> dict[str, Any]:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    with tempfile.TemporaryDirectory(prefix="bench-edge-") as tmp:
        base = Path(tmp)
        home, repo, tokens = make_world(base, 1)
        token = tokens[0]
        bare_dir = base / "bare"
        (bare_dir / FILE_PATH).parent.mkdir(parents=True)
        (bare_dir / FILE_PATH).write_bytes(FILE_CONTENT.encode())
        env = child_env()
        chit_http, chit_url = start_http(
            [*chit_cli(home), "mcp", "--repo", str(repo), "--http", "127.0.0.1:0"], READY, env)
        bare_http, bare_url = start_http(
            [sys.executable, str(Path(__file__).resolve()), "--bare", "http", str(bare_dir)],
            BARE_READY, env)
        try:
            chit_stdio = StdioServerParameters(
                command=sys.executable,
                args=["-m", "gateway.cli", "--home", str(home), "mcp", "--repo", str(repo)],
                env=dict(env, CHIT_TOKEN=token))
            bare_stdio = StdioServerParameters(
                command=sys.executable,
                args=[str(Path(__file__).resolve()), "--bare", "stdio", str(bare_dir)], env=env)

            async def run() -> dict[str, list[float]]:
                async with contextlib.AsyncExitStack() as stack:
                    clients: dict[str, Client] = {}
                    clients["chit_stdio"] = await stack.enter_async_context(Client(chit_stdio))
                    clients["bare_stdio"] = await stack.enter_async_context(Client(bare_stdio))
                    for name, url, headers in (
                        ("chit_http", chit_url, {"Authorization": f"Bearer {token}"}),
                        ("bare_http", bare_url, {}),
                    ):
                        http = await stack.enter_async_context(httpx2.AsyncClient(
                            headers=headers, timeout=httpx2.Timeout(30, read=60)))
                        clients[name] = await stack.enter_async_context(Client(
                            streamable_http_client(url, http_client=http), mode="legacy"))
                    for name, client in clients.items():
                        await client.list_tools()
                        got = structured(await client.call_tool("read_file", {"path": FILE_PATH}))
                        if not got["ok"] or got.get("content") != FILE_CONTENT:
                            raise SystemExit(f"{name}: read_file did not return the file: {got}")
                    times: dict[str, list[float]] = {name: [] for name in clients}
                    order = list(clients)

                    async def timed(name: str, count: int, keep: bool) -> None:
                        client = clients[name]
                        for _ in range(count):
                            t0 = time.perf_counter()
                            result = await client.call_tool("read_file", {"path": FILE_PATH})
                            elapsed = time.perf_counter() - t0
                            got = structured(result)
                            if not got["ok"] or got.get("content") != FILE_CONTENT:
                                raise SystemExit(f"{name}: a timed read_file failed: {got}")
                            if keep:
                                times[name].append(elapsed)

                    for name in order:
                        await timed(name, WARMUP_CALLS, keep=False)
                    for r in range(ROUNDS):
                        for name in order[r % len(order):] + order[:r % len(order)]:
                            await timed(name, CALLS_PER_ROUND, keep=True)
                    return times

            times = anyio.run(run)
            engine_us = engine_alone(home, repo, token)
        finally:
            stop(chit_http)
            stop(bare_http)

    sides = {name: {"median_us": round(statistics.median(v) * 1e6, 1),
                    "p90_us": round(pct(v, 0.90) * 1e6, 1), "calls": len(v)}
             for name, v in times.items()}
    ratios = {t: round(sides[f"chit_{t}"]["median_us"] / sides[f"bare_{t}"]["median_us"], 2)
              for t in ("stdio", "http")}
    return {"sides": sides, "chit_over_bare": ratios, "target": TARGET_RATIO,
            "target_met": {t: r <= TARGET_RATIO for t, r in ratios.items()},
            "engine_alone_us": engine_us}


def engine_alone(home: Path, repo: Path, token: str) -> dict[str, float]:
    """The embedded engine's share, in this process: ``Engine.invoke`` read_file, and
    a durable call-log append of one entry (what a state-changing call waits for; a
    read-only call's entry is queued), each a median of ``ROUNDS * CALLS_PER_ROUND``
    calls in a tight loop (warm caches: a floor, the per-call cost inside a server is
    higher)."""
    from engine.audit import calllog, tlog
    from engine.service import Engine

    engine = Engine(home, repo)
    listed = engine.offer(token)["catalog_hash"]

    def call() -> None:
        answer = engine.invoke(token, "read_file", {"path": FILE_PATH}, session="bench-alone",
                               offered_catalog_hash=listed)
        if not answer["ok"]:
            raise SystemExit(f"engine alone: read_file failed: {answer}")

    record = calllog.CallRecord(
        time=int(time.time()), agent="bench0", chain=(), session="bench-alone",
        tool="read_file", arguments={"path": FILE_PATH}, decision="allowed", code=None,
        policy_hash="sha256:" + "0" * 64, catalog_hash=listed)
    cases = {"invoke": call,
             "call_log_append": lambda: tlog.append(engine._store, [record], engine._log_signer,
                                                    now=int(time.time()))}
    out: dict[str, float] = {}
    for name, fn in cases.items():
        for _ in range(WARMUP_CALLS):
            fn()
        lat = []
        for _ in range(ROUNDS * CALLS_PER_ROUND):
            t0 = time.perf_counter()
            fn()
            lat.append(time.perf_counter() - t0)
        out[f"{name}_median_us"] = round(statistics.median(lat) * 1e6, 1)
    engine.close()
    return out


# --- 2. load ------------------------------------------------------------------

def load_worker(index: int, url: str, tokens: list[str], clients: list[int],
                ready: Any, go: Any, out: Any, start_at: Any) -> None:
    """One client process: ``clients`` asyncio tasks, each an MCP session."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    lat: dict[str, list[float]] = {"read_file": [], "write_file": [], "commit": []}
    errors: Counter[str] = Counter()
    conflicts = 0
    commits = 0  # warm-up included, for the lane check
    ops = 0

    async def client_task(c: int, warm: Any, window: list[float]) -> None:
        nonlocal conflicts, commits, ops
        token = tokens[c % len(tokens)]
        mine = f"src/load/c{c}.txt"
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=httpx2.Timeout(60, read=120)) as http:
            async with Client(streamable_http_client(url, http_client=http),
                              mode="legacy") as client:
                await client.list_tools()

                async def call(name: str, args: dict[str, Any], timed: bool) -> dict[str, Any]:
                    nonlocal ops
                    t0 = time.perf_counter()
                    try:
                        got = structured(await client.call_tool(name, args))
                    except Exception as exc:
                        got = {"ok": False, "error": f"exception:{type(exc).__name__}"}
                    # Only calls that end inside the window count.
                    if timed and time.monotonic() <= window[1]:
                        lat[name].append(time.perf_counter() - t0)
                        ops += 1
                    return got

                async def cycle(n: int, timed: bool) -> None:
                    nonlocal conflicts, commits
                    got = await call("read_file", {"path": FILE_PATH}, timed)
                    if not got["ok"] or got.get("content") != FILE_CONTENT:
                        errors[f"read_file:{got.get('error', 'wrong content')}"] += timed
                    got = await call("write_file", {"path": mine, "content": f"{c} {n}\n"}, timed)
                    if not got["ok"]:
                        errors[f"write_file:{got.get('error')}"] += 1 if timed else 0
                        if not timed:
                            raise SystemExit(f"warm-up write failed: {got}")
                        return
                    got = await call("read_file", {"path": FILE_PATH}, timed)
                    if not got["ok"] or got.get("content") != FILE_CONTENT:
                        errors[f"read_file:{got.get('error', 'wrong content')}"] += timed
                    for _ in range(20):
                        got = await call("commit", {"message": f"c{c} n{n}"}, timed)
                        if got["ok"]:
                            commits += 1
                            return
                        if got.get("error") != "conflict":
                            break
                        conflicts += 1
                    errors[f"commit:{got.get('error')}"] += 1
                    if not timed:
                        raise SystemExit(f"warm-up commit failed: {got}")

                for n in range(LOAD_WARMUP_CYCLES):
                    await cycle(-1 - n, timed=False)
                warm.set()
                # Warm phase: the same load, untimed, until the window opens.
                n = LOAD_WARMUP_CYCLES
                while not warm_all.is_set():
                    await cycle(-1 - n, timed=False)
                    n += 1
                n = 0
                while time.monotonic() < window[1]:
                    await cycle(n, timed=True)
                    n += 1

    warm_all: Any = None

    async def main() -> None:
        nonlocal warm_all
        warm_all = anyio.Event()
        window: list[float] = [0.0, 0.0]
        warms = [anyio.Event() for _ in clients]
        async with anyio.create_task_group() as tg:
            for c, warm in zip(clients, warms, strict=True):
                tg.start_soon(client_task, c, warm, window)
            for warm in warms:
                await warm.wait()
            ready.put(index)
            await anyio.to_thread.run_sync(go.wait)
            window[0] = start_at.value
            window[1] = start_at.value + LOAD_SECONDS_SHARED[0]
            warm_all.set()

    anyio.run(main)
    out.put({"index": index, "lat": lat, "errors": dict(errors), "conflicts": conflicts,
             "commits": commits, "ops": ops})


LOAD_SECONDS_SHARED = [LOAD_SECONDS]


def _worker_entry(index: int, url: str, tokens: list[str], clients: list[int], ready: Any,
                  go: Any, out: Any, start_at: Any, seconds: float) -> None:
    LOAD_SECONDS_SHARED[0] = seconds
    load_worker(index, url, tokens, clients, ready, go, out, start_at)


def lane_commits(repo_path: Path, agents: int) -> int:
    import pygit2

    repo = pygit2.Repository(str(repo_path))
    total = 0
    for a in range(agents):
        ref = f"refs/heads/agent/bench{a}"
        if ref not in repo.references:
            continue
        walker = repo.walk(repo.references[ref].target)
        walker.hide(repo.references["refs/heads/main"].target)
        total += sum(1 for _ in walker)
    return total


def load(seconds: float, warm_seconds: float = LOAD_WARM_SECONDS) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-edge-load-") as tmp:
        home, repo, tokens = make_world(Path(tmp), AGENTS)
        server, url = start_http(
            [*chit_cli(home), "mcp", "--repo", str(repo), "--http", "127.0.0.1:0"],
            READY, child_env())
        try:
            ready, out = ctx.Queue(), ctx.Queue()
            go = ctx.Event()
            start_at = ctx.Value("d", 0.0)
            procs = [ctx.Process(target=_worker_entry, args=(
                w, url, tokens, list(range(w, CLIENTS, WORKERS)), ready, go, out, start_at,
                seconds)) for w in range(WORKERS)]
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=300)
            time.sleep(warm_seconds)  # every client keeps cycling, untimed
            rss_start = rss_kib(server.pid)
            start_at.value = time.monotonic()
            go.set()
            rss_samples = [rss_start]
            while (left := start_at.value + seconds - time.monotonic()) > 0:
                time.sleep(min(RSS_SAMPLE_SECONDS, left))
                rss_samples.append(rss_kib(server.pid))
            rss_end = rss_samples[-1]
            results = [out.get(timeout=300) for _ in procs]
            for p in procs:
                p.join(60)
            on_lanes = lane_commits(repo, AGENTS)
        finally:
            stop(server)

    lat: dict[str, list[float]] = {"read_file": [], "write_file": [], "commit": []}
    errors: Counter[str] = Counter()
    for r in results:
        for k, v in r["lat"].items():
            lat[k].extend(v)
        errors.update(r["errors"])
    ops = sum(r["ops"] for r in results)
    commits = sum(r["commits"] for r in results)
    if commits != on_lanes:
        raise SystemExit(f"clients counted {commits} commits, the lanes hold {on_lanes}")
    everything = [x for v in lat.values() for x in v]
    growth = (rss_end - rss_start) / rss_start
    return {
        "clients": CLIENTS, "client_processes": WORKERS, "agents": AGENTS, "seconds": seconds,
        "ops": ops, "ops_per_s": round(ops / seconds, 1),
        "commits_per_s": round(len(lat["commit"]) / seconds, 1),
        "latency_ms": {k: {"n": len(v), "p50": round(pct(v, 0.5) * 1e3, 1),
                           "p99": round(pct(v, 0.99) * 1e3, 1)}
                       for k, v in {**lat, "all": everything}.items() if v},
        "errors": sum(errors.values()), "error_codes": dict(errors),
        "conflicts_retried": sum(r["conflicts"] for r in results),
        "commits_checked_on_lanes": on_lanes,
        "warm_seconds": warm_seconds,
        "rss_kib": {"start": rss_start, "end": rss_end, "growth": round(growth, 3),
                    "max": max(rss_samples), "samples": rss_samples},
        "target_met": {"errors_zero": not errors, "rss_growth": growth <= TARGET_RSS_GROWTH},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bare", nargs=2, metavar=("TRANSPORT", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--load-seconds", type=float, default=LOAD_SECONDS)
    parser.add_argument("--warm-seconds", type=float, default=LOAD_WARM_SECONDS)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-load", action="store_true")
    args = parser.parse_args()
    if args.bare:
        bare_server(args.bare[0], Path(args.bare[1]))
        return
    sys.path.insert(0, str(ROOT))
    report: dict[str, Any] = {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    if not args.skip_overhead:
        report["overhead"] = overhead()
    if not args.skip_load:
        report["load"] = load(args.load_seconds, args.warm_seconds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
