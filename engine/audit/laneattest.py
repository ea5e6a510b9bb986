"""A lane's summary attestation: its range, each commit's attestation digest, the verdict.

The statement's subject is the lane's head; its predicate
(:data:`~engine.audit.intoto.LANE_PREDICATE_TYPE`) is what the audit of the
lane found, failing or not (docs/attestations.md §3, §6).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine import git
from engine.audit import intoto
from engine.audit.export import parse_lane
from engine.audit.verify import verify_repository
from engine.auth.signkeys import SigningKey
from engine.errors import RepositoryError
from engine.limits import LIMITS

__all__ = ["attest_lane", "lane_statement"]


def lane_statement(
    lane: str,
    head: str,
    base: Mapping[str, Any],
    report: Mapping[str, Any],
    time: int,
) -> dict[str, Any]:
    """The in-toto Statement v1 summarising a lane's audit.

    Args:
        lane: ``agent/NAME``.
        head: The lane's head commit, 40 lowercase hex (the subject).
        base: ``{"ref": "refs/heads/<base>", "commit": <merge base hex or None>}``.
        report: :func:`engine.audit.verify.verify_repository` of that lane.
        time: When the audit ran, unix seconds.

    Returns:
        ``{"_type", "subject": [{"name": lane, "digest": {"gitCommit": head}}],
        "predicateType": LANE_PREDICATE_TYPE, "predicate": {"lane", "base",
        "head", "commits": [{"commit", "attestation"}] oldest first, "verdict":
        {"ok", "checked", "findings": [{"commit", "check", "reason"}]}, "time"}}``.
    """
    commits = [{"commit": c["commit"], "attestation": c["attestation"]}
               for c in reversed(report["commits"])]
    return {
        "_type": intoto.STATEMENT_TYPE,
        "subject": [{"name": lane, "digest": {"gitCommit": head}}],
        "predicateType": intoto.LANE_PREDICATE_TYPE,
        "predicate": {
            "lane": lane,
            "base": {"ref": base["ref"], "commit": base["commit"]},
            "head": head,
            "commits": commits,
            "verdict": {
                "ok": bool(report["ok"]),
                "checked": len(commits),
                "findings": [{"commit": f["commit"], "check": f["check"],
                              "reason": f["reason"]} for f in report["findings"]],
            },
            "time": time,
        },
    }


def attest_lane(
    repo_path: str | os.PathLike[str],
    lane: str,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    key: SigningKey,
    time: int,
    base: str | None = None,
) -> dict[str, Any]:
    """Audit a lane and sign the summary of what the audit found.

    A lane with findings is attested as failing, not refused.

    Args:
        repo_path: The repository (the engine's, or a mirror clone).
        lane: ``agent/NAME`` (or ``refs/heads/agent/NAME``, or ``NAME``).
        public_keys: Trusted key id to Ed25519 public key, for the audit.
        key: The key that signs the summary (the engine's active one).
        time: Unix seconds, recorded as the predicate's ``time``.
        base: The base branch; default the one ``HEAD`` names.

    Returns:
        ``{"ok": verdict, "lane", "head", "envelope": <the DSSE envelope's JSON
        line, str>, "digest": "sha256:<hex>" of it, "statement": ...}``.

    Raises:
        ValueError: If ``lane`` is not a lane's name, or the lane holds more
            than ``LIMITS.export_commits`` commits.
        RepositoryError: ``not_found`` if there is no such lane; ``conflict``
            if the lane moved while it was audited.
        ConfigurationError: If ``repo_path`` is not a repository whose base
            branch has a commit.
    """
    agent = parse_lane(lane)
    name = f"agent/{agent}"
    repo = git.Repository(repo_path, base=base)
    try:
        if not repo.lane_exists(agent):
            raise RepositoryError("not_found", f"no lane {name} in this repository")
        head = repo.resolve(name)
        if len(repo.lane_commits(agent)) > LIMITS.export_commits:
            raise ValueError(f"the lane holds more than {LIMITS.export_commits} commits")
        fork = repo.merge_base(head.id, repo.base_head().id)
        merge_base = None if fork is None else str(fork)
        base_ref = "refs/heads/" + repo.base
        report = verify_repository(repo_path, [name], public_keys=public_keys, base=base)
        newest = report["commits"][0]["commit"] if report["commits"] else None
        if repo.resolve(name).id != head.id or newest not in (None, str(head.id)):
            raise RepositoryError("conflict", f"{name} moved while it was audited; run again")
    finally:
        repo.close()
    statement = lane_statement(name, str(head.id), {"ref": base_ref, "commit": merge_base},
                               report, time)
    line = intoto.dumps(intoto.sign_statement(statement, key))
    return {
        "ok": statement["predicate"]["verdict"]["ok"],
        "lane": name,
        "head": str(head.id),
        "envelope": line.decode("utf-8"),
        "digest": intoto.envelope_digest(line),
        "statement": statement,
    }
