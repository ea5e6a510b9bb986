"""Audit of merged work: which of chit's commits reached the base branch, and how.

The base's history is walked (``REV..base`` or all of it) and each commit is
classified: a chit commit brought by a fast-forward or a merge commit (every
check of :class:`~engine.audit.verify.Auditor` runs on it), a squash of a lane
(recognised by tree or by a trailer naming the lane; the lane's own commits, or
their records, are verified), a rebased copy (per-commit provenance lost), or
a commit that is not chit's. docs/audit.md §9 says what each means.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pygit2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine import git, progress
from engine.audit import intoto, provenance
from engine.audit.verify import FETCH_HINT, Auditor, CommitReport, Finding, ref_problems
from engine.auth import cbor
from engine.auth.agents import is_agent_name
from engine.catalog.declarations import CATALOG_STORE_REF
from engine.errors import ChitError, ProfileError
from engine.limits import LIMITS

__all__ = ["commit_entry", "verify_base"]

_NAMES = re.compile(
    r"^[ \t>*-]*(?:Chit-Lane:[ \t]*agent/(?P<lane>\S+)|Chit-Agent:[ \t]*(?P<agent>\S+)"
    r"|Assisted-by:[ \t]*chit agent (?P<assisted>\S+))[ \t]*$",
    re.MULTILINE,
)
"""Lines naming a lane: chit's ``Chit-Lane`` trailer, or lines forges copy into squashes."""

Change = dict[str, tuple[str, int] | None]


@dataclass(frozen=True)
class _Record:
    """A stored record, read without verifying it: a hint where to look, never a verdict."""

    agent: str
    commit: str
    envelope: bytes
    made: Mapping[str, Any]
    """The record's ``commit`` map as stored (empty if it does not decode)."""

    @property
    def tree(self) -> str | None:
        tree = self.made.get("tree")
        return tree if isinstance(tree, str) else None

    @property
    def parent(self) -> str | None:
        parents = self.made.get("parents")
        first = parents[0] if isinstance(parents, list) and parents else None
        return first if isinstance(first, str) else None


def _peek(agent: str, commit: str, envelope: bytes) -> _Record:
    made: Any = None
    try:
        env = cbor.decode(envelope, max_size=LIMITS.provenance_record_bytes)
        body = env.get("record") if isinstance(env, dict) else None
        if isinstance(body, bytes):
            rec = cbor.decode(body, max_size=LIMITS.provenance_record_bytes)
            made = rec.get("commit") if isinstance(rec, dict) else None
    except ProfileError:
        made = None
    return _Record(agent, commit, envelope, made if isinstance(made, dict) else {})


class _Index:
    """Every agent's records by (agent, commit), tree and envelope hash."""

    def __init__(self, repo: git.Repository) -> None:
        self.by_commit: dict[tuple[str, str], _Record] = {}
        self.by_tree: dict[str, list[_Record]] = {}
        self.by_hash: dict[str, _Record] = {}
        self.truncated = False
        for agent in repo.provenance_agents():
            for commit, envelope in repo.provenance_entries(agent):
                if len(self.by_commit) >= LIMITS.merged_records:
                    self.truncated = True
                    return
                record = _peek(agent, commit, envelope)
                self.by_commit[(agent, commit)] = record
                if record.tree is not None:
                    self.by_tree.setdefault(record.tree, []).append(record)
                self.by_hash.setdefault(provenance.envelope_hash(envelope), record)


def commit_entry(report: CommitReport, **via: Any) -> dict[str, Any]:
    """A commit's report as in ``verify_repository``'s ``commits``, plus how it arrived."""
    return report.as_dict() | via


def _recorded_change(record: Mapping[str, Any]) -> Change:
    out: Change = {}
    for e in record["change"]:
        if (e.get("old"), e.get("old_mode")) == (e.get("new"), e.get("new_mode")):
            continue
        out[e["path"]] = None if e.get("new") is None else (e["new"], int(e["new_mode"]))
    return out


def _differs(one: Change, two: Change) -> list[str]:
    return sorted(p for p in set(one) | set(two) if one.get(p, False) != two.get(p, False))


