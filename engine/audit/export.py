"""Exporting commit attestations with the keys that verify them (docs/attestations.md §5).

A range's commits are read oldest first; each one's note under
``refs/notes/chit`` must hold an attestation that verifies under the trusted
keys and names the commit. Those lines are bundled as JSON Lines beside the
public keys; every other commit is reported as unattested.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pygit2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine import git
from engine.audit import intoto
from engine.auth.agents import is_agent_name
from engine.auth.signkeys import is_key_id
from engine.errors import ChitError, RepositoryError
from engine.limits import LIMITS

__all__ = [
    "INTOTO_FILE",
    "JSON_FILE",
    "KEYS_FILE",
    "Collected",
    "Exported",
    "RangeSpec",
    "Unattested",
    "bundle",
    "collect",
    "parse_lane",
    "parse_range",
]

INTOTO_FILE = "attestations.intoto.jsonl"
"""The export in the in-toto bundle form: one DSSE envelope per line, as in the note."""

JSON_FILE = "attestations.jsonl"
"""The export in chit's JSON form: one object per commit, statement decoded."""

KEYS_FILE = "keys.json"
"""The public keys that verify the exported attestations."""

Format = Literal["in-toto", "json"]


@dataclass(frozen=True)
class RangeSpec:
    """What ``RANGE`` names: a lane's commits not on the base, or a git range.

    Attributes:
        agent: The lane's agent (``agent/<agent>``), or ``None`` for a range
            of two revisions (``since..until``).
        since: The revision whose history is left out, or ``None``.
        until: The range's end for a range of two revisions, else ``None``.
    """

    agent: str | None
    since: str | None = None
    until: str | None = None


@dataclass(frozen=True)
class Exported:
    """One commit's attestation that verified: the note's line as stored."""

    commit: str
    lane: str
    line: bytes = field(repr=False)
    kid: str
    statement: dict[str, Any] = field(repr=False)

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of the line (:func:`intoto.envelope_digest`)."""
        return intoto.envelope_digest(self.line)


@dataclass(frozen=True)
class Unattested:
    """A commit of the range without an attestation that verifies, and why."""

    commit: str
    lane: str | None
    reason: str


@dataclass
class Collected:
    """What :func:`collect` found, oldest commit first."""

    exported: list[Exported] = field(default_factory=list)
    unattested: list[Unattested] = field(default_factory=list)


def parse_lane(text: str) -> str:
    """The agent of a lane given as ``agent/NAME``, ``refs/heads/agent/NAME`` or ``NAME``.

    Raises:
        ValueError: If the rest is not an agent name a chit lane can have.
    """
    agent = text.removeprefix("refs/heads/").removeprefix("agent/")
    if not agent or not is_agent_name(agent):
        raise ValueError(f"{text!r} is not a lane (agent/NAME)")
    return agent


def _is_lane(text: str) -> bool:
    return text.startswith(("agent/", "refs/heads/agent/"))


def parse_range(text: str) -> RangeSpec:
    """Parse ``RANGE``: a lane, ``REV..LANE`` or ``REV..REV`` (docs/attestations.md §5).

    A revision is a branch name, a full ``refs/heads/`` name or a commit id (7
    to 40 hex), as :meth:`engine.git.Repository.resolve` takes it: no other
    revision syntax.

    Raises:
        ValueError: For an empty side, ``...``, or a lane that no agent can have.
    """
    if not isinstance(text, str) or not text:
        raise ValueError("RANGE is empty")
    if "..." in text:
        raise ValueError("RANGE: A...B (symmetric difference) is not supported; use A..B")
    if ".." not in text:
        return RangeSpec(parse_lane(text))
    since, _, until = text.partition("..")
    if not since or not until or ".." in until:
        raise ValueError(f"RANGE {text!r} is not REV..LANE or REV..REV")
    if _is_lane(until):
        return RangeSpec(parse_lane(until), since=since)
    return RangeSpec(None, since=since, until=until)


def _range_commits(repo: git.Repository, spec: RangeSpec) -> list[pygit2.Commit]:
    """The range's commits, oldest first; bounded by ``LIMITS.export_commits``."""
    limit = LIMITS.export_commits
    if spec.agent is None:
        if spec.since is None or spec.until is None:
            raise ValueError("RANGE is neither a lane nor REV..REV")
        commits = repo.range_commits(spec.since, spec.until, limit)
    else:
        if not repo.lane_exists(spec.agent):
            raise RepositoryError("not_found", f"no lane agent/{spec.agent} in this repository")
        commits = repo.lane_commits(spec.agent, spec.since)
        if len(commits) > limit:
            raise ValueError(f"the range holds more than {limit} commits; narrow it")
    return list(reversed(commits))


