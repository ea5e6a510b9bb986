"""Audit: verify the signed provenance of every commit on agent lanes.

Needs no secret key: the repository and the engine's public keys (``chit keys
export-public``, format ``chit-engine-keys/1``). For each commit reachable from a
lane and not from the base branch the checks below run; each failure is a
:class:`Finding` naming the commit, the check and the reason (docs/audit.md
explains the threat each check answers):

- ``refs``: repository-wide, no ``refs/replace/*``, no ``info/grafts`` (git
  honours them, libgit2 and so this audit do not) and the base branch is a
  direct reference; each audited lane has its ``refs/chit/provenance/<agent>``
  and ``refs/chit/catalogs`` exists (a clone that did not fetch ``refs/chit/*``
  fails here, saying so);
- ``range``: the lanes or ranges hold at least one commit: nothing verified is
  never reported as verified;
- ``trailers``: the chit trailers are present, once each, well formed, and the
  message ends with ``Chit-Provenance: sha256:<hex>``;
- ``record_missing``: ``refs/chit/provenance/<agent>`` holds a record for the commit;
- ``record_hash``: the stored envelope hashes (SHA-256) to the trailer;
- ``record_decodes``: envelope and record are ``chit-det/1`` in the
  ``chit-provenance/1`` shape;
- ``signature``: Ed25519 signature by a known engine key;
- ``attestation``: the commit's note under ``refs/notes/chit`` holds a DSSE
  envelope, signed by a known key, whose in-toto statement attests this commit
  and exactly its record (required once the commit has ``Assisted-by``);
- ``record_commit``: the commit object has only the headers chit writes and a
  UTF-8 message, and the recorded tree, parents, author, committer and message
  digest are the commit's own;
- ``record_trailers``: agent, session, token id and catalog in the record equal
  the trailers;
- ``lane``: the lane is the last agent of the chain, and the trailer agrees;
- ``chain``: every delegation hop narrows the one before, and the last hop is
  the recorded token and holds ``commit``;
- ``change``: the recorded paths and blob ids are exactly what the commit
  changed, and every changed path is in the last hop's path scope;
- ``encoding``, ``catalog_stored``, ``catalog_hash``, ``catalog_decodes``: the
  catalog bytes are stored under ``refs/chit/catalogs``, hash to the recorded
  hash and decode as a ``chit-catalog/1`` document;
- ``approval``: a ``chit-provenance/2`` record's approval verifies (the
  operator's signature, the engine's countersignature), approved exactly this
  commit's request (tool, session, token, tree, message) and was in force when
  the commit was made (docs/approvals.md);
- ``catalog_scope``: every tool in the catalog is one the recorded operations
  (and delegation flag) unlock: the agent was shown nothing wider. A tool chit
  declares is judged by chit's own requirements for it, whatever the stored
  catalog says it requires.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine import git, progress
from engine.audit import intoto, provenance
from engine.audit.approval import ApprovalFacts, ApprovalProblem, check_approval
from engine.auth import cbor
from engine.auth.agents import is_agent_name
from engine.catalog.declarations import (
    CATALOG_ENCODING,
    CATALOG_STORE_REF,
    DELEGATION_FLAG,
    tool_by_name,
)
from engine.errors import ChitError, ProfileError
from engine.limits import LIMITS
from engine.paths import in_scope

__all__ = [
    "REQUIRED_TRAILERS",
    "Auditor",
    "CommitReport",
    "Finding",
    "ref_problems",
    "verify_repository",
]

REQUIRED_TRAILERS = (
    "Chit-Agent",
    "Chit-Session",
    "Chit-Token-Id",
    "Chit-Catalog-Hash",
    "Chit-Catalog-Encoding",
    "Chit-Provenance",
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
    record: Mapping[str, Any] | None = field(default=None, repr=False)
    approval: ApprovalFacts | None = None
    attestation: str | None = None
    """``sha256:<hex>`` of the commit's attestation that verified, if any."""

    @property
    def ok(self) -> bool:
        """True iff no check failed."""
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        """The report's JSON form (docs/audit.md §4).

        Returns:
            ``{"commit", "lane", "catalog_hash", "attestation", "ok",
            "findings"}``, and ``"approval"`` for a commit made under one.
        """
        entry: dict[str, Any] = {
            "commit": self.commit,
            "lane": self.lane,
            "catalog_hash": self.catalog_hash,
            "attestation": self.attestation,
            "ok": self.ok,
            "findings": [f.__dict__ for f in self.findings],
        }
        if self.approval is not None:
            a = self.approval
            entry["approval"] = {"id": a.approval_id, "operator": a.operator,
                                 "operator_key": a.operator_key, "decided_at": a.decided_at,
                                 "expires_at": a.expires_at}
        return entry