def _author(sig: pygit2.Signature) -> dict[str, Any]:
    return {"name": sig.name, "email": sig.email, "time": int(sig.time), "offset": int(sig.offset)}


class _BaseAudit:
    """One walk of the base's history; fills the report's parts."""

    def __init__(self, repo: git.Repository, keys: Mapping[str, Ed25519PublicKey]) -> None:
        self.repo = repo
        self.keys = keys
        self.auditor = Auditor(repo, keys)
        self.commits: list[dict[str, Any]] = []
        self.findings: list[Finding] = []
        self.merges: dict[str, list[str]] = {}
        self.squashes: list[dict[str, Any]] = []
        self.rebased: list[dict[str, Any]] = []
        self.not_chit: list[str] = []
        self._seen: set[str] = set()
        self._index: _Index | None = None
        self._missing_refs: set[str] = set()

    @property
    def index(self) -> _Index:
        if self._index is None:
            self._index = _Index(self.repo)
            if self._index.truncated:
                self.findings.append(Finding("-", "range", f"more than {LIMITS.merged_records} "
                                             "provenance records: squashes and rebased copies "
                                             "past them are not recognised"))
        return self._index

    def _verify(self, agent: str, commit: pygit2.Commit, **via: Any) -> None:
        cid = str(commit.id)
        if cid in self._seen:
            return
        self._seen.add(cid)
        ref = git.Repository.provenance_ref(agent)
        if (is_agent_name(agent) and ref not in self._missing_refs
                and self.repo.store_head(ref) is None):
            self._missing_refs.add(ref)
            self.findings.append(Finding("-", "refs", f"{ref} is missing, so no commit of "
                                         f"agent/{agent} can be checked: " + FETCH_HINT))
        self.commits.append(commit_entry(self.auditor.verify_commit(agent, commit), **via))

    def _attested(self, report: CommitReport, record: dict[str, Any], envelope: bytes) -> None:
        """A gone commit's attestation, if its note is kept, still attests its record."""
        try:
            note = self.repo.attestation_note(report.commit)
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            note = None
        if note is None:
            return
        try:
            report.attestation = intoto.check_commit(
                note, report.commit, record, provenance.envelope_hash(envelope), self.keys)
        except intoto.AttestationError as exc:
            report.findings.append(Finding(report.commit, "attestation", exc.reason))

    def _verify_record(self, record: _Record, **via: Any) -> dict[str, Any] | None:
        """Check one record whose commit is gone; ``None`` if it does not verify."""
        if record.commit in self._seen:
            return None
        self._seen.add(record.commit)
        report = CommitReport(record.commit, f"agent/{record.agent}", None)
        opened: dict[str, Any] | None = None
        try:
            opened = provenance.open_envelope(record.envelope, self.keys)
        except provenance.ProvenanceError as exc:
            report.findings.append(Finding(record.commit, exc.check, exc.reason))
        if opened is not None:
            report.catalog_hash = opened["catalog"]["hash"]
            if opened["lane"] != report.lane:
                report.findings.append(Finding(record.commit, "lane", f"the record is for "
                                               f"{opened['lane']!r}, stored for {report.lane}"))
            self._attested(report, opened, record.envelope)
        self.commits.append(commit_entry(report, record_only=True, **via))
        return opened

    def classify(self, item: git.BaseCommit, inside: set[str]) -> None:
        commit = item.commit
        cid = str(commit.id)
        if len(commit.parent_ids) > 1:
            self.merges.setdefault(cid, [])
            return
        via: dict[str, Any] = ({"via": "fast-forward"} if item.merge is None
                               else {"via": "merge", "merge": item.merge})
        trailers = git.commit_trailers(commit)
        agent = trailers.get("Chit-Agent")
        claimed = agent is not None or provenance.PROVENANCE_TRAILER in trailers
        own = None
        if agent is not None and is_agent_name(agent):
            try:
                own = self.repo.provenance_record(agent, cid)
            except (ChitError, pygit2.GitError, KeyError, ValueError):
                own = None
        if own is not None and agent is not None:
            self._verify(agent, commit, **via)
            if item.merge is not None:
                self.merges.setdefault(item.merge, []).append(cid)
            return
        matches = [r for r in self.index.by_tree.get(str(commit.tree_id), [])
                   if r.commit not in inside]
        named = sorted({m.group("lane") or m.group("agent") or m.group("assisted")
                        for m in _NAMES.finditer(commit.message)})
        original = self.index.by_hash.get(trailers.get(provenance.PROVENANCE_TRAILER, ""))
        if original is not None and self._is_copy(commit, original):
            self._rebased(commit, original)
            return
        if matches:
            pick = min(matches, key=lambda r: (r.agent not in named, r.agent, r.commit))
            self._squash(commit, pick.agent, pick.commit, "tree")
            return
        if original is not None:
            self._squash(commit, original.agent, original.commit, "trailer")
            return
        if claimed:
            # A name chit could not have written is never echoed as a lane.
            valid = agent is not None and is_agent_name(agent)
            self._verify(agent if valid and agent is not None else "-", commit, **via)
            return
        lanes = [n for n in named if is_agent_name(n)]
        for name in lanes:
            self._squash(commit, name, self._lane_tip(name), "trailer")
        if not lanes:
            self.not_chit.append(cid)

    def _is_copy(self, commit: pygit2.Commit, original: _Record) -> bool:
        """Same signed message and author as the original: a rebase or cherry-pick."""
        try:
            signed, _ = provenance.split_message(commit.raw_message.decode("utf-8"))
        except (provenance.ProvenanceError, UnicodeDecodeError):
            return False
        return bool(original.made.get("message") == provenance.message_digest(signed)
                    and original.made.get("author") == _author(commit.author))

    def _lane_tip(self, agent: str) -> str | None:
        """Where a lane named by a trailer ended: its head, else the record no other follows."""
        if agent in self.repo.lanes():
            try:
                return str(self.repo.resolve(f"agent/{agent}").id)
            except (ChitError, pygit2.GitError, KeyError, ValueError):
                return None
        mine = [r for (a, _), r in self.index.by_commit.items() if a == agent]
        followed = {r.parent for r in mine}
        tips = [r.commit for r in mine if r.commit not in followed]
        return tips[0] if len(tips) == 1 else None

    def _squash(self, commit: pygit2.Commit, agent: str, up_to: str | None, matched: str) -> None:
        cid = str(commit.id)
        entry: dict[str, Any] = {"commit": cid, "lane": f"agent/{agent}", "up_to": up_to,
                                 "matched": matched, "content": "unknown", "differs": [],
                                 "verified": "none"}
        self.squashes.append(entry)
        via = {"via": "squash", "squash": cid}
        if matched == "tree":
            entry["content"] = "same tree"
        lane_head = None if up_to is None else self.repo.find_commit(up_to)
        record = None if up_to is None else self.index.by_commit.get((agent, up_to))
        if lane_head is None and record is None:
            ref = git.Repository.provenance_ref(agent)
            self.findings.append(Finding(cid, "squash", f"names agent/{agent}, but neither "
                                         f"the lane nor a record in {ref} tells which commits "
                                         "it squashed: " + FETCH_HINT))
            return
        if lane_head is None:
            entry["verified"] = "records"
            count = 0
            while record is not None and count < LIMITS.merged_commits:
                self._verify_record(record, **via)
                count += 1
                before = record.parent
                record = None if before is None else self.index.by_commit.get((agent, before))
            return
        entry["verified"] = "commits"
        found, truncated = self.repo.walk_between(lane_head.id, list(commit.parent_ids),
                                                  LIMITS.merged_commits)
        if truncated:
            self.findings.append(Finding(cid, "range", f"more than {LIMITS.merged_commits} "
                                         "lane commits behind this squash"))
        for lane_commit in found:
            self._verify(agent, lane_commit, **via)
        if matched == "tree":
            return
        base = commit.parent_ids[0] if commit.parent_ids else None
        fork = None if base is None else self.repo.merge_base(lane_head.id, base)
        differs = _differs(self.repo.change_of(fork, lane_head.id),
                           self.repo.change_of(base, commit.id))
        entry["content"] = "differs" if differs else "same change"
        entry["differs"] = differs[:20]
        if differs:
            # A trailer is text anyone can write: a commit naming a lane whose change it does
            # not bring must not pass as that lane's work reaching the base.
            self.findings.append(Finding(cid, "squash", f"names agent/{agent} but does not "
                                         "bring its change; differs at: "
                                         + ", ".join(differs[:5])))

    def _rebased(self, commit: pygit2.Commit, original: _Record) -> None:
        cid = str(commit.id)
        entry: dict[str, Any] = {"commit": cid, "lane": f"agent/{original.agent}",
                                 "original": original.commit, "change": "unknown"}
        self.rebased.append(entry)
        via = {"via": "rebase", "copy": cid}
        found = self.repo.find_commit(original.commit)
        try:
            record = provenance.open_envelope(original.envelope, self.keys)
        except provenance.ProvenanceError:
            record = None
        if found is not None:
            self._verify(original.agent, found, **via)
        else:
            self._verify_record(original, **via)
        if record is not None:
            parent = commit.parent_ids[0] if commit.parent_ids else None
            mine = self.repo.change_of(parent, commit.id)
            entry["change"] = "differs" if _differs(mine, _recorded_change(record)) else "same"


