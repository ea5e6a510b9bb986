"""``chit engine serve``: the engine as a separate process, behind ``chit-engine/1``.

The engine keeps its keys, its repository and its state; edges (``chit mcp
--engine URL``) reach it over HTTP/1.1 on a unix socket (``0600`` by default, the
chit home's ``engine.sock``) or a loopback TCP port, and hold nothing but the
connection. The API (docs/engine-api.md) is the engine's own narrow interface:

- ``POST /v1/offer``  ``{"token"}`` -> :meth:`engine.service.Engine.offer`'s answer;
- ``POST /v1/invoke`` ``{"token", "tool", "arguments"?, "session",
  "offered_catalog_hash"?}`` -> :meth:`engine.service.Engine.invoke`'s answer;
- ``GET /v1/health`` -> ``{"ok": true, "api": "chit-engine/1"}``;
- ``POST /token`` (when the server is given an exchange function): RFC 8693 token
  exchange of an identity provider's JWT for a root chit token (docs/exchange.md);
- ``GET /.well-known/oauth-authorization-server`` (with an exchange function and
  a known issuer URL): the RFC 8414 metadata of that authorization server.

Every answer is the engine's own, sent as it is (a typed answer is a ``dict``
of its JSON form); a request the API refuses before the
engine sees it (size, content type, strict JSON, fields, browser origins) gets the
same ``{"ok": false, "error": {"error": CODE, "message"}}`` shape with a 4xx
status. Tokens travel only in request bodies, which are never logged.
"""

from __future__ import annotations

import contextlib
import functools
import grp
import ipaddress
import logging
import os
import signal
import socket
import stat
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.errors import ChitError, ConfigurationError
from gateway import _oauth, _wire
from gateway.mcp_server import EngineClient

__all__ = [
    "DEFAULT_SOCKET_NAME",
    "MAX_REQUEST_BYTES",
    "Listener",
    "bind_tcp",
    "bind_unix",
    "create_app",
    "parse_listen",
    "serve",
]

logger = logging.getLogger("chit.engine_server")

DEFAULT_SOCKET_NAME = "engine.sock"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
ENGINE_THREADS = 32  # engine calls running at once; the rest wait for a thread
MAX_CONNECTIONS = 1024  # open connections (idle kept-alive ones too) before uvicorn answers 503
KEEP_ALIVE_SECONDS = 30  # longer than the client's idle expiry, so it never reuses a closed one
_SUN_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL (Linux)
_INVOKE_FIELDS = frozenset({"token", "tool", "arguments", "session", "offered_catalog_hash"})
_HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
TOKEN_PATH = _oauth.TOKEN_PATH
MAX_TOKEN_REQUEST_BYTES = 32 * 1024
_TOKEN_HEADERS = {**_HEADERS, "pragma": "no-cache"}  # RFC 6749 section 5.1
Exchange = Callable[[str], dict[str, Any]]
"""Verifies a subject JWT and mints: :func:`engine.exchange.exchange` bound to a home."""


class _RequestError(Exception):
    """A request refused before it reaches the engine."""

    def __init__(self, status: int, code: str, message: str, **hints: Any) -> None:
        super().__init__(code)
        self.status = status
        self.answer = _wire.error(code, message, **hints)


