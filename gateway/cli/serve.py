"""``chit mcp`` and ``chit engine serve``: run an edge or the engine.

``chit mcp`` serves one token over stdio or every bearer token over HTTP, with
the engine in this process (``--repo``) or a separate one (``--engine``);
``chit engine serve`` runs that separate engine. Both stop on ``SIGTERM`` or
Ctrl-C through Python, with status 0, leaving no process behind
(gateway/_stopping.py). docs/http.md, docs/engine-api.md and
docs/deployment.md ("Stopping") say more.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ChitError, ConfigurationError
from gateway.cli._output import EXIT_OK
from gateway.cli.tokens import MAX_TOKEN_FILE_BYTES

if TYPE_CHECKING:
    from argparse import _SubParsersAction

    from engine.service import RepoSpec
    from gateway.mcp_server import EngineClient

__all__ = ["add_engine", "add_mcp"]


def add_mcp(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit mcp`` to ``sub``."""
    p = sub.add_parser("mcp", parents=[common], help="serve MCP: over stdio for one token, "
                       "or streamable HTTP (--http) with a bearer token on every request")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--repo", metavar="[NAME=]PATH",
                       help="the git repository (the engine runs in this process); its name "
                       "is the folder's without .git, or NAME")
    where.add_argument("--engine", metavar="unix:PATH|http://HOST:PORT",
                       help="a separate engine (chit engine serve); this edge holds no keys")
    p.add_argument("--repo-name", metavar="NAME",
                   help="with --engine over stdio: the engine's repository to work on "
                   "(default: its only one; required when it serves several)")
    p.add_argument("--token-file", help="file holding the token (else $CHIT_TOKEN)")
    p.add_argument("--session", metavar="ID",
                   help="stdio: resume this session's staged change (the `session` that status "
                   "and effective_scope return), with the same token (else $CHIT_SESSION; "
                   "default: a new session)")
    p.add_argument("--read-only", action="store_true",
                   help="offer only read-only tools; every other call fails with engine_frozen")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp (loopback; port 0 picks "
                   "one) instead of stdio (docs/http.md)")
    p.add_argument("--unsafe-non-loopback", action="store_true",
                   help="with --http, allow a non-loopback HOST (put TLS in front)")
    p.add_argument("--allowed-host", action="append", metavar="NAME:PORT",
                   help="with --http, another accepted Host header (repeatable)")
    p.add_argument("--public-url", metavar="URL",
                   help="with --http, the origin agents use when a proxy is in front")
    p.add_argument("--watch-interval", type=float, default=2.0, metavar="SECONDS",
                   help="with --http, how often connected tokens' offers are re-checked "
                   "for tools/list_changed besides the engine's change feed (default 2)")
    p.add_argument("--authorization-server", metavar="URL",
                   help="with --http, the authorization server that issues chit tokens (the "
                   "chit engine serve URL with POST /token), listed in the RFC 9728 metadata; "
                   "https, or http on loopback")
    p.add_argument("--workers", metavar="N",
                   help="with --http and --engine, edge processes serving the port "
                   "(default 1; docs/http.md)")
    _add_otel(p)
    p.set_defaults(func=cmd_mcp)


def _add_otel(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otel", action="store_true",
                   help="export traces and metrics with OpenTelemetry, configured by the "
                   "OTEL_* variables (else $CHIT_OTEL=1; needs chit[otel]; docs/telemetry.md)")


def _start_otel(args: argparse.Namespace) -> None:
    """Turn OpenTelemetry on when ``--otel`` or ``$CHIT_OTEL`` asks for it."""
    from gateway import telemetry

    if telemetry.wanted(bool(getattr(args, "otel", False))):
        telemetry.enable()


def _read_token(args: argparse.Namespace) -> str:
    if args.token_file:
        with open(args.token_file, "rb") as fh:
            raw = fh.read(MAX_TOKEN_FILE_BYTES + 1)
        if len(raw) > MAX_TOKEN_FILE_BYTES:
            raise ConfigurationError("the token file is too large to hold a token")
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise ConfigurationError("the token file does not hold a chit token") from None
    else:
        text = os.environ.get("CHIT_TOKEN", "").strip()
    if not text:
        raise ConfigurationError("no token: set CHIT_TOKEN or pass --token-file")
    return text


def _report_refused_token(engine: EngineClient, token: str, repo: str | None = None) -> None:
    """Say on stderr, once at start, if the engine refuses the stdio edge's token.

    The edge still serves: every call then answers the same refusal, which an
    MCP host shows the agent. Only the code and the engine's caller-safe
    message are printed, never the token (docs/cli.md, "chit mcp").
    """
    from engine.service import Refused

    answer = engine.offer(token, repo=repo)
    if not isinstance(answer, Refused) or answer.code in ("internal_error", "policy_denied"):
        return  # the engine's own trouble is reported where it happens
    logging.getLogger("chit.gateway").warning(
        "the token is refused (%s): %s; every call will be refused until the edge is "
        "started with a good token (chit inspect shows why, chit mint makes a new one)",
        answer.code, answer.message,
    )


