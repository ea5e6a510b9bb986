"""MCP over streamable HTTP (``chit mcp --http HOST:PORT``), on the official SDK.

One process serves many agents, each request carrying its own chit token as a
bearer header; the SDK's session manager speaks both protocol eras on ``/mcp``.
In front of it: DNS-rebinding protection (``guard``), the token and session
binding (``gate``, ``connections``), per-request listings (``handlers``) and
per-principal ``tools/list_changed`` (``watch``); ``edge`` wires them into one
app and ``run`` serves it; ``workers`` runs it as several processes on one
port and ``peers`` routes requests between them. The contract: docs/http.md.
"""

from gateway.http_edge.edge import MCP_PATH, HttpEdge
from gateway.http_edge.gate import MAX_SESSIONS_PER_IDENTITY, SESSION_TOKEN_MISMATCH_STATUS
from gateway.http_edge.run import serve_http
from gateway.http_edge.settings import HttpSettings, parse_listen_address

__all__ = [
    "MAX_SESSIONS_PER_IDENTITY",
    "MCP_PATH",
    "SESSION_TOKEN_MISMATCH_STATUS",
    "HttpEdge",
    "HttpSettings",
    "parse_listen_address",
    "serve_http",
]
