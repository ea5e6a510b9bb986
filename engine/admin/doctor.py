"""``chit doctor``: whether a home and its repositories are usable, and each remote level.

Each check says what it found; a repository with a remote is compared with it
now (``git ls-remote``, and a ``git push --dry-run`` of what it lacks), so the
report says which lanes the remote is behind on and why (docs/deployment.md,
"Lanes on the organisation's remote"). Nothing is changed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import git
from engine.admin.home import check_policy, ensure_home
from engine.admin.state import state_store
from engine.auth.signkeys import active_signing_key
from engine.catalog.declarations import CATALOG_STORE_REF
from engine.errors import ChitError, ConfigurationError, StoreError
from engine.service.policyfile import load_policy
from engine.service.repos import repos_from_engine_toml
from engine.state import resolve_state_url

__all__ = ["DoctorRepository", "diagnose"]


@dataclass(frozen=True)
class DoctorRepository:
    """A repository to examine, as an engine would serve it.

    Attributes:
        name: Its name in reports.
        path: Its git directory or working directory.
        base: Its base branch, or ``None`` for its ``HEAD`` branch.
        remote: Its remote's URL, or ``None``.
    """

    name: str
    path: str
    base: str | None = None
    remote: str | None = None


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
        ``{"ok", "checks": [{"check", "ok", "detail"}], "repositories":
        [{"name", "ok", "base", "base_head", "lanes", "remote"}]}``, where
        ``remote`` is ``None`` or :meth:`engine.git.Replica.compare`'s report
        (URL redacted, git's errors scrubbed). ``ok`` is false when a check
        failed, a repository cannot be opened, or a remote is unreachable or
        behind on a lane.
    """
    checks = [_check("home", lambda: _home(Path(home))),
              _check("signing key", lambda: f"active: {active_signing_key(home).key_id}"),
              _check("policy", lambda: _policy(home)),
              _check("state store", lambda: _state(home, state))]
    if repositories is None:
        configured: list[DoctorRepository] = []
        checks.append(_check("engine.toml", lambda: _configured(home, configured)))
        repositories = configured
    found = [_repository(spec) for spec in repositories]
    ok = all(c["ok"] for c in checks) and all(r["ok"] for r in found)
    return {"ok": ok, "checks": checks, "repositories": found}


def _check(name: str, run: Any) -> dict[str, Any]:
    try:
        detail = run()
    except (ChitError, ConfigurationError, StoreError, OSError) as exc:
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


def _state(home: str | os.PathLike[str], state: str | None) -> str:
    url = resolve_state_url(home, state)
    if url.path is not None and not url.path.is_file():
        return f"{url} not created yet (the first engine creates it)"
    with state_store(home, state, must_exist=True) as store:
        store.freeze_state()
    return f"{url} reachable"


def _configured(home: str | os.PathLike[str], into: list[DoctorRepository]) -> str:
    specs = repos_from_engine_toml(home)
    into.extend(DoctorRepository(s.name, os.fspath(s.path), s.base, s.remote) for s in specs)
    return f"{len(specs)} repositories in [[repo]] tables"


def _repository(spec: DoctorRepository) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name, "ok": False, "base": spec.base,
                           "base_head": None, "lanes": 0, "remote": None, "error": None}
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
        if repo.remote is not None:
            report = repo.remote.compare()
            out["remote"] = report
            out["ok"] = bool(report["reachable"]) and not report["behind"]
        else:
            out["ok"] = True
    except ChitError as exc:
        out["error"] = _reason(exc)
    finally:
        repo.close()
    return out