def _read_session(args: argparse.Namespace) -> str | None:
    """The session a stdio edge resumes: ``--session``, else ``$CHIT_SESSION``, else none."""
    from engine.service import validate_session_id

    text = args.session if args.session is not None else os.environ.get("CHIT_SESSION", "")
    if not text.strip():
        return None
    try:
        return validate_session_id(text.strip())
    except ChitError as exc:
        raise ValueError(f"--session: {exc.message}") from None


def cmd_mcp(args: argparse.Namespace) -> int:
    from gateway._stopping import stop_signals

    with stop_signals():
        return _cmd_mcp(args)


def _cmd_mcp(args: argparse.Namespace) -> int:
    _start_otel(args)
    if args.workers is not None and not args.http:
        raise ValueError("--workers applies to --http (one stdio edge is one process)")
    if args.repo_name is not None:
        if args.http or not args.engine:
            raise ValueError("--repo-name applies to --engine over stdio; over HTTP each "
                             "repository has its own path, /repos/NAME/mcp")
        from engine.service import validate_repo_name

        try:
            validate_repo_name(args.repo_name)
        except ValueError as exc:
            raise ValueError(f"--repo-name: {exc}") from None
    if args.http:
        if args.session is not None:
            raise ValueError("--session is for stdio; over HTTP a client resumes a session "
                             "with the Chit-Session header (docs/http.md)")
        return _mcp_http(args)
    if args.authorization_server:
        raise ValueError("--authorization-server applies to --http (the RFC 9728 metadata)")
    if args.engine:
        return _mcp_remote(args)
    from engine import admin
    from engine.service import Engine, resolve_repo_specs
    from gateway.mcp_server import serve_stdio

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    token = _read_token(args)
    session = _read_session(args)
    repos = resolve_repo_specs(home, [args.repo])
    with Engine(home, repos, read_only=args.read_only, state=args.state,
                role="embedded") as engine:
        _report_refused_token(engine, token)
        serve_stdio(engine, token, session=session,
                    state_keys=admin.request_state_keys(home).keys,
                    approval_url=admin.approval_url_template(home))
    return EXIT_OK


def _mcp_http(args: argparse.Namespace) -> int:
    """``chit mcp --http HOST:PORT``: streamable HTTP, a bearer token on every request."""
    from gateway.http_edge import HttpSettings, parse_listen_address, serve_http

    if args.token_file:
        raise ValueError("--token-file is for stdio; over HTTP every request carries its own "
                         "bearer token")
    from gateway import _workers

    workers = 1 if args.workers is None else _workers.worker_count(args.workers)
    if workers > 1 and not getattr(args, "engine", None):
        raise ValueError("--workers needs --engine URL: an engine inside the edge serves one "
                         "process only; run chit engine serve and point the edges at it")
    host, port = parse_listen_address(args.http)
    settings = HttpSettings(
        host=host,
        port=port,
        allow_non_loopback=args.unsafe_non_loopback,
        allowed_hosts=tuple(args.allowed_host or ()),
        public_url=args.public_url,
        watch_interval=args.watch_interval,
        authorization_server=args.authorization_server,
    )
    if getattr(args, "engine", None):
        from gateway.remote_engine import RemoteEngine

        if args.read_only:
            raise ValueError("--read-only applies to an embedded engine; with --engine, the "
                             "engine decides (chit freeze on)")
        _no_state_with_engine(args)
        if workers > 1:
            from gateway.http_edge.workers import serve_http_workers

            return serve_http_workers(args.engine, settings, workers, verbose=args.verbose)
        with RemoteEngine(args.engine) as remote:
            serve_http(remote, settings)
        return EXIT_OK
    from engine import admin
    from engine.service import Engine, resolve_repo_specs

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    repos = resolve_repo_specs(home, [args.repo])
    with Engine(home, repos, read_only=args.read_only, state=args.state,
                role="embedded") as engine:
        serve_http(engine, settings, state_keys=admin.request_state_keys(home).keys)
    return EXIT_OK


def _mcp_remote(args: argparse.Namespace) -> int:
    """``chit mcp --engine URL``: an edge with no keys, no repository and no home.

    Its ``requestState`` key is its own (one process), and with no home it has
    no ``[approvals] url``: a waiting call is the plain refusal under 2025-11-25.
    """
    from gateway.mcp_server import serve_stdio
    from gateway.remote_engine import RemoteEngine

    if getattr(args, "read_only", False):
        raise ValueError("--read-only applies to an embedded engine; with --engine, the "
                         "engine decides (chit freeze on)")
    _no_state_with_engine(args)
    token = _read_token(args)
    session = _read_session(args)
    with RemoteEngine(args.engine) as engine:
        health = engine.health()
        if not health.get("ok"):
            logging.getLogger("chit.gateway").warning(
                "the engine at %s does not answer yet; calls fail until it does", args.engine
            )
        else:
            _report_refused_token(engine, token, args.repo_name)
        serve_stdio(engine, token, repo=args.repo_name, session=session)
    return EXIT_OK


