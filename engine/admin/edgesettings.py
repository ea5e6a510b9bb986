"""What an MCP edge takes from the home: its requestState keys and the approval page URL.

Under MCP 2026-07-28 an edge answers a call that waits for an approval with an
input-required result whose ``requestState`` it seals; every edge process on a
home must open what another sealed, so the keys are derived from the home's
root keys rather than made per process. ``[approvals] url`` in
``<home>/engine.toml`` is where a stdio edge sends a person to see an approval
(URL-mode elicitation, MCP 2025-11-25). docs/approvals.md, "MCP clients".
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engine.auth.rootkeys import Keyring
from engine.errors import ConfigurationError
from engine.state import ENGINE_TOML, read_engine_toml

__all__ = ["REQUEST_STATE_INFO", "RequestStateKeys", "approval_url_template", "request_state_keys"]

REQUEST_STATE_INFO = b"chit/mcp-request-state/1"
"""The HKDF ``info`` that separates requestState keys from every other use of a root key."""

_PLACEHOLDER = "{id}"
_MAX_TEMPLATE_CHARS = 2048


@dataclass(frozen=True)
class RequestStateKeys:
    """The keys an edge seals and opens ``requestState`` with; never in a repr.

    Attributes:
        keys: 32-byte keys, newest first: the first seals, every one opens.
    """

    keys: tuple[bytes, ...] = field(repr=False)

    def __repr__(self) -> str:
        return f"RequestStateKeys({len(self.keys)} keys)"


def request_state_keys(home: str | os.PathLike[str]) -> RequestStateKeys:
    """Derive the edge's requestState keys from the home's active root keys.

    Each key is HKDF-SHA256 (RFC 5869) of one active root key, no salt, info
    :data:`REQUEST_STATE_INFO`, 32 bytes; the newest root key's comes first. So
    every edge process on one home (or on homes sharing a keyring) opens what
    another sealed, a restart keeps outstanding states valid, and ``chit keys
    rotate``/``retire`` rotate these keys with the root keys. A derived key
    reveals nothing of the root key and cannot mint or verify tokens.

    Args:
        home: The chit home.

    Returns:
        The keys.

    Raises:
        ConfigurationError: If the keyring is missing, has no active key or a
            key file is unusable (as when the engine loads it).
    """
    derived = tuple(
        HKDF(algorithm=SHA256(), length=32, salt=None, info=REQUEST_STATE_INFO).derive(k.secret)
        for k in Keyring(home).active()
    )
    return RequestStateKeys(derived)


def approval_url_template(home: str | os.PathLike[str]) -> str | None:
    """``url`` of the ``[approvals]`` table of ``<home>/engine.toml``, checked.

    The template names where a person sees an approval: an ``https`` URL (or
    ``http`` on a loopback host) holding ``{id}`` once, in its path or query,
    which the edge replaces with the approval id (``apr_`` and 26 base32
    characters, safe in any URL part). No user information, no fragment.

    Args:
        home: The chit home (an edge's own home for ``chit mcp --engine``).

    Returns:
        The template, or ``None`` if ``engine.toml`` or its ``[approvals]``
        table or ``url`` is absent.

    Raises:
        ConfigurationError: If ``engine.toml`` is unusable, ``[approvals]``
            holds anything but ``url``, or the URL is not one described above.
    """
    path = Path(home) / ENGINE_TOML
    settings = read_engine_toml(path)
    if settings is None or "approvals" not in settings:
        return None
    table = settings["approvals"]
    if not isinstance(table, dict) or set(table) - {"url"}:
        raise ConfigurationError(f"{path}: [approvals] holds only url = \"...\"")
    url = table.get("url")
    if url is None:
        return None
    if not isinstance(url, str) or not _good_template(url):
        raise ConfigurationError(
            f"{path}: [approvals] url must be an https URL (http on loopback) holding "
            "{id} once, with no user, fragment or other braces"
        )
    return url


def _good_template(url: str) -> bool:
    if len(url) > _MAX_TEMPLATE_CHARS or url.count(_PLACEHOLDER) != 1:
        return False
    rest = url.replace(_PLACEHOLDER, "x")
    if "{" in rest or "}" in rest or re.search(r"[\s\x00-\x1f\x7f\"<>\\^`|]", rest):
        return False
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or parts.fragment:
        return False
    if _PLACEHOLDER in parts.netloc:
        return False
    host = parts.hostname or ""
    if parts.scheme == "https":
        return bool(host)
    return parts.scheme == "http" and _loopback(host)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
