"""``chit mcp --http`` configuration: addresses, allowed hosts, the RFC 9728 document."""

from __future__ import annotations

from typing import Any

import pytest

from engine.errors import ConfigurationError
from gateway.http_edge import HttpEdge, HttpSettings, parse_listen_address, serve_http
from gateway.http_edge.settings import allowed_names


class _NoEngine:
    def offer(self, token: str, *, repo: str | None = None) -> dict[str, Any]:
        raise AssertionError("not called")

    def invoke(self, token: str, tool: str, arguments: dict[str, Any] | None, *,
               session: str, offered_catalog_hash: str | None = None,
               repo: str | None = None) -> dict[str, Any]:
        raise AssertionError("not called")


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:8765", ("127.0.0.1", 8765)),
    ("localhost:0", ("localhost", 0)),
    ("[::1]:9000", ("::1", 9000)),
])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", ":80", "host:port", "127.0.0.1:70000", "[::1]"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen_address(text)


def test_loopback_edge_allows_its_own_names_only() -> None:
    edge = HttpEdge(_NoEngine(), HttpSettings("127.0.0.1", 0), port=8765)
    hosts, origins = allowed_names(HttpSettings("127.0.0.1", 0), 8765)
    assert hosts == {"127.0.0.1:8765", "localhost:8765", "[::1]:8765"}
    assert origins == {"http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"}
    assert edge.resource == "http://127.0.0.1:8765/mcp"
    assert edge.metadata_url == (
        "http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp")
    assert edge.metadata() == {
        "resource": "http://127.0.0.1:8765/mcp",
        "bearer_methods_supported": ["header"],
        "resource_name": "chit",
    }


def test_behind_a_proxy_the_public_url_names_the_resource() -> None:
    settings = HttpSettings(
        "10.0.0.5", 0, allow_non_loopback=True, allowed_hosts=("chit.lan:8765",),
        public_url="https://chit.example.com", authorization_server="https://chit.example.com",
    )
    edge = HttpEdge(_NoEngine(), settings, port=8765)
    hosts, origins = allowed_names(settings, 8765)
    assert hosts == {"10.0.0.5:8765", "chit.lan:8765", "chit.example.com"}
    assert "https://chit.example.com" in origins and "http://localhost:8765" not in origins
    assert edge.resource == "https://chit.example.com/mcp"
    assert edge.metadata()["authorization_servers"] == ["https://chit.example.com"]


def test_non_loopback_needs_the_unsafe_flag() -> None:
    with pytest.raises(ConfigurationError, match="TLS"):
        serve_http(_NoEngine(), HttpSettings("0.0.0.0", 0))
    with pytest.raises(ConfigurationError, match="public-url"):
        HttpEdge(_NoEngine(), HttpSettings(public_url="ftp://x"), port=1)


@pytest.mark.parametrize("url", [
    "http://chit.example.com",  # bearer tokens in the clear across a network
    "https://chit.example.com#frag", "https://chit.example.com/mcp", "https://u@chit.example.com",
    "https://chit.example.com?x=1",
])
def test_the_edges_public_url_is_an_https_origin(url: str) -> None:
    with pytest.raises(ConfigurationError, match="public-url"):
        HttpEdge(_NoEngine(), HttpSettings(public_url=url), port=1)
    loopback = HttpEdge(_NoEngine(), HttpSettings(public_url="http://127.0.0.1:9000"), port=1)
    assert loopback.resource == "http://127.0.0.1:9000/mcp"


@pytest.mark.parametrize("url", [
    "http://auth.example.com", "https://u@auth.example.com", "https://auth.example.com?x",
    "auth.example.com", "http://127.0.0.1:8700/../x", "https://auth.example.com/a/./b",
    "HTTP://127.0.0.1:8700", "https://Auth.Example.com",
])
def test_the_authorization_server_must_be_an_issuer_url(url: str) -> None:
    """Threat: agents sent to fetch tokens over plain HTTP across a network, or elsewhere."""
    with pytest.raises(ConfigurationError, match="--authorization-server"):
        HttpEdge(_NoEngine(), HttpSettings(authorization_server=url), port=1)
    with pytest.raises(ConfigurationError, match="--authorization-server"):
        serve_http(_NoEngine(), HttpSettings(authorization_server=url))  # before binding
    edge = HttpEdge(_NoEngine(), HttpSettings(authorization_server="http://[::1]:8700"), port=1)
    assert edge.metadata()["authorization_servers"] == ["http://[::1]:8700"]
