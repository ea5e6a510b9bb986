"""chit engine serve under 64 clients: 1 and 2 worker processes, SQLite and PostgreSQL.

The load of bench_edge.py's part 2, sent to the engine itself: ``CLIENTS``
clients (asyncio tasks over ``CLIENT_PROCESSES`` processes, each client one
keep-alive HTTP/1.1 connection to ``chit engine serve --listen 127.0.0.1:0``),
over ``AGENTS`` tokens, each its own engine session, loop ``read_file`` (a seed
file), ``write_file`` (its own file), ``read_file``, ``commit`` through
``POST /v1/invoke`` (chit-engine/1, docs/engine-api.md). A ``conflict`` (a
session of the same agent moved the lane in between) is retried and counted
apart; anything else that is not ok is an error. The clients speak raw HTTP/1.1
so that they take little of the machine's two cores.

Sides, in one run, each after ``WARM_SECONDS`` of the same load untimed, timed
for ``SECONDS``:

- ``chit engine serve --workers 1`` and ``--workers 2`` on SQLite (``<home>/state.db``);
- the same on PostgreSQL (a throwaway server started here, tests/pgserver.py,
  written durably: ``fsync`` on, commits flushed by the WAL writer, as SQLite's
  ``synchronous=NORMAL`` in WAL mode does; on this machine's two cores, beside
  the engine);
- the peer: a bare MCP SDK server (``mcp.server.lowlevel.Server`` with one tool,
  ``read_file``, no authorisation, the SDK's streamable HTTP manager in
  stateless JSON mode under uvicorn), under the same 64 clients, each sending
  ``tools/call read_file`` four times per cycle.

Every side runs once per round, ``ROUNDS`` rounds, the order rotated each
round; ratios are taken within a round and their median reported. Reported per
side: operations per second, p50 and p99 per operation and over all, errors,
conflicts retried, the CPU the server's processes (and the PostgreSQL
server's) used per operation, the clients' CPU per operation and the cores the
whole machine kept busy (the clients share the machine's cores with the
server). Targets (issue 16): zero errors; 2 workers at
least 1.6x the throughput of 1; PostgreSQL at least 0.8x SQLite's throughput;
p99 at most 3x p50 (for each operation: a read and a commit are different
work, and the p50 over all of them is a read's). After each chit side the
commits the clients counted (warm-up included) must be the commits on the
agents' lanes.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_scale.py [--seconds S]
[--warm-seconds S] [--rounds N] [--sides bare,sqlite-1,sqlite-2,pg-1,pg-2]``
"""

from __future__ import annotations

import argparse
import asyncio
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
sys.path.insert(0, str(ROOT))

FILE_PATH = "src/bench/module.py"
FILE_CONTENT = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(60))  # ~2 KB
SEED_FILES = {"README.md": b"# bench\n", FILE_PATH: FILE_CONTENT.encode()}
CLIENTS = 64
CLIENT_PROCESSES = 2
AGENTS = 8
SECONDS = 30.0
ROUNDS = 3
WARM_SECONDS = 15.0
READY = "chit engine: serving chit-engine/1 on "
BARE_READY = "bare: MCP over streamable HTTP at "
PG_PID = [0]  # the PostgreSQL server's postmaster, whose CPU counts with the engine's
TARGETS = {"workers_ratio": 1.6, "postgres_ratio": 0.8, "p99_over_p50": 3.0}


# --- a small HTTP/1.1 client ------------------------------------------------------