def _no_state_with_engine(args: argparse.Namespace) -> None:
    """An edge of a separate engine holds no state: ``--state`` belongs to the engine."""
    if getattr(args, "state", None):
        raise ValueError("--state applies to the engine (chit engine serve --state URL); an "
                         "edge with --engine holds no state")


def add_engine(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit engine serve`` to ``sub``."""
    eng = sub.add_parser(
        "engine", help="run the engine as a separate process (docs/engine-api.md)"
    ).add_subparsers(dest="engine_command", required=True)
    p = eng.add_parser("serve", parents=[common],
                       help="serve chit-engine/1 on a unix socket (0600) or loopback TCP")
    p.add_argument("--repo", action="append", metavar="[NAME=]PATH",
                   help="a git repository to serve, named NAME or after its folder (without "
                   ".git); repeatable. Default: the [[repo]] tables of <home>/engine.toml")
    listen = p.add_mutually_exclusive_group()
    listen.add_argument("--socket", help="unix socket path (default: <home>/engine.sock)")
    listen.add_argument("--listen", metavar="HOST:PORT",
                        help="loopback TCP instead (127.0.0.1:PORT, [::1]:PORT); any local "
                        "user can connect")
    p.add_argument("--socket-group", metavar="GROUP",
                   help="let this group connect too (socket mode 0660)")
    p.add_argument("--max-request-bytes", type=int, default=16 * 1024 * 1024,
                   help="largest request body (default 16 MiB)")
    p.add_argument("--public-url", metavar="URL",
                   help="the origin clients reach this engine at (https, or http on loopback): "
                   "the issuer of its OAuth metadata (RFC 8414) and, with --listen, an "
                   "accepted Host; default: the --listen URL, none for a socket")
    p.add_argument("--workers", metavar="N",
                   help="worker processes serving the socket (default: the cores this "
                   "process may use; 1: one process, no supervisor)")
    _add_otel(p)
    p.set_defaults(func=cmd_engine_serve)


def cmd_engine_serve(args: argparse.Namespace) -> int:
    from gateway._stopping import stop_signals

    with stop_signals():
        return _cmd_engine_serve(args)


def _cmd_engine_serve(args: argparse.Namespace) -> int:
    _start_otel(args)
    from engine import admin
    from engine.service import Engine, resolve_repo_specs
    from gateway import _oauth, _workers, engine_server

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    repos = resolve_repo_specs(home, args.repo)  # refused before anything binds
    if args.socket_group and args.listen:
        raise ValueError("--socket-group applies to --socket, not --listen")
    if args.max_request_bytes < 1024:
        raise ValueError("--max-request-bytes must be at least 1024")
    address = engine_server.parse_listen(args.listen) if args.listen else None
    public_url = None
    if args.public_url is not None:
        public_url = _oauth.check_issuer_url(
            args.public_url, option="--public-url", origin_only=True
        )
    workers = _workers.default_workers() if args.workers is None else _workers.worker_count(
        args.workers)
    if workers > 1:
        return _engine_workers(args, home, repos, address, workers, public_url)
    # Refuses an unusable keyring, policy, repository or state store.
    engine = Engine(home, repos, state=args.state)
    exchanger = admin.TokenExchange(home, channel="token_endpoint", store=engine.store)
    if address is not None:
        listener = engine_server.bind_tcp(*address)
    else:
        path = args.socket or home / engine_server.DEFAULT_SOCKET_NAME
        listener = engine_server.bind_unix(path, group=args.socket_group)
    with engine:
        engine_server.serve(
            engine, listener, max_request_bytes=args.max_request_bytes,
            exchange=exchanger, public_url=public_url,
        )
    return EXIT_OK


def _engine_workers(
    args: argparse.Namespace, home: Path, repos: list[RepoSpec],
    address: tuple[str, int] | None, workers: int, public_url: str | None,
) -> int:
    """``chit engine serve --workers N``: bind, then N worker processes (docs/engine-api.md)."""
    from gateway import engine_server
    from gateway.engine_server.worker import serve_workers

    if address is not None:
        listener = engine_server.bind_tcp(*address)
    else:
        path = args.socket or home / engine_server.DEFAULT_SOCKET_NAME
        listener = engine_server.bind_unix(path, group=args.socket_group)
    # The workers load the keyring, policy, repository and store; if the first
    # one cannot, the socket is removed and its error is the command's.
    return serve_workers(
        listener, workers, home=home, repos=repos, state=args.state, verbose=args.verbose,
        max_request_bytes=args.max_request_bytes, public_url=public_url,
    )
