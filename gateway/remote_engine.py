"""The edge's side of ``chit-engine/1``: the engine's interface over HTTP.

:class:`RemoteEngine` has :class:`engine.service.Engine`'s ``offer``, ``invoke``,
``warning`` and ``wait_change`` and returns its typed answers, read from the wire with
validation, so the MCP server runs the same code embedded or remote. It holds
nothing but the connection and never raises for the engine or the transport:
those failures are ``internal_error``, or for a wait no change
(docs/engine-api.md, "The edge: what it holds").
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2
from httpcore2._backends.sync import SyncStream  # no public name; pinned in pyproject

from engine.service import (
    LIMITS,
    AnswerError,
    CallAnswer,
    OfferAnswer,
    Refused,
    read_call,
    read_offer,
    read_refusal,
    read_warning,
)
from gateway import __version__, _wire, telemetry

__all__ = ["MAX_ANSWER_BYTES", "RemoteEngine", "parse_engine_url"]

logger = logging.getLogger("chit.gateway")

MAX_ANSWER_BYTES = 64 * 1024 * 1024
CONNECT_TIMEOUT = 10.0  # seconds to reach the engine
CALL_TIMEOUT = 300.0  # seconds for one answer (a merge or project_context can be slow)
IDLE_SECONDS = 10.0  # a kept-alive connection is dropped before the server's 30 s
_UNIX_HOST = "chit-engine"  # the Host header on a unix socket (any name would do)

_UNREACHABLE = Refused("internal_error", "the engine is unreachable")
_CUT_OFF = Refused(
    "internal_error",
    "the engine did not answer; the call may have taken effect, check `status` first",
)
_UNREADABLE = Refused("internal_error", "the engine's answer could not be read")
_BUSY = Refused("internal_error", "the engine is busy; try again shortly")
_NOT_JSON = Refused("invalid_argument", "the arguments are not JSON the engine reads")


def parse_engine_url(url: str) -> tuple[str | None, str]:
    """Split ``--engine`` into a unix socket path or a loopback base URL.

    Args:
        url: ``unix:PATH`` (also ``unix://PATH``) or ``http://HOST:PORT`` with a
            loopback ``HOST`` (``127.0.0.0/8``, ``[::1]`` or ``localhost``).

    Returns:
        ``(socket_path, base_url)``: the path (``None`` for TCP) and the base URL
        the client sends requests to.

    Raises:
        ValueError: For any other form, a non-loopback host, or a path, query,
            user or fragment in the HTTP form.
    """
    if url.startswith("unix:"):
        path = url.removeprefix("unix:")
        if path.startswith("//"):
            path = path[2:]
        if not path or "\x00" in path:
            raise ValueError("--engine unix:PATH needs a socket path")
        return path, f"http://{_UNIX_HOST}"
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError("--engine takes unix:PATH or http://HOST:PORT (loopback)")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("--engine http://HOST:PORT takes no user, query or fragment")
    if parts.path not in ("", "/"):
        raise ValueError("--engine http://HOST:PORT takes no path (the API is under /v1)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("--engine http://HOST:PORT needs a valid port") from None
    host = parts.hostname or ""
    if port is None:
        raise ValueError("--engine http://HOST:PORT needs a port")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(
                "--engine must be a unix socket or a loopback address: the token "
                "travels in clear text"
            )
    shown = f"[{host}]" if ":" in host else host
    return None, f"http://{shown}:{port}"


class _ClosingBackend(httpcore2.SyncBackend):
    """httpcore's blocking backend, but a Unix socket that fails to connect is closed.

    An engine that was killed leaves its socket file behind; every connect to it
    is refused, and each refused socket must not linger until collected.
    """

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore2.NetworkStream:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            sock.settimeout(timeout)
            sock.connect(path)
        except TimeoutError as exc:
            sock.close()
            raise httpcore2.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            sock.close()
            raise httpcore2.ConnectError(str(exc)) from exc
        return SyncStream(sock)


class RemoteEngine:
    """A client of ``chit engine serve``, with the engine's ``offer``/``invoke``.

    Args:
        url: ``unix:PATH`` or ``http://HOST:PORT`` (loopback), see
            :func:`parse_engine_url`.
        connect_timeout: Seconds to connect.
        call_timeout: Seconds to wait for one answer.

    Raises:
        ValueError: If ``url`` is not one of the accepted forms.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
    ) -> None:
        socket_path, base_url = parse_engine_url(url)
        limits = httpx2.Limits(
            max_connections=16, max_keepalive_connections=2, keepalive_expiry=IDLE_SECONDS
        )
        # retries: only failed connects are retried (nothing was sent); trust_env
        # off, so no proxy, .netrc or certificate setting from the environment
        # ever sees the token.
        transport = httpx2.HTTPTransport(uds=socket_path, retries=2, limits=limits,
                                         trust_env=False)
        if socket_path is not None:
            # The same pool, on a backend that closes a socket whose connect failed
            # (the stock one leaves it to the garbage collector).
            transport._pool = httpcore2.ConnectionPool(
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                uds=socket_path,
                retries=2,
                network_backend=_ClosingBackend(),
            )
        self._client = httpx2.Client(
            base_url=base_url,
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            timeout=httpx2.Timeout(call_timeout, connect=connect_timeout),
            headers={"user-agent": f"chit-edge/{__version__}", "accept": "application/json",
                     # Who this edge is, for `chit doctor` (docs/vital-signs.md).
                     _wire.EDGE_HEADER: _edge_label()},
        )
        self.url = url
        self._feed_failing = False

    def __repr__(self) -> str:
        return f"RemoteEngine(url={self.url!r})"

    def __enter__(self) -> RemoteEngine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    # --- the engine's interface -------------------------------------------------

    def offer(self, token: str, *, repo: str | None = None) -> OfferAnswer:
        """See :meth:`engine.service.Engine.offer`; never raises.

        ``repo`` travels only when given, so an engine that predates the field
        (and serves one repository) is still asked as before.
        """
        doc = self._post(_wire.OFFER_PATH, _with_repo({"token": token}, repo))
        if isinstance(doc, Refused):
            return doc
        try:
            return read_offer(doc)
        except AnswerError:
            return _UNREADABLE

    def invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        session: str,
        offered_catalog_hash: str | None = None,
        repo: str | None = None,
        approval: str | None = None,
    ) -> CallAnswer:
        """See :meth:`engine.service.Engine.invoke`; never raises.

        ``approval`` travels only when given (as ``repo``), so an engine that
        predates the field is still asked as before.
        """
        body: dict[str, Any] = {
            "token": token,
            "tool": tool,
            "arguments": arguments,
            "session": session,
            "offered_catalog_hash": offered_catalog_hash,
        }
        if approval is not None:
            body["approval"] = approval
        doc = self._post(_wire.INVOKE_PATH, _with_repo(body, repo))
        if isinstance(doc, Refused):
            return doc
        try:
            return read_call(doc)
        except AnswerError:
            return _UNREADABLE

    def warning(self, token: str, *, repo: str | None = None) -> str | None:
        """See :meth:`engine.service.Engine.warning`: ``POST /v1/warning``; never raises.

        Returns:
            The line, or ``None`` when there is none, or the engine cannot say
            (an engine that predates the endpoint answers ``404``).
        """
        return read_warning(self._post(_wire.WARNING_PATH, _with_repo({"token": token}, repo)))

    def wait_change(self, after: int, timeout: float) -> int:
        """See :meth:`engine.service.Engine.wait_change`: ``POST /v1/changes``; never raises.

        Args:
            after: The last feed position the caller saw (``-1``: answer at once).
            timeout: Seconds to wait at most (capped at ``LIMITS.change_wait_seconds``).

        Returns:
            The engine's newest feed position; ``after`` if it did not move, or
            if the engine could not be asked (then only after a pause of up to
            ``LIMITS.change_retry_seconds``, so a caller's loop never spins).
        """
        wait = min(max(0.0, timeout), LIMITS.change_wait_seconds)
        started = time.monotonic()
        try:
            doc = self._post(
                _wire.CHANGES_PATH, {"after": after, "timeout": wait},
                timeout=httpx2.Timeout(wait + CONNECT_TIMEOUT, connect=CONNECT_TIMEOUT),
            )
        except Exception:  # the client closed under a waiting thread, say
            doc = _UNREACHABLE
        if isinstance(doc, Refused):
            failure = doc.code
        else:
            position = doc.get("position")
            if doc.get("ok") is True and type(position) is int and position >= 0:
                self._feed_failing = False
                return position
            failure = "an answer off the API"
        if not self._feed_failing:  # said once per outage, not once a second
            logger.warning("the engine's change feed cannot be followed (%s); retrying", failure)
        self._feed_failing = True
        pause = min(LIMITS.change_retry_seconds, wait - (time.monotonic() - started))
        if pause > 0:
            time.sleep(pause)
        return after

    def health(self) -> Mapping[str, Any]:
        """``GET /v1/health``: ``{"ok": true, "api": ...}``, or the refusal; never raises."""
        return self._request("GET", _wire.HEALTH_PATH, None)

    def _post(
        self, path: str, body: dict[str, Any], *, timeout: httpx2.Timeout | None = None
    ) -> dict[str, Any] | Refused:
        try:
            content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError):
            return _NOT_JSON
        return self._request("POST", path, content, timeout=timeout)

    def _request(
        self,
        method: str,
        path: str,
        content: bytes | None,
        *,
        timeout: httpx2.Timeout | None = None,
    ) -> dict[str, Any] | Refused:
        """The answer's JSON object (status 200), or a refusal: the engine's, or the edge's own."""
        headers = {"content-type": "application/json"} if content is not None else {}
        headers.update(telemetry.trace_headers())  # {} unless --otel (docs/telemetry.md)
        quiet = path == _wire.CHANGES_PATH  # wait_change says it once per outage
        try:
            with self._client.stream(
                method, path, content=content, headers=headers,
                timeout=timeout if timeout is not None else httpx2.USE_CLIENT_DEFAULT,
            ) as response:
                raw = bytearray()
                for chunk in response.iter_bytes():
                    raw += chunk
                    if len(raw) > MAX_ANSWER_BYTES:
                        logger.error("the engine's answer exceeded %d bytes", MAX_ANSWER_BYTES)
                        return _UNREADABLE
                status = response.status_code
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            if not quiet:
                logger.warning("the engine at %s is unreachable", self.url)
            return _UNREACHABLE
        except httpx2.HTTPError as exc:
            # Never the exception's text in an answer; its class is enough here.
            if not quiet:
                logger.warning("the call to the engine failed (%s)", type(exc).__name__)
            cut_off = path == _wire.INVOKE_PATH  # it may have run: say so, never retry
            return _CUT_OFF if cut_off else _UNREACHABLE
        try:
            doc = _wire.loads_strict(bytes(raw))
        except _wire.WireError:
            if status == 503:  # uvicorn's own answer at its connection limit
                return _BUSY
            logger.error("the engine answered %d with a body that is not strict JSON", status)
            return _UNREADABLE
        if not isinstance(doc, dict):
            return _UNREADABLE
        if status != 200:
            try:
                return read_refusal(doc)  # a request the engine server refused
            except AnswerError:
                return _UNREADABLE
        return doc


def _edge_label() -> str:
    """``host/pid`` of this edge, in the ``chit-edge`` header (printable ASCII only)."""
    host = "".join(c for c in socket.gethostname() if "!" <= c <= "~")[:100] or "?"
    return f"{host}/{os.getpid()}"


def _with_repo(body: dict[str, Any], repo: str | None) -> dict[str, Any]:
    """``body`` with ``"repo"`` when a repository is named (docs/engine-api.md)."""
    return body if repo is None else {**body, "repo": repo}
