"""``chit doctor``: whether a home and its repositories are usable, and each remote level.

Each check says what it found; a repository with a remote is compared with it
now (``git ls-remote``, and a ``git push --dry-run`` of what it lacks), so the
report says which lanes the remote is behind on and why (docs/deployment.md,
"Lanes on the organisation's remote"), and each repository's vital signs
(docs/vital-signs.md). Nothing is changed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import git
from engine.admin.home import check_policy, ensure_home
from engine.admin.state import state_store
from engine.audit.provenance import envelope_signer
from engine.auth.signkeys import active_signing_key, signing_keys
from engine.catalog.declarations import CATALOG_STORE_REF
from engine.errors import ChitError, ConfigurationError, StoreError
from engine.limits import LIMITS
from engine.semantic.persist import read_indexed, read_owner
from engine.service import coherence, vitals
from engine.service.policyfile import load_policy
from engine.service.repos import name_for_path, repos_from_engine_toml
from engine.state import Store, resolve_state_url

__all__ = ["DoctorRepository", "diagnose", "doctor_repository"]


@dataclass(frozen=True)
class DoctorRepository:
    """A repository to examine, as an engine would serve it.

    Attributes:
        name: Its name in reports, and the name an engine serves it under;
            equal to ``path`` for one given as a path (``--repo PATH``): the
            vital signs then compare histories and keyrings, not names.
        path: Its git directory or working directory.
        base: Its base branch, or ``None`` for its ``HEAD`` branch.
        remote: Its remote's URL, or ``None``.
    """

    name: str
    path: str
    base: str | None = None
    remote: str | None = None


def doctor_repository(
    home: str | os.PathLike[str], repo: str, *, base: str | None = None,
    remote: str | None = None,
) -> DoctorRepository:
    """The repository ``chit doctor --repo NAME|PATH`` names.

    A name of a ``[[repo]]`` table of ``<home>/engine.toml`` wins (its path,
    base and remote, unless ``base`` or ``remote`` are given); otherwise
    ``repo`` is a path (its name then unknown: :class:`DoctorRepository`).

    Args:
        home: The chit home.
        repo: A name served in ``engine.toml``, or a path.
        base: The base branch (``--base``), or ``None``.
        remote: The remote's URL (``--remote``), or ``None``.

    Returns:
        The repository to examine.

    Raises:
        ConfigurationError: If ``repo`` is neither a name in ``engine.toml``
            (or that file cannot be read) nor an existing path.
    """
    try:
        specs = repos_from_engine_toml(home)
    except ConfigurationError:
        specs = []
    for spec in specs:
        if spec.name == repo:
            return DoctorRepository(spec.name, os.fspath(spec.path), base or spec.base,
                                    remote or spec.remote)
    if os.path.exists(repo):
        return DoctorRepository(repo, repo, base, remote)
    raise ConfigurationError(
        "--repo: no [[repo]] of engine.toml has that name, and no such path exists")


def diagnose(
    home: str | os.PathLike[str],
    repositories: Sequence[DoctorRepository] | None = None,
    *,
    state: str | None = None,
) -> dict[str, Any]:
    """Examine a home, its state store and repositories, and each repository's remote.

    Args:
        home: The chit home.
        repositories: The repositories to examine; ``None``: the ``[[repo]]``
            tables of ``<home>/engine.toml`` (a check reports whether they read).
        state: The state URL (``--state``), or ``None`` to resolve it.

    Returns:
        ``{"ok", "verdict", "checks": [{"check", "ok", "detail"}], "repositories":
        [{"name", "ok", "base", "base_head", "lanes", "remote", "signs"}], "signs",
        "seen"}``,
        where ``remote`` is ``None`` or :meth:`engine.git.Replica.compare`'s
        report (URL redacted, git's errors scrubbed) and ``signs`` the
        repository's vital signs that are not silent (``{sign, state, reason,
        expected?, found?, lanes?, ...}``, docs/vital-signs.md); the top
        ``signs`` are the home's (``policy``, ``call_log``, ``state_store``) and ``seen`` the
        engines and edges seen within ``presence_window_seconds`` (``[{kind,
        label, role, started, seen, age_seconds}]``). ``ok`` is false when a
        check failed, a repository cannot be opened, a remote is unreachable
        or behind on a lane, or a sign is neither ``ok`` nor ``stale``. ``verdict``:
        ``healthy``, ``wrong`` (something needs the operator) or ``unknown``
        (nothing found wrong, but the state store could not be read).
    """
    read: dict[str, Any] = {"signs": [], "seen": [], "owner": None}
    checks = [_check("home", lambda: _home(Path(home))),
              _check("signing key", lambda: _keyring(home)),
              _check("policy", lambda: _policy(home)),
              _check("state store", lambda: _state(home, state, read))]
    policy = next(c for c in checks if c["check"] == "policy")
    signs = [vitals.policy_sign(None if policy["ok"] else str(policy["detail"])), *read["signs"]]
    if repositories is None:
        configured: list[DoctorRepository] = []
        checks.append(_check("engine.toml", lambda: _configured(home, configured)))
        repositories = configured
    keys = _key_ids(home)
    identities: list[coherence.Identity] = []
    found = [_repository(spec, keys, identities) for spec in repositories]
    # Read only: doctor never writes the store's record (an engine does).
    named = all(spec.name != spec.path for spec in repositories)
    store = vitals.recorded_store_sign(read["owner"], identities, names=named)
    if store is not None:
        signs.append(store)
    healthy = all(_fine(sign) for sign in signs)
    ok = all(c["ok"] for c in checks) and all(r["ok"] for r in found) and healthy
    unknown = any(c.get("unknown") for c in checks)
    wrong = any(not c["ok"] and not c.get("unknown") for c in checks) or not all(
        r["ok"] for r in found) or not healthy
    verdict = "wrong" if wrong else "unknown" if unknown else "healthy"
    return {"ok": ok, "verdict": verdict, "checks": checks, "repositories": found,
            "signs": [sign.as_dict() for sign in signs], "seen": read["seen"]}


def _fine(sign: coherence.Signal) -> bool:
    """Whether a sign needs nothing of the operator (``stale``: the next query catches up)."""
    return sign.state in _FINE


_FINE = frozenset({"ok", "stale"})


def _key_ids(home: str | os.PathLike[str]) -> tuple[str, ...]:
    try:
        return tuple(key.key_id for key in signing_keys(home))
    except (ChitError, ConfigurationError, OSError):
        return ()


def _keyring(home: str | os.PathLike[str]) -> str:
    active = active_signing_key(home).key_id
    retired = len(signing_keys(home)) - 1
    return f"active: {active}; {retired} retired"


def _check(name: str, run: Any) -> dict[str, Any]:
    try:
        detail = run()
    except StoreError as exc:  # the store cannot be read: doctor cannot tell
        return {"check": name, "ok": False, "detail": _reason(exc), "unknown": True}
    except (ChitError, ConfigurationError, OSError) as exc:
        return {"check": name, "ok": False, "detail": _reason(exc)}
    return {"check": name, "ok": True, "detail": detail}


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        return message
    if isinstance(exc, ConfigurationError):
        return str(exc)  # written for the operator, as every command prints it
    if isinstance(exc, OSError):
        return f"{type(exc).__name__} ({exc.strerror or 'error'})"
    return type(exc).__name__


def _home(home: Path) -> str:
    ensure_home(home)
    return str(home)


def _policy(home: str | os.PathLike[str]) -> str:
    load_policy(home)
    # An engine also refuses a policy naming approvers its store does not know.
    checked = check_policy(Path(home) / "policy.toml", home=home)
    errors: Any = checked.get("errors") or []
    if not checked["ok"] and errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigurationError(
            f"policy.toml is unusable: {first['location']}: {first['message']}{more}"
        )
    return "valid"


def _state(home: str | os.PathLike[str], state: str | None, into: dict[str, Any]) -> str:
    """The store's reachability and version; its call-log sign and who was seen go ``into``."""
    url = resolve_state_url(home, state)
    if url.path is not None and not url.path.is_file():
        return f"{url} not created yet (the first engine creates it)"
    with state_store(home, state, must_exist=True) as store:
        store.freeze_state()
        version = store.schema_version()
        now = time.time()
        into["owner"] = store.recorded_owner()
        sign = vitals.call_log_sign(store, now)
        if sign is not None:
            into["signs"].append(sign)
        into["seen"] = _seen(store, int(now))
    return f"{url} reachable, schema version {version}"


