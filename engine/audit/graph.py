"""The provenance graph: tokens, delegations, sessions, approvals, commits and files.

Built from verified provenance records only: a commit that fails a commit check
of ``chit audit verify`` is counted as ``unverified`` and left out. The same
graph serves the ``provenance_graph`` tool (pruned to the caller's scope) and
``chit audit graph`` (whole; also as Mermaid or Graphviz). Its nodes, edges and
formats: docs/audit.md §7.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pygit2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from engine import git
from engine.audit.verify import Auditor
from engine.auth import discharge as dis
from engine.errors import ChitError, InvalidRequestError, RepositoryError
from engine.limits import LIMITS

__all__ = ["Entry", "build_graph", "collect", "to_dot", "to_mermaid"]

_HEX_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_TOKEN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class Entry:
    """One commit with its verified record."""

    agent: str
    commit: str
    summary: str
    record: Mapping[str, Any]


_VERDICTS: dict[tuple[str, str, str, str], Mapping[str, Any] | None] = {}


def collect(
    repo: git.Repository, public_keys: Mapping[str, Ed25519PublicKey]
) -> tuple[list[Entry], int, bool]:
    """Every lane commit that passes the audit's commit checks, newest first per lane.

    A commit joins only if :class:`engine.audit.verify.Auditor` finds nothing wrong
    with it: its record exists, hashes to its trailer, verifies under a known
    key, describes exactly this commit (raw object included), agrees with its
    trailers, and its chain narrows. Verdicts are remembered per commit id,
    envelope hash and key set (all three immutable facts), so repeated calls
    re-read records but do not re-verify them.

    Args:
        repo: The repository.
        public_keys: Trusted engine key id to Ed25519 public key.

    Returns:
        ``(entries, unverified, truncated)``: the commits that verified, how many
        lane commits were left out because they did not, and whether the walk
        stopped at ``LIMITS.graph_commits`` commits.
    """
    auditor = Auditor(repo, public_keys)
    keyset = ",".join(sorted(f"{k}:{_raw(v).hex()}" for k, v in public_keys.items()))
    entries: list[Entry] = []
    unverified = 0
    for agent in repo.lanes():
        try:
            commits = repo.lane_commits(agent)
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            continue  # a lane that is not a direct reference to a commit: the audit reports it
        for commit in commits:
            if len(entries) + unverified >= LIMITS.graph_commits:
                return entries, unverified, True
            record = _verdict(auditor, repo, keyset, agent, commit)
            if record is None:
                unverified += 1
                continue
            summary = commit.message.split("\n", 1)[0][: LIMITS.graph_summary_chars]
            entries.append(Entry(agent, str(commit.id), summary, record))
    return entries, unverified, False


def _raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _verdict(
    auditor: Any, repo: git.Repository, keyset: str, agent: str, commit: pygit2.Commit
) -> Mapping[str, Any] | None:
    cid = str(commit.id)
    try:
        envelope = repo.provenance_record(agent, cid)
    except (ChitError, pygit2.GitError, KeyError, ValueError):
        return None
    if envelope is None:
        return None
    key = (keyset, agent, cid, hashlib.sha256(envelope).hexdigest())
    if key not in _VERDICTS:
        report = auditor.verify_commit(agent, commit)
        commit_checks = {f.check for f in report.findings} - _CATALOG_CHECKS
        if len(_VERDICTS) >= LIMITS.graph_verdict_cache_entries:
            _VERDICTS.clear()
        _VERDICTS[key] = report.record if not commit_checks else None
    return _VERDICTS[key]


# Whether the stored catalog is intact says nothing about who made the commit.
_CATALOG_CHECKS = frozenset(
    {"encoding", "catalog_stored", "catalog_hash", "catalog_decodes", "catalog_scope"}
)


def _select(entries: list[Entry], handle: str) -> list[Entry]:
    """The entries a handle names: a commit, a session, or a token id (with its descendants)."""
    if _TOKEN_ID.match(handle):
        by_token = [e for e in entries if any(h["id"] == handle for h in e.record["chain"])]
        if by_token:
            return by_token
    if _HEX_COMMIT.match(handle):
        by_commit = [e for e in entries if e.commit.startswith(handle)]
        if len(by_commit) > 1:
            raise InvalidRequestError("invalid_argument", "the commit id prefix is ambiguous")
        if by_commit:
            return by_commit
    by_session = [e for e in entries if e.record["session"] == handle]
    if by_session:
        return by_session
    raise _not_found()


def _not_found() -> RepositoryError:
    return RepositoryError(
        "not_found", "no commit, session or token id with verified provenance matches the handle"
    )


def build_graph(
    entries: list[Entry],
    handle: str,
    visible: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """The derivation graph around ``handle``.

    Args:
        entries: Verified entries (:func:`collect`).
        handle: A commit id (7 to 40 hex), a session id, or a token id (32 hex:
            the token's commits and those of every token delegated from it).
        visible: The caller's path filter; ``None`` shows everything. A file the
            caller may not see is left out; a commit that changed no visible
            file is left out with its session and tokens unless something
            visible uses them. If nothing is left, the answer is ``not_found``,
            as for a handle that names nothing.

    Returns:
        ``{"nodes": [{"id", "kind", "label"}], "edges": [{"source", "target",
        "kind"}], "pruned": int}``, nodes and edges sorted, ``pruned`` counting
        the commits and files left out.

    Raises:
        RepositoryError: ``not_found`` if nothing (visible) matches the handle.
        InvalidRequestError: ``invalid_argument`` for an ambiguous commit prefix.
    """
    selected = _select(entries, handle)
    nodes: dict[str, dict[str, str]] = {}
    edges: set[tuple[str, str, str]] = set()
    pruned = 0
    shown_commits = set()
    for entry in selected:
        record = entry.record
        files = [c["path"] for c in record["change"]]
        seen = [p for p in files if visible is None or visible(p)]
        pruned += len(files) - len(seen)
        if not seen:
            pruned += 1
            continue
        commit_id = f"commit:{entry.commit}"
        shown_commits.add(entry.commit)
        nodes[commit_id] = _node(commit_id, "commit", f"{entry.commit[:12]} {entry.summary}")
        session_id = f"session:{record['session']}"
        nodes[session_id] = _node(session_id, "session", str(record["session"]))
        edges.add((session_id, commit_id, "made"))
        previous = None
        for hop in record["chain"]:
            token_id = f"token:{hop['id']}"
            nodes[token_id] = _node(token_id, "token", str(hop["agent"]))
            if previous is not None:
                edges.add((previous, token_id, "delegated"))
            previous = token_id
        if previous is not None:
            edges.add((previous, session_id, "opened"))
        if "approval" in record:  # verified by the audit before the entry joined
            body = dis.decode_body(dis.decode_discharge(record["approval"]["discharge"]).body)
            approval_id = f"approval:{body.approval_id}"
            when = datetime.fromtimestamp(body.decided_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            nodes[approval_id] = _node(approval_id, "approval",
                                       f"{body.approval_id} by {body.operator} at {when}")
            edges.add((approval_id, commit_id, "approved"))
        for path in seen:
            file_id = f"file:{path}"
            nodes[file_id] = _node(file_id, "file", path)
            edges.add((commit_id, file_id, "changed"))
    if not shown_commits:
        # Nothing the caller may see: the same answer as an unknown handle, so
        # the graph is no oracle for what exists outside the caller's scope.
        raise _not_found()
    for entry in selected:
        if entry.commit in shown_commits:
            for parent in entry.record["commit"]["parents"]:
                if parent in shown_commits:
                    edges.add((f"commit:{entry.commit}", f"commit:{parent}", "parent"))
    return {
        "nodes": [nodes[k] for k in sorted(nodes)],
        "edges": [{"source": a, "target": b, "kind": k} for a, b, k in sorted(edges)],
        "pruned": pruned,
    }


def _node(node_id: str, kind: str, label: str) -> dict[str, str]:
    return {"id": node_id, "kind": kind, "label": label}


def _ids(nodes: Iterable[Mapping[str, str]]) -> dict[str, str]:
    return {n["id"]: f"n{i}" for i, n in enumerate(nodes)}


_SHAPES = {
    "token": ("([", "])"),
    "session": ("[/", "/]"),
    "commit": ("[", "]"),
    "file": ("[(", ")]"),
    "approval": ("{{", "}}"),
}


def to_mermaid(graph: Mapping[str, Any]) -> str:
    """Render a graph as a Mermaid ``flowchart`` (labels escaped as HTML entities)."""
    ids = _ids(graph["nodes"])
    lines = ["flowchart LR"]
    for node in graph["nodes"]:
        left, right = _SHAPES.get(node["kind"], ("[", "]"))
        label = _mermaid_text(f"{node['kind']}: {node['label']}")
        lines.append(f'    {ids[node["id"]]}{left}"{label}"{right}')
    for edge in graph["edges"]:
        lines.append(f"    {ids[edge['source']]} -->|{edge['kind']}| {ids[edge['target']]}")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    out = []
    for char in text:
        if char.isalnum() or char in " ._-/:":
            out.append(char)
        else:
            out.append(f"#{ord(char)};")
    return "".join(out)


def to_dot(graph: Mapping[str, Any]) -> str:
    """Render a graph in Graphviz DOT (labels quoted and escaped)."""
    shapes = {"token": "ellipse", "session": "parallelogram", "commit": "box", "file": "note",
              "approval": "hexagon"}
    ids = _ids(graph["nodes"])
    lines = ["digraph provenance {", "    rankdir=LR;"]
    for node in graph["nodes"]:
        label = _dot_text(f"{node['kind']}: {node['label']}")
        shape = shapes.get(node["kind"], "box")
        lines.append(f'    {ids[node["id"]]} [label="{label}", shape={shape}];')
    for edge in graph["edges"]:
        kind = _dot_text(edge["kind"])
        lines.append(f'    {ids[edge["source"]]} -> {ids[edge["target"]]} [label="{kind}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\\\x{ord(char):02x}")
    return "".join(out)
