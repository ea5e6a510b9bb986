"""Coherence: whether the artefacts an engine serves were made for it (docs/vital-signs.md).

Pure: identities and recorded identities in, signals out. Each check answers
``ok``, ``mismatch`` (naming the identity expected and the one found) or
nothing at all (silent: nothing to compare yet, or an artefact made before
artefacts recorded whose they are). A signal never refuses, delays or changes
a call; it only reports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from engine.auth.reponames import repo_identity, validate_repo_name
from engine.auth.signkeys import is_key_id
from engine.limits import LIMITS
from engine.tools.scope import warning_line

__all__ = [
    "Identity",
    "Signal",
    "check_catalog",
    "check_lane_signers",
    "check_pending",
    "check_recorded",
    "check_remote",
    "check_store",
    "foreign_line",
    "identity_record",
    "parse_identity",
    "read_identity",
    "record_bytes",
    "store_record",
]


@dataclass(frozen=True)
class Identity:
    """Whose an artefact is: a repository's name, its history, and the home's keyring.

    Attributes:
        name: The repository's name as served (compared through
            :func:`engine.auth.reponames.repo_identity`, so ``My-Repo`` is
            ``my_repo``).
        roots: The root commit ids (hex) of the base branch's history, sorted;
            empty when the branch has no commit yet.
        keys: The key ids of the home's provenance signing keys, sorted.
    """

    name: str
    roots: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, name: str, roots: Iterable[str] = (), keys: Iterable[str] = ()) -> Identity:
        """An identity with its roots and keys sorted and deduplicated."""
        return cls(name, tuple(sorted(set(roots))), tuple(sorted(set(keys))))

    def describe(self) -> str:
        """One line naming it: ``name (root abc123456789)``."""
        roots = ",".join(r[:12] for r in self.roots) or "no history"
        return f"{self.name} (root {roots})"


@dataclass(frozen=True)
class Signal:
    """One vital sign's answer.

    Attributes:
        sign: What was checked (``semantic_index``, ``state_store``,
            ``lane_signer``, ``catalog_store``, ``remote``, ``call_log``,
            ``policy``, ``semantic_index_freshness``).
        state: ``ok`` or ``mismatch``; ``behind`` or ``unreachable`` for a
            remote, ``unsigned_tail`` for the call log, ``invalid`` for the
            policy, ``stale`` for the index's freshness.
        reason: One line for an operator or agent.
        expected: The identity served, on a mismatch (the base head, when stale).
        found: The identity the artefact records, on a mismatch (the commit
            indexed, when stale).
        lanes: The lanes concerned (a remote behind), by name.
        age_seconds: How long the condition has lasted, whole seconds.
        since: When it began, Unix seconds (for display; ages are measured
            on a monotonic clock where the engine can).
    """

    sign: str
    state: str
    reason: str
    expected: str | None = None
    found: str | None = None
    lanes: tuple[str, ...] = ()
    age_seconds: int | None = None
    since: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{sign, state, reason, expected?, found?, lanes?, age_seconds?, since?}``.

        Absent keys are left out (``lanes`` when empty).
        """
        out: dict[str, Any] = {"sign": self.sign, "state": self.state, "reason": self.reason}
        if self.expected is not None:
            out["expected"] = self.expected
        if self.found is not None:
            out["found"] = self.found
        if self.lanes:
            out["lanes"] = list(self.lanes)
        if self.age_seconds is not None:
            out["age_seconds"] = self.age_seconds
        if self.since is not None:
            out["since"] = self.since
        return out


def identity_record(identity: Identity) -> dict[str, Any]:
    """What an artefact records of whose it is (JSON-ready), read back by :func:`parse_identity`."""
    return {"name": identity.name, "roots": list(identity.roots), "keys": list(identity.keys)}


def parse_identity(record: object) -> Identity | None:
    """An identity read from an artefact's record, or ``None`` if it is absent or malformed.

    Args:
        record: Untrusted: the decoded record (any type).

    Returns:
        The identity, or ``None`` (which every check reads as silent). Its
        parts go into the lines an operator and an agent are shown, so any
        part out of form makes the record malformed: a name that is not a
        repository name (:func:`engine.auth.reponames.validate_repo_name`), a
        root that is not a commit id (40 or 64 lowercase hex), a key that is
        not a key id (:func:`engine.auth.signkeys.is_key_id`), or more than
        ``LIMITS.identity_record_entries`` roots or keys.
    """
    if not isinstance(record, Mapping):
        return None
    name, roots, keys = record.get("name"), record.get("roots", []), record.get("keys", [])
    try:
        name = validate_repo_name(name)
    except ValueError:
        return None
    if not _listed(roots, _is_root) or not _listed(keys, is_key_id):
        return None
    return Identity.of(name, roots, keys)


