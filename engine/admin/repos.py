"""What the operator sees of the repositories an engine serves: ``chit repos``, ``chit lanes``.

Read-only. Each repository is opened as it is configured
(:class:`engine.service.RepoSpec`); its lanes (``refs/heads/agent/*``) are
listed with their last commit and how far each is ahead of and behind the
base branch. ``repos status`` also compares the lanes with the repository's
remote (one ``git ls-remote``, bounded in time), which ``repos list`` and
``lanes list`` never do. docs/deployment.md, "Seeing what exists".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import pygit2
from pygit2.enums import RepositoryOpenFlag

from engine import git
from engine.auth.reponames import validate_repo_name
from engine.catalog.declarations import CATALOG_STORE_REF
from engine.errors import ChitError, ConfigurationError
from engine.git import LANE_PREFIX, common_dir, lane_ref
from engine.git.remote import RemoteError
from engine.service.repos import RepoSpec

__all__ = ["list_lanes", "list_repos", "repos_status", "select_repos"]


def select_repos(specs: Sequence[RepoSpec], names: Iterable[str]) -> list[RepoSpec]:
    """The specs named ``names``, in configuration order; all of them if none is named.

    Args:
        specs: The repositories an engine on the home serves
            (:func:`engine.service.resolve_repo_specs`).
        names: Repository names the operator gave (untrusted).

    Returns:
        The selected specs.

    Raises:
        ValueError: If a name is not a valid repository name (``..``, a path)
            or no repository has it; the message lists the known names.
    """
    wanted = [validate_repo_name(name) for name in names]
    if not wanted:
        return list(specs)
    known = {spec.name: spec for spec in specs}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(
            f"no repository named {unknown[0]} on this home; known: {', '.join(known) or 'none'}"
        )
    return [spec for spec in specs if spec.name in wanted]


def list_repos(specs: Sequence[RepoSpec]) -> dict[str, Any]:
    """Each repository with its base and its lanes, from local refs only (no network).

    Args:
        specs: The repositories to show.

    Returns:
        ``{"repositories": [{"name", "path", "base", "base_commit", "remote"
        (URL with userinfo redacted, or None), "lanes": [lane], "odd_refs":
        [ref names under refs/heads/agent/ that name no lane], "error" (why the
        repository cannot be read, or None)}]}``; each lane as
        :func:`list_lanes` gives it, without ``repo``.
    """
    return {"repositories": [_inspect(spec) for spec in specs]}


def repos_status(specs: Sequence[RepoSpec]) -> dict[str, Any]:
    """:func:`list_repos`, and for each repository with a remote, what the remote lacks.

    Contacts each remote (the remote's refs are listed with ``git ls-remote``,
    bounded by the transport's time limit); changes nothing.

    Args:
        specs: The repositories to show.

    Returns:
        ``{"ok", "repositories": [...]}``: each repository as in
        :func:`list_repos`, plus ``remote_status``: ``None`` without a remote,
        else ``{"url" (userinfo redacted), "reachable", "error" (why it could
        not be listed, scrubbed, or None), "behind": [lanes the remote lacks
        commits of or lacks], "parked": [``refs/chit/parked/*`` it lacks],
        "why" (None when it lacks nothing; else what a dry-run push said)}``;
        each lane gains ``remote``: ``None`` without a remote (or unreachable),
        else ``level``, ``behind`` (the remote's lane is an ancestor),
        ``missing`` (the remote has no such lane), ``remote_ahead``,
        ``diverged`` or ``unknown`` (the remote's head is not held here). ``ok``
        is false when a repository cannot be read, or a remote is unreachable
        or lacks a lane commit.
    """
    found = []
    for spec in specs:
        info = _inspect(spec)
        info["remote_status"] = None
        for lane in info["lanes"]:
            lane["remote"] = None
        if info["error"] is None and spec.remote is not None:
            info["remote_status"] = _remote_status(spec, info)
        found.append(info)
    ok = all(
        r["error"] is None
        and (r["remote_status"] is None
             or (r["remote_status"]["reachable"] and not r["remote_status"]["behind"]
                 and not r["remote_status"]["parked"]))
        for r in found
    )
    return {"ok": ok, "repositories": found}


def list_lanes(specs: Sequence[RepoSpec]) -> dict[str, Any]:
    """Every lane of the repositories, from local refs only (no network).

    Args:
        specs: The repositories whose lanes to list.

    Returns:
        ``{"lanes": [{"repo", "lane" (``agent/<agent>``), "agent", "commit"
        (hex id), "time" (the commit's time, ISO 8601 UTC), "subject" (its
        message's first line), "ahead", "behind" (commits, against the base)}],
        "odd_refs": [{"repo", "ref"}], "errors": [{"repo", "error"}]}``, sorted
        by repository (configuration order) then lane.
    """
    lanes: list[dict[str, Any]] = []
    odd: list[dict[str, str]] = []
    errors: list[dict[str, str]] = []
    for spec in specs:
        info = _inspect(spec)
        if info["error"] is not None:
            errors.append({"repo": spec.name, "error": info["error"]})
        lanes.extend({"repo": spec.name, **lane} for lane in info["lanes"])
        odd.extend({"repo": spec.name, "ref": ref} for ref in info["odd_refs"])
    return {"lanes": lanes, "odd_refs": odd, "errors": errors}


# -- one repository, local refs only ------------------------------------------------


def _inspect(spec: RepoSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": spec.name, "path": os.fspath(spec.path), "base": spec.base,
        "base_commit": None, "remote": _shown_url(spec.remote), "lanes": [],
        "odd_refs": [], "error": None,
    }
    try:
        repo = pygit2.Repository(os.fspath(spec.path), RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, OSError):
        out["error"] = "not a git repository"
        return out
    try:
        base = spec.base if spec.base is not None else _head_branch(repo)
    except ValueError as exc:
        out["error"] = str(exc)
        return out
    out["base"] = base
    base_commit = _commit_of(repo, "refs/heads/" + base)
    if base_commit is None:
        out["error"] = f"the repository has no {base} branch with a commit"
        return out
    out["base_commit"] = str(base_commit.id)
    for name in _lane_ref_names(repo):
        agent = name[len(LANE_PREFIX):]
        try:
            lane_ref(agent)
        except ValueError:
            out["odd_refs"].append(name)
            continue
        commit = _commit_of(repo, name)
        if commit is None:
            out["odd_refs"].append(name)  # a symbolic ref, or one naming no commit
            continue
        ahead, behind = repo.ahead_behind(commit.id, base_commit.id)
        out["lanes"].append({
            "lane": name.removeprefix("refs/heads/"),
            "agent": agent,
            "commit": str(commit.id),
            "time": datetime.fromtimestamp(commit.commit_time, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"),
            "subject": _first_line(commit),
            "ahead": ahead,
            "behind": behind,
        })
    return out


def _head_branch(repo: pygit2.Repository) -> str:
    """The branch the repository's own ``HEAD`` names (its common directory's)."""
    try:
        common = pygit2.Repository(common_dir(repo.path), RepositoryOpenFlag.NO_SEARCH)
        target = common.references["HEAD"].target
    except (KeyError, pygit2.GitError, ValueError, OSError):
        target = None
    if not isinstance(target, str) or not target.startswith("refs/heads/"):
        raise ValueError("the repository's HEAD names no branch; name its base (base = \"...\")")
    return target.removeprefix("refs/heads/")


def _lane_ref_names(repo: pygit2.Repository) -> list[str]:
    """Names under ``refs/heads/agent/``, sorted; a name git cannot decode is skipped."""
    return _names_under(repo, LANE_PREFIX)


def _commit_of(repo: pygit2.Repository, name: str) -> pygit2.Commit | None:
    """The commit a direct reference names, or ``None`` (missing, symbolic, not a commit)."""
    try:
        ref = repo.references.get(name)
        if ref is None or not isinstance(ref.target, pygit2.Oid):
            return None
        obj = repo.get(ref.target)
        return obj if isinstance(obj, pygit2.Commit) else None
    except (pygit2.GitError, KeyError, ValueError):
        return None


def _first_line(commit: pygit2.Commit) -> str:
    try:
        message = commit.message
    except (UnicodeDecodeError, LookupError):
        message = commit.raw_message.decode("utf-8", "replace")
    return message.split("\n", 1)[0].strip()


# -- the remote --------------------------------------------------------------------


def _shown_url(url: str | None) -> str | None:
    """A remote's URL as shown: the userinfo of ``scheme://userinfo@host`` as ``***``."""
    return None if url is None else git.redact(url)


def _remote_status(spec: RepoSpec, info: dict[str, Any]) -> dict[str, Any]:
    """Compare the lanes with the remote; sets each lane's ``remote`` in ``info``.

    The one place the remote is reached: its references are listed through
    the git layer's transport (``git ls-remote``, bounded in time), and the
    lane commits it lacks are offered in a ``git push --dry-run`` to learn why
    they are not there. Nothing moves, here or there.
    """
    out: dict[str, Any] = {"url": _shown_url(spec.remote), "reachable": False, "error": None,
                           "behind": [], "parked": [], "why": None}
    try:
        repo = git.Repository(spec.path, base=spec.base, remote=spec.remote,
                              pushed_stores=(CATALOG_STORE_REF,))
    except (ChitError, ConfigurationError) as exc:
        out["error"] = str(exc) if isinstance(exc, ConfigurationError) else exc.message
        return out
    try:
        replica = repo.remote
        if replica is None:  # not reached: the spec names a remote
            return out
        try:
            heads = replica.remote.heads([LANE_PREFIX + "*", git.PARKED_PREFIX + "*"])
        except RemoteError as exc:
            out["error"] = exc.reason
            return out
        out["reachable"] = True
        local = pygit2.Repository(os.fspath(spec.path), RepositoryOpenFlag.NO_SEARCH)
        updates: dict[str, pygit2.Oid] = {}
        for lane in info["lanes"]:
            ref = "refs/heads/" + lane["lane"]
            mine = pygit2.Oid(hex=lane["commit"])
            lane["remote"] = _lane_state(local, mine, heads.get(ref))
            if lane["remote"] in ("behind", "missing"):
                out["behind"].append(lane["lane"])
                updates[ref] = mine
                record = _direct(local, git.Repository.provenance_ref(lane["agent"]))
                if record is not None:
                    updates[git.Repository.provenance_ref(lane["agent"])] = record
        for name in _names_under(local, git.PARKED_PREFIX):
            oid = _direct(local, name)
            if oid is not None and heads.get(name) != oid:
                out["parked"].append(name)
                updates[name] = oid
        if updates:
            store = _direct(local, CATALOG_STORE_REF)
            if store is not None:
                updates[CATALOG_STORE_REF] = store
            tried = replica.remote.push(updates, dry_run=True)
            out["why"] = (
                "the remote would take them now: an engine pushes them on its next retry "
                "or commit" if tried.reason is None else tried.reason
            )
    finally:
        repo.close()
    return out


def _lane_state(repo: pygit2.Repository, mine: pygit2.Oid, theirs: pygit2.Oid | None) -> str:
    """Where the remote's copy of a lane stands against the local one."""
    if theirs is None:
        return "missing"
    if theirs == mine:
        return "level"
    if repo.get(theirs) is None:
        return "unknown"  # the remote's head is not here: it moved on, or went elsewhere
    if repo.descendant_of(mine, theirs):
        return "behind"
    if repo.descendant_of(theirs, mine):
        return "remote_ahead"
    return "diverged"


def _direct(repo: pygit2.Repository, name: str) -> pygit2.Oid | None:
    try:
        ref = repo.references.get(name)
    except (pygit2.GitError, KeyError, ValueError):
        return None
    target = None if ref is None else ref.target
    return target if isinstance(target, pygit2.Oid) else None


def _names_under(repo: pygit2.Repository, prefix: str) -> list[str]:
    names = []
    for ref in repo.references.iterator():
        try:
            name = ref.name
        except (UnicodeDecodeError, ValueError):
            continue
        if name.startswith(prefix):
            names.append(name)
    return sorted(names)