FETCH_HINT = (
    "audit a mirror clone of the remote (git clone --mirror URL), or fetch chit's refs "
    "into this clone: git fetch origin 'refs/heads/agent/*:refs/heads/agent/*' "
    "'refs/chit/*:refs/chit/*' 'refs/notes/chit:refs/notes/chit'"
)
"""What a finding about missing lanes or ``refs/chit/*`` tells the auditor to do."""


def verify_repository(
    repo_path: str | os.PathLike[str],
    lanes: list[str] | None = None,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    base: str | None = None,
) -> dict[str, Any]:
    """Verify the commits on the given lanes or ranges (default: every lane).

    Args:
        repo_path: Path of the git repository (a mirror clone of the remote,
            or the engine's own).
        lanes: Each a lane (``agent/NAME``, ``refs/heads/agent/NAME`` or just
            ``NAME``) or a range ``REV..LANE`` (the lane's commits not reachable
            from ``REV``, a branch name or hex commit id); ``None`` for every
            lane, and then any other ref under ``refs/heads/agent/`` is a
            finding too.
        public_keys: Trusted engine key id to Ed25519 public key.
        base: The base branch lanes are compared with; default the branch
            the repository's ``HEAD`` names.

    Returns:
        ``{"ok": bool, "lanes": [...], "commits": [{"commit", "lane",
        "catalog_hash", "ok", "findings": [...]}], "findings": [{"commit",
        "check", "reason"}]}``. ``ok`` is false when no commit was verified
        (a ``range`` finding says why) or chit's refs are missing (``refs``).

    Raises:
        ConfigurationError: If ``repo_path`` is not a repository whose base
            branch has a commit.
    """
    repo = git.Repository(repo_path, base=base)
    auditor = Auditor(repo, public_keys)
    missing: list[Finding] = [
        Finding("-", "refs", reason) for reason in ref_problems(repo_path, repo.base)
    ]
    existing = repo.lanes()
    wanted: list[tuple[str, str | None]] = []
    if lanes is None:
        wanted = [(a, None) for a in existing if is_agent_name(a)]
        foreign = [f"refs/heads/agent/{a}" for a in existing if not is_agent_name(a)]
        for ref in sorted(foreign + repo.foreign_lane_refs()):
            missing.append(Finding("-", "lane", f"{ref!r} is not a lane chit can make"))
    else:
        for spec in lanes:
            since, _, lane = spec.rpartition("..") if ".." in spec else (None, "", spec)
            agent = lane.removeprefix("refs/heads/").removeprefix("agent/")
            wanted.append((agent, since))
    reports: list[CommitReport] = []
    for agent, since in wanted:
        if agent not in existing or not is_agent_name(agent):
            missing.append(Finding("-", "lane", f"no lane agent/{agent!r} chit could make"))
            continue
        try:
            commits = repo.lane_commits(agent, since)
        except ChitError:
            reason = (f"agent/{agent} does not point at a commit" if since is None
                      else f"range start {since!r} is not a commit")
            missing.append(Finding("-", "lane", reason))
            continue
        except (pygit2.GitError, KeyError, ValueError):
            missing.append(Finding("-", "lane", f"agent/{agent} does not point at a commit"))
            continue
        if commits and repo.store_head(git.Repository.provenance_ref(agent)) is None:
            missing.append(Finding("-", "refs", f"{git.Repository.provenance_ref(agent)} is "
                                   f"missing, so no commit of agent/{agent} can be checked: "
                                   + FETCH_HINT))
        what = f"verifying agent/{agent}"
        for done, commit in enumerate(commits):
            progress.report(done, len(commits), what)
            reports.append(auditor.verify_commit(agent, commit))
        if commits:
            progress.report(len(commits), len(commits), what)
    if reports and repo.store_head(CATALOG_STORE_REF) is None:
        missing.append(Finding("-", "refs", f"{CATALOG_STORE_REF} is missing: " + FETCH_HINT))
    unattested = any(f.check == "attestation" and f.reason.startswith("no attestation")
                     for r in reports for f in r.findings)
    if unattested and repo.store_head(git.NOTES_REF) is None:
        missing.append(Finding("-", "refs", f"{git.NOTES_REF} is missing: " + FETCH_HINT))
    if not reports and not any(f.check == "lane" for f in missing):
        missing.append(Finding("-", "range", _nothing_verified(lanes, existing)))
    ok = not missing and all(r.ok for r in reports)
    return {
        "ok": ok,
        "lanes": [f"agent/{a}" for a, _ in wanted],
        "commits": [r.as_dict() for r in reports],
        "findings": [f.__dict__ for f in missing]
        + [f.__dict__ for r in reports for f in r.findings],
    }