def _seen(store: Store, now: int) -> list[dict[str, Any]]:
    """The engines and edges seen within ``presence_window_seconds`` (empty if unreadable)."""
    try:
        rows = store.presence(since=now - LIMITS.presence_window_seconds)
    except StoreError:
        return []
    return [{"kind": r.kind, "label": r.label, "role": r.role, "started": r.started,
             "seen": r.seen, "age_seconds": max(0, now - r.seen)} for r in rows]


def _configured(home: str | os.PathLike[str], into: list[DoctorRepository]) -> str:
    specs = repos_from_engine_toml(home)
    into.extend(DoctorRepository(s.name, os.fspath(s.path), s.base, s.remote) for s in specs)
    return f"{len(specs)} repositories in [[repo]] tables"


def _repository(spec: DoctorRepository, keys: tuple[str, ...],
                identities: list[coherence.Identity]) -> dict[str, Any]:
    """One repository's report; its identity as served goes ``into`` identities."""
    out: dict[str, Any] = {"name": spec.name, "ok": False, "base": spec.base,
                           "base_head": None, "lanes": 0, "remote": None, "error": None,
                           "signs": []}
    try:
        repo = git.Repository(spec.path, base=spec.base, remote=spec.remote,
                              pushed_stores=(CATALOG_STORE_REF,))
    except (ChitError, ConfigurationError) as exc:
        out["error"] = _reason(exc)
        return out
    try:
        out["base"] = repo.base
        out["base_head"] = str(repo.base_head().id)
        out["lanes"] = len(repo.lanes())
        signs = _signs(spec, repo, keys, identities)
        if repo.remote is not None:
            report = repo.remote.compare()
            out["remote"] = report
            out["ok"] = bool(report["reachable"]) and not report["behind"]
            remote = coherence.check_remote(report)
            if remote is not None:
                signs.append(remote)
        else:
            out["ok"] = True
        out["signs"] = [sign.as_dict() for sign in signs]
        out["ok"] = out["ok"] and all(_fine(sign) for sign in signs)
    except ChitError as exc:
        out["error"] = _reason(exc)
    finally:
        repo.close()
    return out