def _json(
    answer: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(answer, status_code=status, headers=headers or _HEADERS)


def create_app(
    engine: EngineClient,
    *,
    allowed_hosts: frozenset[str] | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    engine_threads: int = ENGINE_THREADS,
    exchange: Exchange | None = None,
    issuer: str | None = None,
) -> Starlette:
    """Build the ASGI app that serves ``engine`` as ``chit-engine/1``.

    Args:
        engine: The engine (:class:`engine.service.Engine`, or anything with its
            ``offer``/``invoke``).
        allowed_hosts: ``Host`` header values to accept (``host:port``), for TCP
            listeners, against DNS rebinding; ``None`` accepts any (unix sockets,
            which no browser reaches).
        max_request_bytes: Largest request body accepted (413 above).
        engine_threads: Engine calls running at once.
        exchange: Serve ``POST /token`` with it (RFC 8693); ``None``: no such endpoint.
        issuer: With ``exchange``, the authorization server's issuer identifier
            (an origin checked by :func:`gateway._oauth.check_issuer_url`): serve
            its RFC 8414 metadata at ``/.well-known/oauth-authorization-server``.
            ``None`` (a unix socket without ``--public-url``): that path answers
            404 saying why, since no URL of this server is known.

    Returns:
        A Starlette application.
    """
    limiter = anyio.CapacityLimiter(engine_threads)

    def guard(request: Request) -> None:
        # A browser page must never drive the engine: browsers send Origin on
        # cross-origin POSTs and a rebound name shows up as a foreign Host.
        if "origin" in request.headers:
            raise _RequestError(403, "invalid_argument", "browser requests are refused")
        if allowed_hosts is not None and request.headers.get("host", "") not in allowed_hosts:
            raise _RequestError(403, "invalid_argument", "unexpected Host header")

    async def body(request: Request) -> dict[str, Any]:
        guard(request)
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            raise _RequestError(415, "invalid_argument", "the body must be application/json")
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_request_bytes):
            raise _RequestError(
                413, "limit_exceeded", f"the body exceeds {max_request_bytes} bytes"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_request_bytes:
                raise _RequestError(
                    413, "limit_exceeded", f"the body exceeds {max_request_bytes} bytes"
                )
            chunks.append(chunk)
        try:
            doc = _wire.loads_strict(b"".join(chunks))
        except _wire.WireError as exc:
            raise _RequestError(400, "invalid_argument", str(exc)) from None
        if not isinstance(doc, dict):
            raise _RequestError(400, "invalid_argument", "the body must be a JSON object")
        return doc

    async def run(call: Callable[[], dict[str, Any]]) -> JSONResponse:
        try:
            answer = await anyio.to_thread.run_sync(call, limiter=limiter)
        except Exception:
            # The engine shapes its own failures; this is a bug. Never forward its text.
            logger.exception("the engine raised instead of answering")
            return _json(_wire.error("internal_error", "the engine failed"), 500)
        return _json(answer)

    async def offer(request: Request) -> Response:
        try:
            doc = await body(request)
            _fields(doc, required={"token"}, allowed={"token"})
            token = _string(doc, "token")
        except _RequestError as exc:
            return _json(exc.answer, exc.status)
        return await run(functools.partial(engine.offer, token))

    async def invoke(request: Request) -> Response:
        try:
            doc = await body(request)
            _fields(doc, required={"token", "tool", "session"}, allowed=_INVOKE_FIELDS)
            token, tool, session = (_string(doc, k) for k in ("token", "tool", "session"))
            arguments = doc.get("arguments")
            if arguments is not None and not isinstance(arguments, dict):
                raise _RequestError(
                    400, "invalid_argument", "arguments must be an object or null",
                    fields=["arguments"],
                )
            listed = doc.get("offered_catalog_hash")
            if listed is not None and not isinstance(listed, str):
                raise _RequestError(
                    400, "invalid_argument", "offered_catalog_hash must be a string or null",
                    fields=["offered_catalog_hash"],
                )
        except _RequestError as exc:
            return _json(exc.answer, exc.status)
        call = functools.partial(
            engine.invoke, token, tool, arguments, session=session, offered_catalog_hash=listed
        )
        return await run(call)

    async def health(request: Request) -> Response:
        try:
            guard(request)
        except _RequestError as exc:
            return _json(exc.answer, exc.status)
        return _json({"ok": True, "api": _wire.API})

    async def token(request: Request) -> Response:
        if exchange is None:  # the route exists only with one
            return _oauth_error(404, "invalid_request", "no token exchange on this engine")
        try:
            guard(request)
        except _RequestError as exc:
            return _oauth_error(exc.status, "invalid_request", exc.answer["error"]["message"])
        fields, problem = await _token_form(request)
        if problem is not None:
            return problem
        if fields.get("grant_type") != _GRANT_TYPE:
            return _oauth_error(400, "unsupported_grant_type", f"grant_type must be {_GRANT_TYPE}")
        if fields.get("subject_token_type") != _JWT_TYPE:
            return _oauth_error(400, "invalid_request", f"subject_token_type must be {_JWT_TYPE}")
        subject = fields.get("subject_token", "")
        if not subject:
            return _oauth_error(400, "invalid_request", "subject_token is required")
        requested = fields.get("requested_token_type")
        if requested is not None and requested != _ACCESS_TYPE:
            return _oauth_error(
                400, "invalid_request", f"only {_ACCESS_TYPE} tokens are issued here")
        if fields.get("scope") is not None:
            # RFC 8693 §2.1: the server must not ignore a narrowing it was asked
            # for; the issuer's mapping alone decides a token's operations here.
            return _oauth_error(
                400, "invalid_scope", "scope is not supported: the issuer's mapping in the "
                "policy decides the token's operations and paths (narrow it afterwards with "
                "chit attenuate)")
        try:
            minted = await anyio.to_thread.run_sync(exchange, subject, limiter=limiter)
        except ChitError as exc:
            if exc.code == "internal_error":  # e.g. the call log could not be written
                return _oauth_error(500, "server_error", exc.message, chit_error=exc.code)
            return _oauth_error(400, "invalid_request", exc.message, chit_error=exc.code,
                                **exc.hints)
        except ConfigurationError:
            logger.error("token exchange: the engine's configuration is unusable; run "
                         "`chit policy check` and `chit keys list`")
            return _oauth_error(500, "server_error", "the engine's configuration is unusable",
                                chit_error="internal_error")
        except Exception:
            logger.exception("token exchange failed")
            return _oauth_error(500, "server_error", "the engine failed",
                                chit_error="internal_error")
        return _json({
            "access_token": minted["token"],
            "issued_token_type": _ACCESS_TYPE,
            "token_type": "Bearer",
            "expires_in": minted["expires_in"],
        }, headers=_TOKEN_HEADERS)

    async def metadata(request: Request) -> Response:
        try:
            guard(request)
        except _RequestError as exc:
            return _json(exc.answer, exc.status)
        if issuer is None:
            return _json(_wire.error(
                "not_found", "this engine does not know its URL: start chit engine serve "
                "with --public-url to publish authorization-server metadata",
            ), 404)
        return _json(_oauth.authorization_server_metadata(issuer))

    async def http_error(_request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 404:
            answer = _wire.error("not_found", f"no such endpoint; this engine speaks {_wire.API}")
        elif status == 405:
            answer = _wire.error("invalid_argument", "method not allowed on this endpoint")
        else:
            answer = _wire.error("internal_error", "the engine server failed")
        response = _json(answer, status)
        if isinstance(exc, HTTPException) and exc.headers:
            response.headers.update(exc.headers)  # Allow, on 405
        return response

    async def server_error(_request: Request, _exc: Exception) -> Response:
        return _json(_wire.error("internal_error", "the engine server failed"), 500)

    return Starlette(
        routes=[
            Route(_wire.OFFER_PATH, offer, methods=["POST"]),
            Route(_wire.INVOKE_PATH, invoke, methods=["POST"]),
            Route(_wire.HEALTH_PATH, health, methods=["GET"]),
            *([Route(TOKEN_PATH, token, methods=["POST"]),
               Route(_oauth.METADATA_PATH, metadata, methods=["GET"])]
              if exchange is not None else []),
        ],
        exception_handlers={HTTPException: http_error, 500: server_error},
    )


_GRANT_TYPE = _oauth.GRANT_TYPE
_JWT_TYPE = _oauth.JWT_TOKEN_TYPE
_ACCESS_TYPE = _oauth.ACCESS_TOKEN_TYPE
_TOKEN_FIELDS = frozenset({
    "grant_type", "subject_token", "subject_token_type", "audience", "resource", "scope",
    "requested_token_type",
})


def _oauth_error(status: int, error: str, description: str, **extra: Any) -> JSONResponse:
    """An RFC 6749 section 5.2 error answer; chit's own code rides along as ``chit_error``."""
    return _json(
        {"error": error, "error_description": description, **extra}, status, _TOKEN_HEADERS
    )


async def _token_form(request: Request) -> tuple[dict[str, str], JSONResponse | None]:
    """The form-encoded body of ``POST /token``: each parameter at most once (RFC 6749 3.2)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}, _oauth_error(
            400, "invalid_request", "the body must be application/x-www-form-urlencoded"
        )
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_TOKEN_REQUEST_BYTES):
        # Refused before reading: a huge declared length would hold the connection.
        return {}, _oauth_error(
            413, "invalid_request", f"the body exceeds {MAX_TOKEN_REQUEST_BYTES} bytes"
        )
    raw = b""
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_TOKEN_REQUEST_BYTES:
                return {}, _oauth_error(
                    413, "invalid_request", f"the body exceeds {MAX_TOKEN_REQUEST_BYTES} bytes"
                )
    except ClientDisconnect:  # the client left mid-body: nothing to answer, nothing to log
        return {}, _oauth_error(400, "invalid_request", "the request body was cut short")
    try:
        pairs = urllib.parse.parse_qsl(
            raw.decode("ascii"), keep_blank_values=True, strict_parsing=True,
            max_num_fields=len(_TOKEN_FIELDS),
        )
    except (UnicodeDecodeError, ValueError):
        return {}, _oauth_error(400, "invalid_request", "the body is not a valid form")
    fields: dict[str, str] = {}
    for key, value in pairs:
        if key in fields:
            return {}, _oauth_error(400, "invalid_request", "a parameter is repeated")
        if key not in _TOKEN_FIELDS:
            return {}, _oauth_error(400, "invalid_request", "unknown parameter")
        fields[key] = value
    return fields, None


def _fields(doc: dict[str, Any], *, required: set[str], allowed: frozenset[str] | set[str]) -> None:
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise _RequestError(
            400, "invalid_argument", "unknown fields", fields=[f[:64] for f in unknown[:16]]
        )
    missing = sorted(required - set(doc))
    if missing:
        raise _RequestError(400, "invalid_argument", "missing fields", fields=missing)


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str):
        raise _RequestError(400, "invalid_argument", f"{key} must be a string", fields=[key])
    return value


# --- listeners -----------------------------------------------------------------


@dataclass
class Listener:
    """A bound, listening socket and how edges reach it.

    Attributes:
        sock: The listening socket, handed to uvicorn.
        url: What ``chit mcp --engine`` takes: ``unix:PATH`` or ``http://HOST:PORT``.
        allowed_hosts: ``Host`` values to accept (TCP), else ``None``.
        path: The socket file (unix), removed on shutdown if it is still ours.
        inode: The socket file's inode when bound.
    """

    sock: socket.socket
    url: str
    allowed_hosts: frozenset[str] | None = None
    path: Path | None = None
    inode: int | None = None

    def close(self) -> None:
        """Close the socket and remove its file if it is still the one bound."""
        self.sock.close()
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            info = os.lstat(self.path)
            if stat.S_ISSOCK(info.st_mode) and info.st_ino == self.inode:
                self.path.unlink()


def _refuse_unless_stale(path: Path) -> None:
    """Remove a stale socket at ``path``; refuse anything else that is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ValueError(f"{path} exists and is not a socket; refusing to replace it")
    if info.st_uid != os.geteuid():
        raise ValueError(f"{path} belongs to another user; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink()  # stale: nobody listens
        return
    except OSError:
        raise ValueError(f"{path} exists and cannot be probed; refusing to replace it") from None
    finally:
        probe.close()
    raise ValueError(f"an engine is already serving on {path}")


def bind_unix(path: str | os.PathLike[str], *, group: str | None = None) -> Listener:
    """Bind a listening unix socket, mode ``0600`` (``0660`` with ``group``).

    The socket file is created under umask ``0177`` and chmod'ed before
    ``listen``, so no other user can ever connect to it. A stale socket (one
    nobody listens on, owned by this user) is replaced; anything else at the path
    is refused.

    Args:
        path: The socket file.
        group: A group whose members may connect too (``0660``); the engine's
            user must belong to it.

    Returns:
        The listener.

    Raises:
        ValueError: If the path is too long, holds something else, or an engine
            already serves there; or ``group`` is unknown.
    """
    where = Path(path).absolute()
    if len(os.fsencode(where)) > _SUN_PATH_MAX:
        raise ValueError(f"socket path too long (at most {_SUN_PATH_MAX} bytes): {where}")
    gid = None
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ValueError(f"no such group: {group}") from None
    _refuse_unless_stale(where)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(str(where))
        finally:
            os.umask(old)
        if gid is not None:
            os.chown(where, -1, gid)
        os.chmod(where, 0o660 if gid is not None else 0o600)
        inode = os.lstat(where).st_ino
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return Listener(sock=sock, url=f"unix:{where}", path=where, inode=inode)


def parse_listen(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:PORT`` for IPv6) and insist on loopback.

    Args:
        text: The ``--listen`` value.

    Returns:
        ``(ip, port)`` with ``localhost`` read as ``127.0.0.1``.

    Raises:
        ValueError: If it does not parse or the address is not loopback.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--listen takes HOST:PORT, not {text!r}")
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"--listen needs a loopback IP address, not {host!r}") from None
    if not address.is_loopback:
        raise ValueError(
            f"{host} is not a loopback address: the engine listens only on loopback "
            "(127.0.0.0/8, ::1); prefer --socket"
        )
    return str(address), int(port_text)


def bind_tcp(host: str, port: int) -> Listener:
    """Bind a listening TCP socket on a loopback address (see :func:`parse_listen`).

    Returns:
        The listener; ``url`` names the bound port (useful with port 0).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    hosts = {f"{shown}:{bound}"}
    if host == "127.0.0.1":
        hosts.add(f"localhost:{bound}")
    return Listener(sock=sock, url=f"http://{shown}:{bound}", allowed_hosts=frozenset(hosts))


@contextlib.contextmanager
def _closing(listener: Listener) -> Iterator[Listener]:
    try:
        yield listener
    finally:
        listener.close()


def serve(
    engine: EngineClient,
    listener: Listener,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    exchange: Exchange | None = None,
    public_url: str | None = None,
) -> None:
    """Serve ``engine`` on ``listener`` until SIGINT or SIGTERM, then remove the socket.

    Args:
        engine: The engine.
        listener: From :func:`bind_unix` or :func:`bind_tcp`.
        max_request_bytes: Largest request body accepted.
        exchange: Serve ``POST /token`` with it (docs/exchange.md).
        public_url: The origin clients reach this server at (a TLS proxy in
            front, say), checked by :func:`gateway._oauth.check_issuer_url`: the
            issuer of its RFC 8414 metadata, and on TCP an accepted ``Host``. By
            default a TCP listener's own URL is the issuer and a unix socket has none.

    Raises:
        ValueError: If ``public_url`` is not an https origin (http only on loopback).
    """
    import uvicorn

    issuer = listener.url if listener.allowed_hosts is not None else None
    hosts = listener.allowed_hosts
    if public_url is not None:
        issuer = _oauth.check_issuer_url(public_url, option="--public-url", origin_only=True)
        if hosts is not None:  # a proxy in front forwards its own Host
            hosts = hosts | {urllib.parse.urlsplit(issuer).netloc.lower()}
    app = create_app(
        engine, allowed_hosts=hosts, max_request_bytes=max_request_bytes,
        exchange=exchange, issuer=issuer if exchange is not None else None,
    )
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,  # keep the CLI's logging; uvicorn never sees a body
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        limit_concurrency=MAX_CONNECTIONS,
        ws="none",
    )
    with _closing(listener):
        mode = ""
        if listener.path is not None:
            mode = f" (mode {stat.S_IMODE(os.lstat(listener.path).st_mode):04o})"
        # uvicorn re-raises SIGTERM once it has shut down; exit through Python so
        # the socket file is removed (SIGINT arrives as KeyboardInterrupt). The
        # handler is in place before the ready line: a SIGTERM sent as soon as it
        # is read must not find the default action, which leaves the socket behind.
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            print(f"chit engine: serving {_wire.API} on {listener.url}{mode}", file=sys.stderr,
                  flush=True)
            uvicorn.Server(config).run(sockets=[listener.sock])
        finally:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(_sig: int, _frame: object) -> None:
    raise SystemExit(0)
