"""``chit mcp --http ADDR --engine URL --workers N``: the supervisor's side and each worker.

:func:`serve_http_workers` binds the port and runs N edge workers (``python -m
gateway.http_edge.workers``) through :mod:`gateway._workers`; each serves the
inherited port with its own :class:`~gateway.remote_engine.RemoteEngine`, and
its private socket for requests the other workers pass on (``peers``). Only a
separate engine can be shared by several edge processes, hence ``--engine``.
docs/http.md, "Workers".
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
from pathlib import Path
from typing import Any

from gateway import _workers
from gateway.http_edge.settings import HttpSettings

__all__ = ["main", "serve_http_workers"]


def serve_http_workers(engine_url: str, settings: HttpSettings, count: int, *,
                       verbose: bool) -> int:
    """Serve MCP over streamable HTTP with ``count`` worker processes until a signal.

    Prints ``chit: MCP over streamable HTTP at URL`` once every worker serves.

    Returns:
        0 after SIGINT or SIGTERM; a worker's exit status if one failed to start.

    Raises:
        ConfigurationError: For settings :func:`gateway.http_edge.run.check_settings` refuses.
        OSError: The address cannot be bound.
    """
    from gateway.http_edge.edge import resource_url
    from gateway.http_edge.run import DRAIN_SECONDS, bind, check_settings
    from gateway.remote_engine import parse_engine_url

    parse_engine_url(engine_url)  # refused here, once, rather than by every worker
    check_settings(settings)
    sock = bind(settings)
    port = sock.getsockname()[1]
    folder = _workers.RunFolder()

    # One requestState key for every worker (a retry may reach another one),
    # made here: an edge of a separate engine holds none of the home's keys.
    # It travels in the workers' settings pipe, never in argv or the environment.
    state_key = secrets.token_hex(32)

    def config(index: int) -> dict[str, Any]:
        return {"engine": engine_url, "settings": dataclasses.asdict(settings), "port": port,
                "listen_fd": sock.fileno(), "index": index, "count": count,
                "folder": str(folder.path), "verbose": verbose, "state_key": state_key}

    spec = _workers.WorkerSpec("gateway.http_edge.workers", config, (sock.fileno(),),
                               float(DRAIN_SECONDS))
    url = resource_url(settings, port)
    try:
        return _workers.Supervisor(spec, count, name="chit mcp").run(
            lambda: print(f"chit: MCP over streamable HTTP at {url}", file=sys.stderr, flush=True),
            sock.close)
    finally:
        sock.close()
        folder.remove()


def main() -> int:
    """An edge worker: serve until the supervisor says stop (or dies)."""
    from gateway import _worker
    from gateway._reporting import reported

    config = _worker.begin()
    return reported(lambda: _serve(config), "mcp")


def _serve(config: dict[str, Any]) -> int:
    from gateway import _worker, telemetry
    from gateway.engine_server.listeners import bind_unix
    from gateway.http_edge.edge import HttpEdge
    from gateway.http_edge.peers import EdgeWorkers
    from gateway.http_edge.run import DRAIN_SECONDS, uvicorn_config
    from gateway.http_edge.settings import authority, url_host
    from gateway.remote_engine import RemoteEngine

    if telemetry.wanted(False):  # chit mcp --otel sets CHIT_OTEL for its workers
        telemetry.enable()
    raw = dict(config["settings"])
    settings = HttpSettings(**{**raw, "allowed_hosts": tuple(raw["allowed_hosts"])})
    port, index = int(config["port"]), int(config["index"])
    folder = Path(config["folder"])
    shared = _worker.inherited_socket(int(config["listen_fd"]))
    workers = EdgeWorkers(index, int(config["count"]), folder,
                          authority(url_host(settings), port))
    private = bind_unix(workers.socket_path(index))
    try:
        with RemoteEngine(config["engine"]) as remote:
            edge = HttpEdge(remote, settings, port=port, workers=workers,
                            state_keys=[bytes.fromhex(str(config["state_key"]))])
            private_app = edge.private_app
            if private_app is None:  # an edge made with workers always has one
                raise RuntimeError("the edge has no app for its private socket")
            _worker.run_servers(
                [(_worker.Server(uvicorn_config(edge.app)), [shared]),
                 (_worker.Server(uvicorn_config(private_app, lifespan="off")),
                  [private.sock])],
                ready_fd=int(config["ready_fd"]),
                drain_seconds=DRAIN_SECONDS,
                on_stop=workers.aclose,
            )
    finally:
        private.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