class Connection:
    """One keep-alive HTTP/1.1 connection: POST a JSON body, read a JSON answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = json.dumps(body).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n")
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        length = 0
        closing = False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                closing = True
        payload = await self.reader.readexactly(length)
        if closing:
            await self.close()
        status = int(status_line.split()[1]) if status_line else 0
        if status != 200:
            return {"ok": False, "error": {"error": f"http_{status}"}}
        answer: dict[str, Any] = json.loads(payload)
        return answer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


# --- the clients -------------------------------------------------------------------

def client_process(index: int, side: str, host: str, port: int, tokens: list[str],
                   clients: list[int], ready: Any, go: Any, out: Any, window: Any) -> None:
    """``clients`` asyncio tasks, each one engine session on one connection."""
    lat: dict[str, list[float]] = {"read_file": [], "write_file": [], "commit": []}
    errors: Counter[str] = Counter()
    counts = {"conflicts": 0, "commits": 0, "ops": 0}

    async def chit_client(c: int, warmed: asyncio.Event, stop_warm: asyncio.Event) -> None:
        token = tokens[c % len(tokens)]
        session = f"bench-{index}-{c}"
        conn = Connection(host, port)
        offer = await conn.post("/v1/offer", {"token": token})
        listed = offer["catalog_hash"]

        async def call(tool: str, args: dict[str, Any], timed: bool) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                got = await conn.post("/v1/invoke", {
                    "token": token, "tool": tool, "arguments": args, "session": session,
                    "offered_catalog_hash": listed})
            except Exception as exc:
                await conn.close()
                got = {"ok": False, "error": {"error": f"exception:{type(exc).__name__}"}}
            if timed and window[0] <= time.monotonic() <= window[1]:
                lat[tool].append(time.perf_counter() - t0)
                counts["ops"] += 1
            return got

        async def cycle(n: int, timed: bool) -> None:
            for tool, args in (("read_file", {"path": FILE_PATH}),
                               ("write_file", {"path": f"src/load/c{index}-{c}.txt",
                                               "content": f"{c} {n}\n"}),
                               ("read_file", {"path": FILE_PATH})):
                got = await call(tool, args, timed)
                ok = got.get("ok") and (tool != "read_file"
                                        or got["result"].get("content") == FILE_CONTENT)
                if not ok:
                    errors[f"{tool}:{got.get('error', {}).get('error', 'wrong content')}"] += 1
                    if tool == "write_file":
                        return
            for _ in range(50):
                got = await call("commit", {"message": f"c{c} n{n}"}, timed)
                if got.get("ok"):
                    counts["commits"] += 1
                    return
                if got.get("error", {}).get("error") != "conflict":
                    break
                counts["conflicts"] += 1
            errors[f"commit:{got.get('error', {}).get('error')}"] += 1

        await cycle(-1, timed=False)
        warmed.set()
        n = 0
        while not stop_warm.is_set():
            await cycle(-2 - n, timed=False)
            n += 1
        n = 0
        while time.monotonic() < window[1]:
            await cycle(n, timed=True)
            n += 1
        await conn.close()

    async def bare_client(c: int, warmed: asyncio.Event, stop_warm: asyncio.Event) -> None:
        conn = Connection(host, port)
        headers = {"Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "read_file", "arguments": {"path": FILE_PATH}}}

        async def call(timed: bool) -> None:
            t0 = time.perf_counter()
            got = await conn.post("/mcp", body, headers)
            result = got.get("result", {}).get("structuredContent", {})
            if result.get("content") != FILE_CONTENT:
                errors["read_file:bare"] += 1
            if timed and window[0] <= time.monotonic() <= window[1]:
                lat["read_file"].append(time.perf_counter() - t0)
                counts["ops"] += 1

        for _ in range(4):
            await call(False)
        warmed.set()
        while not stop_warm.is_set():
            await call(False)
        while time.monotonic() < window[1]:
            await call(True)
        await conn.close()

    async def main() -> None:
        stop_warm = asyncio.Event()
        warms = [asyncio.Event() for _ in clients]
        run = chit_client if side != "bare" else bare_client
        pairs = zip(clients, warms, strict=True)
        tasks = [asyncio.create_task(run(c, w, stop_warm)) for c, w in pairs]
        for w in warms:
            await w.wait()
        ready.put(index)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        stop_warm.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    out.put({"lat": lat, "errors": dict(errors), **counts})


# --- servers --------------------------------------------------------------------------

def start(argv: list[str], ready: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    url: list[str] = []
    lines: list[str] = []
    seen = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if line.startswith(ready) and not url:
                url.append(line[len(ready):].split()[0])
                seen.set()
        seen.set()

    threading.Thread(target=drain, daemon=True).start()
    if not seen.wait(120) or not url:
        process.kill()
        raise SystemExit("server did not start:\n" + "".join(lines))
    return process, url[0]


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(10)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        todo += children.get(p, [])
    return total


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def env() -> dict[str, str]:
    found = dict(os.environ)
    found["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), found.get("PYTHONPATH")) if p)
    found.pop("CHIT_STATE", None)
    return found


def make_world(base: Path) -> tuple[Path, Path, list[str]]:
    from engine import admin
    from engine.admin.seed import create_repository

    home, repo = base / "home", base / "repo"
    create_repository(repo, SEED_FILES)
    admin.init_home(home)
    tokens = [str(admin.mint_token(home, agent=f"bench{a}",
                                   operations=["read", "write", "commit"],
                                   paths=["src/**"], ttl_seconds=7200)["token"])
              for a in range(AGENTS)]
    return home, repo, tokens


def lane_commits(repo_path: Path) -> int:
    import pygit2

    repo = pygit2.Repository(str(repo_path))
    total = 0
    for a in range(AGENTS):
        ref = f"refs/heads/agent/bench{a}"
        if ref in repo.references:
            walker = repo.walk(repo.references[ref].target)
            walker.hide(repo.references["refs/heads/main"].target)
            total += sum(1 for _ in walker)
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run_side(side: str, seconds: float, warm: float, pg_url: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{side}-") as tmp:
        home, repo, tokens = make_world(Path(tmp))
        if side == "bare":
            (Path(tmp) / "files" / "src" / "bench").mkdir(parents=True)
            (Path(tmp) / "files" / FILE_PATH).write_text(FILE_CONTENT)
            server, url = start([sys.executable, __file__, "--bare", str(Path(tmp) / "files")],
                                BARE_READY, env())
        else:
            store, workers = side.split("-")
            argv = [sys.executable, "-m", "gateway.cli", "--home", str(home), "engine", "serve",
                    "--repo", str(repo), "--listen", "127.0.0.1:0", "--workers", workers]
            if store == "pg":
                if pg_url is None:
                    raise SystemExit("no PostgreSQL server")
                argv += ["--state", pg_url]
            server, url = start(argv, READY, env())
        host, _, port = url.removeprefix("http://").partition("/")[0].rpartition(":")
        try:
            result = drive(side, host, int(port), tokens, seconds, warm, server.pid)
            if side != "bare":
                on_lanes = lane_commits(repo)
                if result.pop("commits") != on_lanes:
                    raise SystemExit(f"{side}: clients counted other commits than the lanes hold")
                result["commits_on_lanes"] = on_lanes
            else:
                result.pop("commits")
        finally:
            stop(server)
    return result


def drive(side: str, host: str, port: int, tokens: list[str], seconds: float, warm: float,
          server_pid: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    window = ctx.Array("d", [0.0, 0.0])
    procs = [ctx.Process(target=client_process, args=(
        i, side, host, port, tokens, list(range(i, CLIENTS, CLIENT_PROCESSES)), ready, go, out,
        window)) for i in range(CLIENT_PROCESSES)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    time.sleep(warm)
    pg = PG_PID[0] if side.startswith("pg") else 0
    cpu_start = tree_cpu_seconds(server_pid)
    pg_start = tree_cpu_seconds(pg) if pg else 0.0
    clients_start = sum(tree_cpu_seconds(p.pid) for p in procs if p.pid)
    busy_start = machine_busy_seconds()
    start_at = time.monotonic()
    window[0], window[1] = start_at, start_at + seconds
    go.set()
    time.sleep(seconds)
    cpu = tree_cpu_seconds(server_pid) - cpu_start
    pg_cpu = tree_cpu_seconds(pg) - pg_start if pg else 0.0
    clients_cpu = sum(tree_cpu_seconds(p.pid) for p in procs if p.pid) - clients_start
    busy = machine_busy_seconds() - busy_start
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    lat: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    for r in results:
        for k, v in r["lat"].items():
            lat.setdefault(k, []).extend(v)
        errors.update(r["errors"])
    ops = sum(r["ops"] for r in results)
    everything = [x for v in lat.values() for x in v]
    return {
        "ops": ops, "ops_per_s": round(ops / seconds, 1),
        "latency_ms": {k: {"n": len(v), "p50": round(pct(v, 0.5) * 1e3, 2),
                           "p99": round(pct(v, 0.99) * 1e3, 2)}
                       for k, v in {**lat, "all": everything}.items() if v},
        "p99_over_p50": round(pct(everything, 0.99) / max(pct(everything, 0.5), 1e-9), 2),
        "errors": sum(errors.values()), "error_codes": dict(errors),
        "conflicts_retried": sum(r["conflicts"] for r in results),
        "commits": sum(r["commits"] for r in results),
        "server_cpu_ms_per_op": round(cpu * 1e3 / max(ops, 1), 3),
        "postgres_cpu_ms_per_op": round(pg_cpu * 1e3 / max(ops, 1), 3),
        "clients_cpu_ms_per_op": round(clients_cpu * 1e3 / max(ops, 1), 3),
        # Cores in use over the window, everything on the machine counted: the
        # server, its database and the clients share the same cores.
        "cores_busy": round(busy / seconds, 2),
        "cores_used_by_server": round((cpu + pg_cpu) / seconds, 2),
    }


def bare_server(folder: Path) -> None:
    """The peer: bench_edge.py's bare MCP SDK server, stateless, printing its URL."""
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_edge

    bench_edge.BARE_READY = BARE_READY
    bench_edge.bare_server("http", folder, stateless=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--warm-seconds", type=float, default=WARM_SECONDS)
    parser.add_argument("--sides", default="bare,sqlite-1,sqlite-2,pg-1,pg-2")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--bare", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare_server(Path(args.bare))
        return
    sides = args.sides.split(",")
    rounds: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        server: Any = None
        if any(s.startswith("pg") for s in sides):
            from tests.pgserver import PostgresServer

            server = stack.enter_context(PostgresServer(durable=True))
            PG_PID[0] = server.pid
        for n in range(args.rounds):
            results: dict[str, Any] = {}
            # Each round runs every side, in an order rotated by one, so drift
            # on a shared machine hits each side alike.
            for side in sides[n % len(sides):] + sides[:n % len(sides)]:
                pg_url = server.new_database() if side.startswith("pg") else None
                results[side] = run_side(side, args.seconds, args.warm_seconds, pg_url)
                print(f"round {n + 1}", side, json.dumps(results[side]), file=sys.stderr,
                      flush=True)
            rounds.append({"sides": results, "ratios": ratios_of(results)})
    medians = {key: statistics.median(r["ratios"][key] for r in rounds)
               for key in rounds[0]["ratios"]}
    checks = {
        "errors_zero": all(side["errors"] == 0 for r in rounds for side in r["sides"].values()),
        "workers_ratio": all(medians[f"{s}_2_over_1_workers"] >= TARGETS["workers_ratio"]
                             for s in ("sqlite", "pg") if f"{s}_2_over_1_workers" in medians),
        "postgres_ratio": all(medians[f"pg_over_sqlite_{w}_workers"] >= TARGETS["postgres_ratio"]
                              for w in ("1", "2") if f"pg_over_sqlite_{w}_workers" in medians),
        "p99_over_p50_per_operation": all(
            op["p99"] <= TARGETS["p99_over_p50"] * op["p50"]
            for r in rounds for name, side in r["sides"].items() if name != "bare"
            for key, op in side["latency_ms"].items() if key != "all"),
    }
    report = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "platform": platform.platform()},
              "clients": CLIENTS, "client_processes": CLIENT_PROCESSES, "agents": AGENTS,
              "seconds": args.seconds, "warm_seconds": args.warm_seconds,
              "rounds": rounds, "median_ratios": medians, "targets": TARGETS,
              "target_met": checks}
    print(json.dumps(report, indent=2))


def ratios_of(results: dict[str, Any]) -> dict[str, float]:
    """Throughput ratios between the sides of one round."""
    ratios: dict[str, float] = {}
    for store in ("sqlite", "pg"):
        one, two = results.get(f"{store}-1"), results.get(f"{store}-2")
        if one and two:
            ratios[f"{store}_2_over_1_workers"] = round(two["ops_per_s"] / one["ops_per_s"], 2)
    for workers in ("1", "2"):
        lite, pg = results.get(f"sqlite-{workers}"), results.get(f"pg-{workers}")
        if lite and pg:
            ratios[f"pg_over_sqlite_{workers}_workers"] = round(pg["ops_per_s"]
                                                               / lite["ops_per_s"], 2)
    if "bare" in results:
        for side, r in results.items():
            if side != "bare":
                ratios[f"{side}_over_bare"] = round(r["ops_per_s"]
                                                    / results["bare"]["ops_per_s"], 3)
    return ratios


if __name__ == "__main__":
    main()