def _nothing_verified(lanes: list[str] | None, existing: list[str]) -> str:
    """Why no commit was checked, and what to do about it."""
    if lanes is None and not existing:
        return ("no lane (refs/heads/agent/*) in this repository, so nothing was verified; "
                "a plain clone keeps the remote's lanes under refs/remotes/: " + FETCH_HINT)
    return ("the lanes or ranges given hold no chit commit (nothing beyond the base branch "
            "or the range's start), so nothing was verified")


def ref_problems(repo_path: str | os.PathLike[str], base: str) -> list[str]:
    """What in the repository makes git show other content than the audit reads.

    libgit2 (so this audit) ignores ``refs/replace/*`` and ``info/grafts``; git
    itself honours them, so ``git show`` and ``git merge`` of a verified lane
    would use replaced commits. A symbolic base branch could hide a lane's
    commits from the walk. Each is reported, never silently followed.
    """
    handle = pygit2.Repository(os.fspath(repo_path))
    problems = []
    for name in sorted(handle.references):
        if name.startswith("refs/replace/"):
            problems.append(f"{name}: replace refs make git show other objects than were audited")
    common = git.common_dir(handle.path)
    if os.path.lexists(os.path.join(common, "info", "grafts")):
        problems.append("info/grafts rewrites history for git but not for this audit")
    name = "refs/heads/" + base
    found = handle.references.get(name)
    if found is not None and not isinstance(found.target, pygit2.Oid):
        problems.append(f"{name} is a symbolic reference (to {found.target!r})")
    return problems


_RAW_HEADER = re.compile(
    rb"tree [0-9a-f]{40}\nparent [0-9a-f]{40}\nauthor [^\n]*\ncommitter [^\n]*\n\n"
)


def _raw_message(repo: git.Repository, commit: pygit2.Commit) -> str | None:
    """The commit's message from its raw object, if chit could have written it.

    That is: the object has only the headers chit writes (tree, one parent,
    author, committer) and its message is UTF-8. pygit2 decodes messages
    leniently and honours an ``encoding`` header, and extra headers
    (``gpgsig``, ``mergetag``) change the commit id without changing anything a
    record describes; so the audit reads the raw bytes.
    """
    kind, raw = repo.read_raw(commit.id)
    match = _RAW_HEADER.match(raw)
    if kind != pygit2.enums.ObjectType.COMMIT or match is None:
        return None
    try:
        return raw[match.end():].decode("utf-8")
    except UnicodeDecodeError:
        return None


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


def _requires(tool: Mapping[str, Any]) -> set[str]:
    """What a catalog entry needs: its declared requirements and chit's own.

    A stored catalog cannot lower the requirements of a tool chit declares.
    """
    known = tool_by_name(str(tool.get("name")))
    return set(tool.get("requires") or ()) | (set(known.requires) if known else set())


def _file_at(tree: pygit2.Tree, path: str) -> tuple[int, str] | None:
    """``(mode, blob id hex)`` of a file in a tree, or ``None``."""
    try:
        entry = tree[path]
    except (KeyError, ValueError, pygit2.GitError):
        return None
    if entry.type_str != "blob":
        return None
    return int(entry.filemode), str(entry.id)


def _signature(sig: pygit2.Signature) -> dict[str, Any]:
    return {"name": sig.name, "email": sig.email, "time": int(sig.time), "offset": int(sig.offset)}