_ROOT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _is_root(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _ROOT.fullmatch(value) is not None


def _listed(value: object, check: Any) -> bool:
    """Whether ``value`` is a list of at most ``identity_record_entries``, each ``check``ed."""
    return (isinstance(value, list) and len(value) <= LIMITS.identity_record_entries
            and all(check(item) for item in value))


def record_bytes(identity: Identity) -> bytes:
    """:func:`identity_record` as the bytes an artefact keeps (sorted-key JSON, UTF-8)."""
    return json.dumps(identity_record(identity), sort_keys=True).encode("utf-8")


def read_identity(raw: bytes | None) -> Identity | None:
    """The identity in an artefact's record bytes, or ``None`` (silent).

    Args:
        raw: Untrusted: the record as kept (:func:`record_bytes`), or ``None``.

    Returns:
        The identity; ``None`` for no record, one longer than
        ``LIMITS.identity_record_bytes``, not UTF-8 JSON, or malformed.
    """
    if raw is None or len(raw) > LIMITS.identity_record_bytes:
        return None
    try:
        return parse_identity(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def check_recorded(
    sign: str, served: Identity, recorded: Identity | None, *, names: bool = True
) -> Signal | None:
    """Compare the identity an artefact recorded with the one served.

    The name is compared through :func:`engine.auth.reponames.repo_identity`;
    histories when both sides know their roots (they must share one: a fork
    shares its roots, another repository does not); keyrings when both sides
    list keys (they must share one: a rotation keeps the retired key).

    Args:
        sign: The artefact's sign (``semantic_index``, ``state_store``).
        served: The serving identity.
        recorded: What the artefact records; ``None``: silent.
        names: Compare the names; ``False`` when the name served under is not
            known (``chit doctor --repo PATH``): histories and keyrings only.

    Returns:
        ``None`` (silent), an ``ok`` or a ``mismatch`` signal.
    """
    if recorded is None:
        return None
    reason = None
    if names and repo_identity(recorded.name) != repo_identity(served.name):
        reason = f"made for repository {recorded.name}, served as {served.name}"
    elif served.roots and recorded.roots and not set(served.roots) & set(recorded.roots):
        reason = "made for another history (no root commit in common)"
    elif served.keys and recorded.keys and not set(served.keys) & set(recorded.keys):
        reason = "made under another home's keyring (no key in common)"
    if reason is None:
        return Signal(sign, "ok", "made for this repository")
    return Signal(sign, "mismatch", reason, served.describe(), recorded.describe())


def store_record(served: Sequence[Identity]) -> dict[str, Any]:
    """What a state store records of whose it is: the home's keys and the repositories served."""
    keys = sorted({key for identity in served for key in identity.keys})
    return {"keys": keys, "repos": [{"name": i.name, "roots": list(i.roots)} for i in served]}


def check_store(
    served: Sequence[Identity], record: object, *, names: bool = True
) -> Signal | None:
    """Compare what a state store records with the engine's repositories and keyring.

    The store is the home's: it is foreign when it records keys and none is in
    the keyring, or when none of the repositories it records is one served
    here (same name identity and a root commit in common, or a root in common
    under another name). A repository added to an engine that serves one the
    store knows is not foreign.

    Args:
        served: The identities of the repositories the engine serves.
        record: The store's record, decoded (untrusted); malformed or ``None``:
            silent.
        names: Compare the names; ``False`` when the names served under are
            not known (``chit doctor --repo PATH``): histories and keyrings only.

    Returns:
        ``None``, an ``ok`` or a ``mismatch`` signal for ``state_store``.
    """
    if not isinstance(record, Mapping) or not served:
        return None
    keys, repos = record.get("keys"), record.get("repos")
    if not _listed(keys, is_key_id) or not _listed(repos, lambda r: True):
        return None
    recorded = [i for i in (parse_identity(r) for r in repos or ()) if i is not None]
    ours = {key for identity in served for key in identity.keys}
    expected = "; ".join(i.describe() for i in served)
    found = "; ".join(i.describe() for i in recorded) or "no repository"
    if ours and keys and not ours & set(keys or ()):
        return Signal("state_store", "mismatch",
                      "made under another home's keyring (no key in common)", expected, found)
    if recorded and not any(_same_repository(a, b, names) for a in served for b in recorded):
        theirs = ", ".join(i.name for i in recorded)
        return Signal("state_store", "mismatch",
                      f"made for repository {theirs}, serving {', '.join(i.name for i in served)}",
                      expected, found)
    return Signal("state_store", "ok", "made for this home and its repositories")


def _same_repository(a: Identity, b: Identity, names: bool = True) -> bool:
    shared = bool(set(a.roots) & set(b.roots))
    if not names or repo_identity(a.name) == repo_identity(b.name):
        return shared or not a.roots or not b.roots
    return shared


def check_lane_signers(served: Identity, signers: Mapping[str, str]) -> list[Signal]:
    """One mismatch per lane whose provenance was signed by a key the keyring lacks.

    Args:
        served: The serving identity (its ``keys``).
        signers: Signing key id by lane name (lanes with no provenance left out).

    Returns:
        The mismatches, by lane name; ``[ok]`` when every lane's signer is
        known; ``[]`` (silent) when there is no lane or no keyring.
    """
    if not signers or not served.keys:
        return []
    out = [Signal("lane_signer", "mismatch", f"lane {lane} signed by a key this home lacks",
                  ", ".join(served.keys), key)
           for lane, key in sorted(signers.items()) if key not in served.keys]
    return out or [Signal("lane_signer", "ok", f"{len(signers)} lanes signed by this home")]


def check_catalog(
    served: Identity, recorded: Identity | None, *, names: bool = True
) -> Signal | None:
    """:func:`check_recorded` for the catalog store."""
    return check_recorded("catalog_store", served, recorded, names=names)


def check_remote(report: Mapping[str, Any] | None) -> Signal | None:
    """The remote mirror's sign, from :meth:`engine.git.Replica.compare`'s report (``chit doctor``).

    Args:
        report: The report (``reachable``, ``behind`` lane names), or ``None``
            when the repository has no remote (silent).

    Returns:
        ``None``, an ``ok``, an ``unreachable`` or a ``behind`` signal; a
        ``behind`` one names the lanes (doctor compares now, so it cannot say
        since when: an engine's :func:`check_pending` can).
    """
    if report is None:
        return None
    if not report.get("reachable"):
        return Signal("remote", "unreachable", "the remote cannot be reached")
    behind: Sequence[Any] = report.get("behind") or []
    if behind:
        return Signal("remote", "behind", f"the remote lacks {len(behind)} lanes' commits",
                      lanes=tuple(str(lane) for lane in behind))
    return Signal("remote", "ok", "the remote has every lane commit")


def check_pending(report: Mapping[str, Any] | None, own: str | None = None) -> Signal | None:
    """The remote mirror's sign, from a running engine's :meth:`engine.git.Replica.report`.

    Args:
        report: The report (``pending`` lanes with ``since`` and
            ``age_seconds``, ``checked_at``), or ``None`` without a remote.
        own: Name only this lane (``agent/<name>``) in ``lanes``, when it is
            pending; ``None``: name every pending lane (an operator's view).
            ``status`` names no other agent's lane.

    Returns:
        ``None`` (no remote, or not compared yet), ``ok``, or ``behind`` with
        the lanes, the oldest pending lane's age and since when.
    """
    if report is None:
        return None
    pending: Sequence[Mapping[str, Any]] = report.get("pending") or []
    if not pending:
        if report.get("checked_at") is None:
            return None
        return Signal("remote", "ok", "the remote has every lane commit")
    oldest = max(pending, key=lambda p: int(p.get("age_seconds") or 0))
    age = int(oldest.get("age_seconds") or 0)
    names = [str(p.get("lane")) for p in pending]
    lanes = tuple(names) if own is None else tuple(n for n in names if n == own)
    return Signal("remote", "behind",
                  f"the remote lacks {len(pending)} lanes' commits, the oldest for {age} s",
                  lanes=lanes, age_seconds=age, since=oldest.get("since"))


def foreign_line(signals: Iterable[Signal]) -> str | None:
    """The one line ``effective_scope`` and the instructions carry on a mismatch, else ``None``."""
    return warning_line([signal.as_dict() for signal in signals])
