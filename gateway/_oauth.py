"""OAuth pieces the edges share: issuer URLs and the authorization-server metadata.

``chit engine serve`` is the authorization server of a chit deployment: its
``POST /token`` exchanges an identity provider's JWT for a chit token (RFC 8693,
docs/exchange.md) and it describes itself at
``/.well-known/oauth-authorization-server`` (RFC 8414). ``chit mcp --http``
names it in its protected-resource metadata (RFC 9728 ``authorization_servers``).
Both take URLs from the operator; :func:`check_issuer_url` is the one check.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "GRANT_TYPE",
    "JWT_TOKEN_TYPE",
    "METADATA_PATH",
    "TOKEN_PATH",
    "authorization_server_metadata",
    "check_issuer_url",
    "is_loopback",
]

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105 - a type name
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a type name
TOKEN_PATH = "/token"  # noqa: S105 - a path
METADATA_PATH = "/.well-known/oauth-authorization-server"
MAX_URL_CHARS = 2048


def is_loopback(host: str) -> bool:
    """True iff ``host`` (a name or an address, no brackets) is ``localhost`` or loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_issuer_url(value: str, *, option: str, origin_only: bool = False) -> str:
    """Check an authorization server's issuer identifier (RFC 8414 section 2).

    An issuer is an ``https`` URL with no query and no fragment; chit also
    accepts ``http`` when the host is a loopback address (``127.0.0.0/8``,
    ``::1``, ``localhost``), where nothing crosses a network. User information
    (``user:pass@``) is refused: it would be published in metadata documents.

    Args:
        value: The URL as the operator gave it.
        option: The command-line option it came from, for the message
            (``--public-url``).
        origin_only: Refuse a path (``https://NAME[:PORT]`` only); a lone
            trailing ``/`` is dropped.

    Returns:
        The URL, unchanged but for the trailing ``/`` that ``origin_only`` drops
        (issuer identifiers are compared as exact strings, RFC 8414 section 3.3).

    Raises:
        ValueError: If the URL is not of that form; the message names ``option``.
    """
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_URL_CHARS
        or not all("!" <= c <= "~" for c in value)
    ):
        raise ValueError(f"{option} takes a URL of printable ASCII without spaces")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a port out of range
    except ValueError:
        raise ValueError(f"{option}: not a URL") from None
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise ValueError(f"{option} takes https://NAME[:PORT]... (http only on loopback)")
    if parts.scheme == "http" and not is_loopback(host):
        raise ValueError(
            f"{option}: http is accepted only for a loopback host (127.0.0.1, [::1], "
            "localhost); use https"
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(f"{option}: a URL with user information (user@) is refused")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValueError(f"{option}: an issuer URL has no query and no fragment (RFC 8414)")
    if port == 0:
        raise ValueError(f"{option}: port 0 is not a port clients can reach")
    scheme_and_host = value.split("/", 3)[:3]
    if "/".join(scheme_and_host) != "/".join(scheme_and_host).lower():
        # Issuers are compared as exact strings (RFC 8414 section 3.3): publish
        # the form clients will compare against, lowercase scheme and host.
        raise ValueError(f"{option}: write the scheme and host in lowercase")
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        raise ValueError(f"{option}: a path with '.' or '..' segments is refused")
    if origin_only:
        if parts.path not in ("", "/"):
            raise ValueError(f"{option} takes an origin: http(s)://NAME[:PORT], no path")
        return value.removesuffix("/")
    return value


def authorization_server_metadata(issuer: str) -> dict[str, Any]:
    """The RFC 8414 metadata of a chit engine serving ``POST /token``.

    - ``issuer``: ``issuer`` (an origin, :func:`check_issuer_url`);
    - ``token_endpoint``: ``issuer + "/token"``;
    - ``grant_types_supported``: token exchange only (RFC 8693 section 2.1);
    - ``token_endpoint_auth_methods_supported``: ``["none"]`` (RFC 7591
      section 2): the endpoint authenticates no client; the subject JWT is the
      credential, and the policy's issuers decide what it becomes.

    There is no authorization endpoint (no grant type here uses one), so
    ``authorization_endpoint`` is absent (RFC 8414 section 2 allows it) and the
    supported ``response_types`` are none: RFC 8414 section 3.2 says a claim
    with zero elements is omitted, so ``response_types_supported`` is too.
    There is no ``jwks_uri``: chit tokens are not JWTs and are checked only by
    the engine that minted them. No ``scopes_supported``: the policy's
    mappings, not scopes, decide what a token may do.

    Args:
        issuer: The issuer identifier, already checked.

    Returns:
        The JSON-ready document.
    """
    return {
        "issuer": issuer,
        "token_endpoint": issuer + TOKEN_PATH,
        "grant_types_supported": [GRANT_TYPE],
        "token_endpoint_auth_methods_supported": ["none"],
    }
