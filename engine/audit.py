"""Audit: check that every commit on agent lanes carries verifiable provenance.

Needs no secret key, only the repository. For each commit reachable from a lane
and not from ``main``:

- ``trailers``: the chit trailers are present, once each, and well formed;
- ``lane``: ``Chit-Agent`` names the lane's agent;
- ``encoding``: ``Chit-Catalog-Encoding`` is an encoding this auditor knows;
- ``catalog_stored``: the catalog bytes are stored under ``refs/chit/catalogs``;
- ``catalog_hash``: those bytes hash (SHA-256) to ``Chit-Catalog-Hash``;
- ``catalog_decodes``: they decode under ``chit-det/1`` into a
  ``chit-catalog/1`` document that names its encoding and lists tools sorted by
  name, and re-encode to the same bytes.

Signed provenance records (who, under which delegation chain and policy) extend
this in a later version (docs/threat-model.md).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

import pygit2

from engine import cbor, vcs
from engine.catalog import CATALOG_ENCODING
from engine.errors import ChitError, ProfileError
from engine.service import CATALOG_STORE_REF
from engine.token import is_agent_name

__all__ = ["REQUIRED_TRAILERS", "CommitReport", "Finding", "verify_repository"]

REQUIRED_TRAILERS = (
    "Chit-Agent",
    "Chit-Session",
    "Chit-Token-Id",
    "Chit-Catalog-Hash",
    "Chit-Catalog-Encoding",
)
_HASH = re.compile(r"^sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class Finding:
    """One failed check: which commit, which check, why."""

    commit: str
    check: str
    reason: str


@dataclass
class CommitReport:
    """The outcome for one commit."""

    commit: str
    lane: str
    catalog_hash: str | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True iff no check failed."""
        return not self.findings


def verify_repository(
    repo_path: str | os.PathLike[str], lanes: list[str] | None = None
) -> dict[str, Any]:
    """Verify the commits on the given lanes (default: every ``agent/*`` lane).

    Args:
        repo_path: Path of the git repository.
        lanes: Lane names (``agent/NAME``, ``refs/heads/agent/NAME`` or just
            ``NAME``); ``None`` for every lane, and then any other ref under
            ``refs/heads/agent/`` is a finding too.

    Returns:
        ``{"ok": bool, "commits": [{"commit", "lane", "catalog_hash", "ok",
        "findings": [{"commit", "check", "reason"}]}], "lanes": [...]}``.

    Raises:
        ConfigurationError: If ``repo_path`` is not a repository with ``main``.
    """
    repo = vcs.Repository(repo_path)
    missing: list[Finding] = []
    existing = repo.lanes()
    if lanes is None:
        agents = [a for a in existing if _is_agent_name(a)]
        foreign = [f"refs/heads/agent/{a}" for a in existing if not _is_agent_name(a)]
        for ref in sorted(foreign + repo.foreign_lane_refs()):
            missing.append(Finding("-", "lane", f"{ref!r} is not a lane chit can make"))
    else:
        agents = [lane.removeprefix("refs/heads/").removeprefix("agent/") for lane in lanes]
    reports: list[CommitReport] = []
    for agent in agents:
        if agent not in existing or not _is_agent_name(agent):
            missing.append(Finding("-", "lane", f"no lane agent/{agent!r} chit could make"))
            continue
        try:
            commits = repo.lane_commits(agent)
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            missing.append(Finding("-", "lane", f"agent/{agent} does not point at a commit"))
            continue
        for commit in commits:
            reports.append(_verify_commit(repo, agent, commit))
    ok = not missing and all(r.ok for r in reports)
    return {
        "ok": ok,
        "lanes": [f"agent/{a}" for a in agents],
        "commits": [
            {
                "commit": r.commit,
                "lane": r.lane,
                "catalog_hash": r.catalog_hash,
                "ok": r.ok,
                "findings": [f.__dict__ for f in r.findings],
            }
            for r in reports
        ],
        "findings": [f.__dict__ for f in missing]
        + [f.__dict__ for r in reports for f in r.findings],
    }


def _is_agent_name(name: str) -> bool:
    return is_agent_name(name)


def _trailer_counts(message: str) -> dict[str, int]:
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    counts: dict[str, int] = {}
    if len(paragraphs) < 2:
        return counts
    for line in paragraphs[-1].splitlines():
        key = line.split(":", 1)[0].strip()
        if ":" in line:
            counts[key] = counts.get(key, 0) + 1
    return counts


def _verify_commit(repo: vcs.Repository, agent: str, commit: Any) -> CommitReport:
    cid = str(commit.id)
    report = CommitReport(commit=cid, lane=f"agent/{agent}", catalog_hash=None)

    def fail(check: str, reason: str) -> CommitReport:
        report.findings.append(Finding(cid, check, reason))
        return report

    trailers = vcs.commit_trailers(commit)
    counts = _trailer_counts(commit.message)
    missing = [k for k in REQUIRED_TRAILERS if k not in trailers]
    if missing:
        return fail("trailers", "missing trailers: " + ", ".join(missing))
    repeated = [k for k in REQUIRED_TRAILERS if counts.get(k, 0) > 1]
    if repeated:
        return fail("trailers", "repeated trailers: " + ", ".join(repeated))
    if trailers["Chit-Agent"] != agent:
        fail("lane", f"Chit-Agent {trailers['Chit-Agent']!r} does not own lane agent/{agent}")
    if trailers["Chit-Catalog-Encoding"] != CATALOG_ENCODING:
        return fail("encoding", f"unknown catalog encoding {trailers['Chit-Catalog-Encoding']!r}")
    match = _HASH.match(trailers["Chit-Catalog-Hash"])
    if not match:
        return fail("trailers", "Chit-Catalog-Hash is not sha256:<64 hex>")
    report.catalog_hash = trailers["Chit-Catalog-Hash"]
    data = repo.get_blob_from_store(CATALOG_STORE_REF, match.group(1))
    if data is None:
        return fail("catalog_stored", "the catalog bytes are not in refs/chit/catalogs")
    if hashlib.sha256(data).hexdigest() != match.group(1):
        return fail("catalog_hash", "the stored catalog bytes do not hash to Chit-Catalog-Hash")
    try:
        doc = cbor.decode(data, max_size=len(data) or 1, max_depth=cbor.MAX_DEPTH_DEFAULT)
    except ProfileError as exc:
        return fail("catalog_decodes", f"catalog is not chit-det/1: {exc.reason}")
    if not isinstance(doc, dict) or doc.get("encoding") != CATALOG_ENCODING:
        return fail("catalog_decodes", "catalog does not name chit-catalog/1")
    tools = doc.get("tools")
    entries = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    if not isinstance(tools, list) or len(entries) != len(tools):
        return fail("catalog_decodes", "catalog tools are not a list of maps")
    names = [t.get("name") for t in entries]
    if names != sorted(n for n in names if isinstance(n, str)) or len(set(names)) != len(names):
        return fail("catalog_decodes", "catalog tools are not sorted by unique name")
    return report