def _served_name(spec: DoctorRepository) -> tuple[str, bool]:
    """The name the repository is served under, and whether it is known.

    ``--repo PATH`` gives no name (an engine may serve the folder under any):
    the folder's name is shown, and names are not compared.
    """
    if spec.name != spec.path:
        return spec.name, True
    try:
        return name_for_path(spec.path), False
    except ConfigurationError:
        return os.path.basename(os.path.abspath(spec.path)) or spec.name, False


def _signs(spec: DoctorRepository, repo: git.Repository, keys: tuple[str, ...],
           identities: list[coherence.Identity]) -> list[coherence.Signal]:
    """The repository's vital signs that are not silent (index, catalog store, lanes' signers)."""
    name, named = _served_name(spec)
    root = repo.history_root()
    served = coherence.Identity.of(name, () if root is None else (root,), keys)
    identities.append(served)
    out: list[coherence.Signal] = []
    index = coherence.check_recorded(
        "semantic_index", served, coherence.parse_identity(read_owner(repo.chit_dir)),
        names=named)
    if index is not None:
        out.append(index)
    head = repo.base_head()
    fresh = vitals.freshness_sign(read_indexed(repo.chit_dir), str(head.id), str(head.tree_id))
    if fresh is not None:
        out.append(fresh)
    catalog = coherence.check_catalog(
        served, coherence.read_identity(repo.recorded_store_owner(CATALOG_STORE_REF)),
        names=named)
    if catalog is not None:
        out.append(catalog)
    signers: dict[str, str] = {}
    for agent in repo.lanes():
        record = repo.provenance_record(agent, str(repo.head_for(agent).id))
        signer = None if record is None else envelope_signer(record)
        if signer is not None:
            signers[agent] = signer
    out.extend(coherence.check_lane_signers(served, signers))
    return out
