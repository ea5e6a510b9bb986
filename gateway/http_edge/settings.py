"""How ``chit mcp --http`` listens: :class:`HttpSettings` and the names it answers to.

The allowed ``Host`` and ``Origin`` values follow from the bound address, the
extra hosts and the public URL (docs/http.md, "DNS rebinding").
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.errors import ConfigurationError
from gateway import _oauth

__all__ = [
    "HttpSettings",
    "allowed_names",
    "authority",
    "check_authorization_server",
    "parse_listen_address",
    "url_host",
]


@dataclass(frozen=True)
class HttpSettings:
    """How ``chit mcp --http`` listens.

    Attributes:
        host: The address to bind: a loopback address (``127.0.0.1``, ``::1``) or
            ``localhost`` unless ``allow_non_loopback``.
        port: The TCP port; 0 picks a free one (printed at start).
        allow_non_loopback: Bind a non-loopback address. Plain HTTP carries every
            bearer token in clear: TLS termination belongs in front (docs/http.md).
        allowed_hosts: ``Host`` values accepted besides the bound address's
            (``name:port``), for a reverse proxy or a LAN name.
        public_url: The origin agents reach the edge at when a proxy is in front
            (``https://chit.example.com``); names the resource in the metadata
            and in ``WWW-Authenticate``, and its host is allowed.
        watch_interval: Seconds between two checks of every connected token's offer,
            besides those the engine's change feed wakes.
        session_idle_timeout: Seconds a 2025-11-25 session may stay idle before
            the SDK closes it.
        authorization_server: The issuer identifier of the authorization server
            that issues chit tokens for this resource: a ``chit engine serve``
            with token exchange (``POST /token``, docs/exchange.md) or whatever
            fronts it. When set, the RFC 9728 metadata lists it under
            ``authorization_servers`` (RFC 9728 section 2). It must be ``https``,
            or ``http`` with a loopback host, with no user information, query or
            fragment (:func:`gateway._oauth.check_issuer_url`); the edge
            refuses anything else with ``ConfigurationError``.
    """

    host: str = "127.0.0.1"
    port: int = 0
    allow_non_loopback: bool = False
    allowed_hosts: tuple[str, ...] = ()
    public_url: str | None = None
    watch_interval: float = 2.0
    session_idle_timeout: float = 1800.0
    authorization_server: str | None = None


def parse_listen_address(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6) for ``--http``.

    Raises:
        ValueError: If it is not of that form or the port is not 0-65535.
    """
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("--http takes HOST:PORT, for example 127.0.0.1:8765 or [::1]:8765")
    return host, int(port)


def authority(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url_host(settings: HttpSettings) -> str:
    """The address to bind and name in URLs (``localhost`` is ``127.0.0.1``)."""
    return "127.0.0.1" if settings.host == "localhost" else settings.host


def allowed_names(settings: HttpSettings, port: int) -> tuple[frozenset[str], frozenset[str]]:
    """The ``Host`` and ``Origin`` values the edge accepts, lowercase.

    Args:
        settings: The edge's settings.
        port: The port actually bound.

    Returns:
        ``(hosts, origins)``.

    Raises:
        ConfigurationError: If ``settings.public_url`` is not an https origin
            (http only on a loopback host).
    """
    hosts = {authority(settings.host, port)}
    if _oauth.is_loopback(settings.host):
        hosts |= {f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"}
    hosts |= set(settings.allowed_hosts)
    origins = {f"http://{h}" for h in hosts}
    if settings.public_url:
        # The same rule as the engine's --public-url: https, or http on a
        # loopback host only (bearer tokens cross it); an origin, no fragment.
        try:
            checked = _oauth.check_issuer_url(
                settings.public_url, option="--public-url", origin_only=True)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        public = urlsplit(checked)
        hosts.add(public.netloc)
        origins.add(f"{public.scheme}://{public.netloc}")
    return frozenset(h.lower() for h in hosts), frozenset(o.lower() for o in origins)


def check_authorization_server(settings: HttpSettings) -> None:
    """Refuse an ``authorization_server`` that is not an issuer URL.

    Raises:
        ConfigurationError: With the reason, naming ``--authorization-server``.
    """
    if settings.authorization_server is None:
        return
    try:
        _oauth.check_issuer_url(settings.authorization_server, option="--authorization-server")
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
