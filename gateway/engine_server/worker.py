"""``chit engine serve --workers N``: the supervisor's side and each worker process.

:func:`serve_workers` runs in the process that bound the socket: it starts N
workers (``python -m gateway.engine_server.worker``) through
:mod:`gateway._workers` and prints the ready line once every one serves. Each
worker has its own :class:`~engine.service.Engine` on the shared state store,
serves the API on the inherited socket and, for calls forwarded by the other
workers, on a private socket in the supervisor's run folder; it places the
sessions it opens in the store (``engine.service.Placement``). The settings
arrive on stdin, never in argv or the environment. docs/engine-api.md,
"Running it" and "Sessions across workers".
"""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import _workers
from gateway.engine_server.listeners import Listener

if TYPE_CHECKING:
    from engine.service import RepoSpec

__all__ = ["DRAIN_SECONDS", "main", "serve_workers"]

DRAIN_SECONDS = 30.0  # after SIGTERM, how long a worker lets calls in flight finish


def serve_workers(
    listener: Listener,
    count: int,
    *,
    home: Path,
    repos: list[RepoSpec],
    state: str | None,
    verbose: bool,
    max_request_bytes: int,
    public_url: str | None,
) -> int:
    """Serve ``listener`` with ``count`` worker processes until SIGINT or SIGTERM.

    Removes the socket file and the private run folder on the way out, after
    every worker (and whatever it started) has ended.

    Returns:
        0 after a signal; a worker's exit status if one failed to start.
    """
    from gateway.engine_server.run import ready_line

    folder = _workers.RunFolder()
    group = f"{socket.gethostname()}:{folder.path}"  # this serve, on this host
    fd = listener.sock.fileno()

    def config(index: int) -> dict[str, Any]:
        return {
            "home": str(home), "state": state, "verbose": verbose,
            "repos": [[r.name, str(r.path), r.base, r.remote] for r in repos],
            "max_request_bytes": max_request_bytes, "public_url": public_url,
            "listen_fd": fd, "url": listener.url,
            "allowed_hosts": None if listener.allowed_hosts is None
            else sorted(listener.allowed_hosts),
            "index": index, "count": count, "folder": str(folder.path), "group": group,
        }

    spec = _workers.WorkerSpec("gateway.engine_server.worker", config, (fd,), DRAIN_SECONDS)
    try:
        return _workers.Supervisor(spec, count, name="chit engine").run(
            lambda: print(ready_line(listener, count), file=sys.stderr, flush=True),
            listener.close)
    finally:
        listener.close()
        folder.remove()


def main() -> int:
    """A worker process: serve until the supervisor says stop (or dies)."""
    from gateway import _worker
    from gateway._reporting import reported

    config = _worker.begin()
    return reported(lambda: _serve(config), "engine")


def _serve(config: dict[str, Any]) -> int:
    from engine import admin
    from engine.service import Engine, RepoSpec
    from gateway import _worker, telemetry
    from gateway.engine_server.forward import Forwarding, Peers, ServeHere
    from gateway.engine_server.listeners import bind_unix
    from gateway.engine_server.run import build_app, uvicorn_config

    if telemetry.wanted(False):  # chit engine serve --otel sets CHIT_OTEL for its workers
        telemetry.enable()
    home = Path(config["home"])
    hosts = config["allowed_hosts"]
    shared = _worker.inherited_socket(int(config["listen_fd"]))
    repos = [RepoSpec(name, Path(path), base, remote)
             for name, path, base, remote in config["repos"]]
    engine = Engine(home, repos, state=config["state"], role="worker")
    with engine:
        exchanger = admin.TokenExchange(home, channel="token_endpoint", store=engine.store)
        folder = Path(config["folder"])
        private = bind_unix(folder / f"w{int(config['index'])}.sock")
        try:
            placement = engine.place_sessions(group=config["group"], owner=str(private.path))
            peers = Peers(folder, int(config["count"]))
            stopping = threading.Event()
            common = {"max_request_bytes": int(config["max_request_bytes"]),
                      "public_url": config["public_url"], "stopping": stopping}
            public_app = build_app(
                engine, url=config["url"], exchange=exchanger,
                sessions=Forwarding(placement, peers),
                allowed_hosts=None if hosts is None else frozenset(hosts), **common)
            private_app = build_app(engine, url=f"unix:{private.path}", allowed_hosts=None,
                                    exchange=None, sessions=ServeHere(), **common)
            _worker.run_servers(
                [(_worker.Server(uvicorn_config(public_app, drain_seconds=DRAIN_SECONDS)),
                  [shared]),
                 (_worker.Server(uvicorn_config(private_app, drain_seconds=DRAIN_SECONDS)),
                  [private.sock])],
                ready_fd=int(config["ready_fd"]),
                drain_seconds=DRAIN_SECONDS,
                on_stop=peers.aclose,
                stopping=stopping,
            )
        finally:
            private.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