def collect(
    repo: git.Repository, spec: RangeSpec, public_keys: Mapping[str, Ed25519PublicKey]
) -> Collected:
    """The verified attestation of each commit of a range.

    Every commit of a lane (``spec.agent``) must have one; in a range of two
    revisions only commits with a note under ``refs/notes/chit`` are chit's,
    and only those are examined.

    Args:
        repo: The repository.
        spec: The range (:func:`parse_range`).
        public_keys: Trusted key id to Ed25519 public key.

    Returns:
        The attestations that verify (signed by a key of ``public_keys``, a
        ``PREDICATE_TYPE`` statement whose only subject is the commit and, on
        a lane, names that lane) and the commits without one, oldest first.

    Raises:
        ValueError: If the range holds more than ``LIMITS.export_commits``
            commits or its attestations more than ``LIMITS.export_bytes``.
        InvalidRequestError, RepositoryError: If a revision or lane does not
            resolve (``invalid_argument``, ``not_found``).
    """
    found = Collected()
    total = 0
    lane = None if spec.agent is None else f"agent/{spec.agent}"
    for commit in _range_commits(repo, spec):
        cid = str(commit.id)
        try:
            note = repo.attestation_note(cid)
        except (ChitError, pygit2.GitError, KeyError, ValueError):
            note = None
        if note is None:
            if lane is not None:
                found.unattested.append(
                    Unattested(cid, lane, f"no attestation under {git.NOTES_REF}"))
            continue
        try:
            line, kid, statement = intoto.find_for_commit(note, cid, public_keys)
        except intoto.AttestationError as exc:
            found.unattested.append(Unattested(cid, lane, exc.reason))
            continue
        named = statement["subject"][0].get("name")
        if lane is not None and named != lane:
            found.unattested.append(Unattested(cid, lane, "the attestation names another lane"))
            continue
        total += len(line) + 1
        if total > LIMITS.export_bytes:
            raise ValueError(f"the range's attestations exceed {LIMITS.export_bytes} bytes; "
                             "narrow it")
        found.exported.append(
            Exported(cid, named if isinstance(named, str) else "", line, kid, statement))
    return found


def _json_line(item: Exported) -> bytes:
    return intoto.dumps({
        "commit": item.commit,
        "lane": item.lane,
        "attestation": json.loads(item.line),
        "statement": item.statement,
        "digest": item.digest,
    }) + b"\n"


def bundle(
    found: Collected, public_keys: Mapping[str, Ed25519PublicKey], form: Format
) -> dict[str, bytes]:
    """The export's files: name to content (docs/attestations.md §5).

    Args:
        found: What :func:`collect` found.
        public_keys: The trusted keys; only those that verified an exported
            attestation are written.
        form: ``"in-toto"`` (:data:`INTOTO_FILE`: the note's lines as they
            are) or ``"json"`` (:data:`JSON_FILE`).

    Returns:
        The attestations file, :data:`KEYS_FILE` (``{"keys": [...]}``,
        :func:`intoto.public_key_entry` each) and one ``<kid>.pem`` per key.
    """
    if form == "in-toto":
        files = {INTOTO_FILE: b"".join(item.line + b"\n" for item in found.exported)}
    else:
        files = {JSON_FILE: b"".join(_json_line(item) for item in found.exported)}
    kids = sorted({item.kid for item in found.exported})
    entries = [intoto.public_key_entry(kid, public_keys[kid]) for kid in kids]
    files[KEYS_FILE] = (json.dumps({"keys": entries}, indent=2, sort_keys=True) + "\n").encode()
    for entry in entries:
        if not is_key_id(entry["keyid"]):  # a file name: never a path
            raise ValueError("a key id is not a safe file name")
        files[f"{entry['keyid']}.pem"] = str(entry["pem"]).encode("ascii")
    return files