class Auditor:
    """Checks one commit at a time; remembers catalogs already checked.

    Args:
        repo: The repository.
        public_keys: Trusted engine key id to Ed25519 public key.
    """

    def __init__(self, repo: git.Repository, public_keys: Mapping[str, Ed25519PublicKey]) -> None:
        self.repo = repo
        self.public_keys = public_keys
        self._catalogs: dict[str, tuple[str, str] | list[dict[str, Any]]] = {}

    def verify_commit(self, agent: str, commit: pygit2.Commit) -> CommitReport:
        """Run every check on one lane commit (module docstring).

        Args:
            agent: The lane's agent.
            commit: A commit of the lane: on ``agent/<agent>``, or merged into the
                base with its record (engine/audit/merged.py).

        Returns:
            The report; ``record`` holds the verified record once the signature
            verified, even if later checks failed.
        """
        cid = str(commit.id)
        report = CommitReport(commit=cid, lane=f"agent/{agent}", catalog_hash=None)

        def fail(check: str, reason: str) -> CommitReport:
            report.findings.append(Finding(cid, check, reason))
            return report

        message = _raw_message(self.repo, commit)
        if message is None:
            return fail("record_commit", "the commit object has headers or text chit never "
                        "writes (gpgsig, encoding, mergetag, extra parents, non-UTF-8)")
        trailers = git.commit_trailers(commit)
        counts = _trailer_counts(message)
        absent = [k for k in REQUIRED_TRAILERS if k not in trailers]
        if absent:
            return fail("trailers", "missing trailers: " + ", ".join(absent))
        repeated = [k for k in (*REQUIRED_TRAILERS, provenance.ASSISTED_TRAILER)
                    if counts.get(k, 0) > 1]
        if repeated:
            return fail("trailers", "repeated trailers: " + ", ".join(repeated))
        # Commits since attestations began say who assisted; they must be attested.
        attested = counts.get(provenance.ASSISTED_TRAILER, 0) == 1
        if attested and trailers.get(provenance.ASSISTED_TRAILER) != provenance.assisted_by(
            trailers["Chit-Agent"]
        ):
            fail("trailers", "Assisted-by does not name the Chit-Agent")
        try:
            signed_part, record_hash = provenance.split_message(message)
        except provenance.ProvenanceError as exc:
            return fail(exc.check, exc.reason)
        if trailers["Chit-Agent"] != agent:
            fail("lane", f"Chit-Agent {trailers['Chit-Agent']!r} does not own lane agent/{agent}")

        try:
            envelope = self.repo.provenance_record(agent, cid)
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            return fail("record_missing", f"{git.Repository.provenance_ref(agent)} is not a "
                        "direct reference to a commit")
        if envelope is None:
            return fail("record_missing", f"no record under {git.Repository.provenance_ref(agent)}")
        if provenance.envelope_hash(envelope) != record_hash:
            fail("record_hash", "the stored record does not hash to Chit-Provenance")
        try:
            record = provenance.open_envelope(envelope, self.public_keys)
        except provenance.ProvenanceError as exc:
            return fail(exc.check, exc.reason)
        report.record = record
        self._check_attestation(report, record, record_hash, required=attested, fail=fail)

        recorded = record["commit"]
        actual = {
            "tree": str(commit.tree_id),
            "parents": [str(p) for p in commit.parent_ids],
            "author": _signature(commit.author),
            "committer": _signature(commit.committer),
            "message": provenance.message_digest(signed_part),
        }
        differs = [k for k in ("tree", "parents", "author", "committer", "message")
                   if recorded[k] != actual[k]]
        if differs:
            fail("record_commit", "the record describes another commit: " + ", ".join(differs))
        pairs = (
            ("Chit-Agent", record["agent"]),
            ("Chit-Session", record["session"]),
            ("Chit-Token-Id", record["token_id"]),
            ("Chit-Catalog-Hash", record["catalog"]["hash"]),
            ("Chit-Catalog-Encoding", record["catalog"]["encoding"]),
        )
        wrong = [k for k, v in pairs if trailers[k] != v]
        if wrong:
            fail("record_trailers", "trailers disagree with the record: " + ", ".join(wrong))
        if record["lane"] != f"agent/{agent}":
            fail("lane", f"the record is for {record['lane']!r}, found on agent/{agent}")
        try:
            provenance.check_chain(record)
        except provenance.ProvenanceError as exc:
            fail(exc.check, exc.reason)
        last = record["chain"][-1]
        if last["id"] != record["token_id"]:
            fail("chain", "the chain's last hop is not the recorded token")
        if "commit" not in last["ops"]:
            fail("chain", "the chain's last hop does not hold commit")
        self._check_change(commit, record, fail)
        if record["v"] == provenance.RECORD_VERSION_APPROVED:
            try:
                report.approval = check_approval(
                    record, signed_part, self.public_keys, self._blob,
                    lambda path: _file_at(commit.tree, path),
                )
            except ApprovalProblem as exc:
                fail("approval", exc.reason)

        report.catalog_hash = record["catalog"]["hash"]
        if record["catalog"]["encoding"] != CATALOG_ENCODING:
            return fail("encoding", f"unknown catalog encoding {record['catalog']['encoding']!r}")
        tools = self._catalog(record["catalog"]["hash"])
        if isinstance(tools, tuple):
            return fail(*tools)
        held = set(record["chain"][-1]["ops"])
        if record["chain"][-1]["delegable"]:
            held.add(DELEGATION_FLAG)
        wider = sorted(str(t.get("name")) for t in tools if not _requires(t) <= held)
        if wider:
            fail("catalog_scope", "catalog offers tools the recorded operations do not unlock: "
                 + ", ".join(wider))
        return report

    def _check_attestation(
        self, report: CommitReport, record: Mapping[str, Any], record_hash: str, *,
        required: bool, fail: Any,
    ) -> None:
        """The ``attestation`` check: the commit's note attests its record (docs/audit.md)."""
        try:
            note = self.repo.attestation_note(report.commit)
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            note = None
        if note is None:
            if required:
                fail("attestation", f"no attestation of this commit under {git.NOTES_REF}: "
                     + FETCH_HINT)
            return
        try:
            report.attestation = intoto.check_commit(
                note, report.commit, record, record_hash, self.public_keys)
        except intoto.AttestationError as exc:
            fail("attestation", exc.reason)

    def _blob(self, blob_id: str) -> bytes | None:
        try:
            kind, data = self.repo.read_raw(pygit2.Oid(hex=blob_id))
        except (ValueError, KeyError, pygit2.GitError):
            return None
        return data if kind == pygit2.enums.ObjectType.BLOB else None

    def _check_change(self, commit: pygit2.Commit, record: Mapping[str, Any], fail: Any) -> None:
        if len(commit.parents) != 1:
            fail("change", "a chit commit has exactly one parent")
            return
        diff = commit.parents[0].tree.diff_to_tree(commit.tree)
        actual: dict[str, dict[str, Any]] = {}
        zero = "0" * 40
        for delta in diff.deltas:
            for side, f in (("old", delta.old_file), ("new", delta.new_file)):
                if str(f.id) != zero:
                    entry = actual.setdefault(f.path, {"path": f.path})
                    entry[side] = str(f.id)
                    entry[f"{side}_mode"] = int(f.mode)
        scope = record["chain"][-1]["paths"]
        outside = sorted(p for p in actual if not scope or not all(in_scope(p, g) for g in scope))
        if outside:
            fail("change", "changed paths outside the recorded scope: " + ", ".join(outside[:5]))
        recorded = {e["path"]: dict(e) for e in record["change"]}
        # Paths staged but left as they were (written back unchanged) are not changes.
        recorded = {p: e for p, e in recorded.items()
                    if (e.get("old"), e.get("old_mode")) != (e.get("new"), e.get("new_mode"))}
        if recorded != actual:
            extra = sorted(set(actual) ^ set(recorded)) or sorted(
                p for p in actual if actual[p] != recorded.get(p)
            )
            fail("change", "recorded change differs from the commit at: " + ", ".join(extra[:5]))

    def _catalog(self, catalog_hash: str) -> tuple[str, str] | list[dict[str, Any]]:
        if catalog_hash not in self._catalogs:
            self._catalogs[catalog_hash] = self._load_catalog(catalog_hash)
        return self._catalogs[catalog_hash]

    def _load_catalog(self, catalog_hash: str) -> tuple[str, str] | list[dict[str, Any]]:
        match = _HASH.match(catalog_hash)
        if not match:
            return ("record_decodes", "catalog hash is not sha256:<64 hex>")
        try:
            data = self.repo.get_blob_from_store(CATALOG_STORE_REF, match.group(1))
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            return ("catalog_stored", "refs/chit/catalogs is not a direct reference to a commit")
        if data is None:
            return ("catalog_stored", "the catalog bytes are not in refs/chit/catalogs")
        if hashlib.sha256(data).hexdigest() != match.group(1):
            return ("catalog_hash", "the stored catalog bytes do not hash to the recorded hash")
        try:
            doc = cbor.decode(
                data, max_size=len(data) or 1, max_depth=LIMITS.cbor_default_depth_levels
            )
        except ProfileError as exc:
            return ("catalog_decodes", f"catalog is not chit-det/1: {exc.reason}")
        if not isinstance(doc, dict) or doc.get("encoding") != CATALOG_ENCODING:
            return ("catalog_decodes", "catalog does not name chit-catalog/1")
        tools = doc.get("tools")
        entries = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        if not isinstance(tools, list) or len(entries) != len(tools):
            return ("catalog_decodes", "catalog tools are not a list of maps")
        names = [t.get("name") for t in entries]
        if names != sorted(n for n in names if isinstance(n, str)) or len(set(names)) != len(names):
            return ("catalog_decodes", "catalog tools are not sorted by unique name")
        for t in entries:
            req = t.get("requires")
            if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
                return ("catalog_decodes", f"tool {t.get('name')!r} has no requires list")
        return entries
