"""The auditor's repository commands: verify provenance on lanes, draw the provenance graph.

``chit audit verify`` and ``chit audit graph`` call these with the keys the
auditor trusts (:func:`engine.admin.load_trusted_keys`). What is checked is in
docs/audit.md; the graph's nodes and edges in docs/audit.md §7.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine import git
from engine.audit import graph
from engine.audit.merged import verify_base
from engine.audit.verify import verify_repository

__all__ = ["provenance_graph", "render_graph", "verify_lanes"]


def verify_lanes(
    repo_path: str | os.PathLike[str],
    lanes: list[str] | None,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    base: str | None = None,
    merged: bool = False,
    since: str | None = None,
) -> dict[str, Any]:
    """Verify the commits on the given lanes or ranges, and what reached the base.

    Args:
        repo_path: Path of the git repository: the engine's, or a mirror
            clone of its remote (docs/audit.md, "Auditing from the remote").
        lanes: Each a lane (``agent/NAME``) or a range ``REV..LANE``; ``None``
            for every lane (:func:`engine.audit.verify.verify_repository`),
            or, with ``merged``, for none.
        public_keys: Trusted engine key id to Ed25519 public key.
        base: The base branch; default the one ``HEAD`` names.
        merged: Also audit the base's history: chit's commits that reached it
            by fast-forward, merge, squash or rebase
            (:func:`engine.audit.merged.verify_base`, docs/audit.md §9).
        since: With ``merged``, a revision whose history is left out
            (``since..base``); ``None``: the whole history.

    Returns:
        ``{"ok": bool, "lanes": [...], "commits": [{"commit", "lane",
        "catalog_hash", "ok", "findings": [...], "via", ...}], "findings":
        [{"commit", "check", "reason"}]}``, plus ``base`` with ``merged``;
        not ``ok`` when nothing was verified or ``refs/chit/*`` is missing.

    Raises:
        ConfigurationError: If ``repo_path`` is not a repository whose base
            branch has a commit.
    """
    on_lanes = None
    if lanes or not merged:
        on_lanes = verify_repository(repo_path, lanes, public_keys=public_keys, base=base)
    on_base = None
    if merged:
        on_base = verify_base(repo_path, public_keys=public_keys, base=base, since=since,
                              alone=not lanes)
    return _combine(on_lanes, on_base)


def _combine(lanes: dict[str, Any] | None, merged: dict[str, Any] | None) -> dict[str, Any]:
    """One report of a lane audit and a base audit (either may be absent).

    Lane commits get ``via: "lane"``; ``ok`` only if both are.
    """
    parts = [p for p in (lanes, merged) if p is not None]
    for c in (lanes or {}).get("commits", []):
        c.setdefault("via", "lane")
    out: dict[str, Any] = {
        "ok": all(p["ok"] for p in parts) and bool(parts),
        "lanes": [x for p in parts for x in p["lanes"]],
        "commits": [x for p in parts for x in p["commits"]],
        "findings": [x for p in parts for x in p["findings"]],
    }
    if merged is not None:
        out["base"] = merged["base"]
    return out


def provenance_graph(
    repo: git.Repository, handle: str, public_keys: Mapping[str, Ed25519PublicKey]
) -> tuple[dict[str, Any], int, bool]:
    """The whole provenance graph around ``handle``, from verified lane commits only.

    Args:
        repo: The repository (:func:`engine.admin.open_repository`).
        handle: A commit id (7 to 40 hex), a session id, or a token id (32 hex).
        public_keys: Trusted engine key id to Ed25519 public key.

    Returns:
        ``(graph, unverified, truncated)``: the graph (``{"nodes", "edges",
        "pruned"}``, :func:`engine.audit.graph.build_graph`), how many lane
        commits were left out for lack of verified provenance, and whether the
        walk stopped at ``LIMITS.graph_commits`` commits.

    Raises:
        RepositoryError: ``not_found`` if nothing matches the handle.
        InvalidRequestError: ``invalid_argument`` for an ambiguous commit prefix.
    """
    entries, unverified, truncated = graph.collect(repo, public_keys)
    return graph.build_graph(entries, handle), unverified, truncated


def render_graph(found: Mapping[str, Any], form: Literal["mermaid", "dot"]) -> str:
    """Render a graph from :func:`provenance_graph` as Mermaid or Graphviz DOT text.

    Args:
        found: The graph.
        form: ``"mermaid"`` (a flowchart) or ``"dot"``.

    Returns:
        The text, ending in a newline; untrusted labels are escaped.
    """
    return graph.to_mermaid(found) if form == "mermaid" else graph.to_dot(found)