def verify_base(
    repo_path: str | os.PathLike[str],
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    base: str | None = None,
    since: str | None = None,
    alone: bool = True,
) -> dict[str, Any]:
    """Audit what of chit's reached the base branch (``since..base``, default all of it).

    Args:
        repo_path: Path of the git repository (the engine's, or a mirror clone).
        public_keys: Trusted engine key id to Ed25519 public key.
        base: The base branch; default the branch ``HEAD`` names.
        since: A branch name or hex commit id whose history is left out.
        alone: Whether this is the whole audit: then finding nothing of chit's
            on the base is a ``range`` finding (nothing verified is never
            reported as verified); beside a lane audit, that one says it.

    Returns:
        The shape of :func:`~engine.audit.verify.verify_repository` (``lanes``
        empty), each commit with ``via`` (``fast-forward``, ``merge`` with
        ``merge``, ``squash`` with ``squash``, ``rebase`` with ``copy``), plus
        ``base``: ``{"branch", "since", "walked", "merges": [{"commit",
        "commits"}], "squashes": [...], "rebased": [...], "not_chit": [...]}``
        (docs/audit.md §9).

    Raises:
        ConfigurationError: If ``repo_path`` is not a repository whose base
            branch has a commit.
    """
    repo = git.Repository(repo_path, base=base)
    audit = _BaseAudit(repo, public_keys)
    problems = [Finding("-", "refs", r) for r in ref_problems(repo_path, repo.base)]
    try:
        history, truncated = repo.base_history(since, LIMITS.merged_commits)
    except ChitError:
        history, truncated = [], False
        problems.append(Finding("-", "range", f"range start {since!r} is not a commit"))
    if truncated:
        problems.append(Finding("-", "range", f"{repo.base} holds more than "
                                f"{LIMITS.merged_commits} commits in this range; only the newest "
                                "were audited: give --since REV"))
    inside = {str(item.commit.id) for item in history}
    what = "auditing the base branch"
    for done, item in enumerate(history):
        progress.report(done, len(history), what)
        audit.classify(item, inside)
    if history:
        progress.report(len(history), len(history), what)
    if audit.commits and repo.store_head(CATALOG_STORE_REF) is None:
        problems.append(Finding("-", "refs", f"{CATALOG_STORE_REF} is missing: " + FETCH_HINT))
    if alone and not (audit.commits or audit.squashes or audit.rebased or problems):
        problems.append(Finding("-", "range", f"no chit commit reached {repo.base} in this "
                                f"range ({len(history)} commits), so nothing was verified"))
    findings = problems + audit.findings
    commit_findings = [f for c in audit.commits for f in c["findings"]]
    return {
        "ok": not findings and not commit_findings,
        "lanes": [],
        "commits": audit.commits,
        "findings": [f.__dict__ for f in findings] + commit_findings,
        "base": {
            "branch": repo.base,
            "since": since,
            "walked": len(history),
            "merges": [{"commit": m, "commits": c} for m, c in audit.merges.items()],
            "squashes": audit.squashes,
            "rebased": audit.rebased,
            "not_chit": audit.not_chit,
        },
    }

