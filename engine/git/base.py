"""The base branch: which one it is, where a remote's copy is kept, and its head.

The base is the branch the repository's ``HEAD`` names (``main``, ``master``,
``trunk``) unless the operator names one; chit reads it and never writes it.
With a remote, its copy fetched from there (``refs/chit/upstream/heads/<base>``)
stands for it (docs/architecture.md, "Version control").
"""

from __future__ import annotations

import pygit2
from pygit2.enums import RepositoryOpenFlag

from engine.errors import ConfigurationError, RepositoryError
from engine.git.handle import Handle, reference
from engine.git.names import BRANCH_NAME, LANE_PREFIX, UPSTREAM_PREFIX

__all__ = ["base_head", "base_heads", "base_ref", "default_base", "tracking_ref"]


def tracking_ref(ref: str) -> str:
    """The local reference that keeps what a remote's ``ref`` was when last fetched.

    Args:
        ref: A full reference name under ``refs/``.

    Returns:
        ``refs/chit/upstream/`` followed by ``ref`` without ``refs/``.
    """
    return UPSTREAM_PREFIX + ref.removeprefix("refs/")


def default_base(commondir: str) -> str:
    """The branch the repository's ``HEAD`` names, as a full reference name.

    The repository's own ``HEAD``, in its common directory: for a linked
    worktree, the main worktree's, not the branch the linked one has out.

    Args:
        commondir: The repository's common git directory.

    Raises:
        ConfigurationError: If ``HEAD`` is detached or names no branch chit
            could use as a base (see :func:`base_ref`).
    """
    try:
        repo = pygit2.Repository(commondir, RepositoryOpenFlag.NO_SEARCH)
        target = repo.references["HEAD"].target
    except (KeyError, pygit2.GitError, ValueError, OSError):
        target = None
    if not isinstance(target, str) or not target.startswith("refs/heads/"):
        raise ConfigurationError(
            "the repository's HEAD names no branch; name the base branch (base = \"...\")"
        )
    return base_ref(target.removeprefix("refs/heads/"))


def base_ref(name: str) -> str:
    """The full reference name of a base branch given by the operator.

    Args:
        name: A branch name (``master``, ``release/2.0``) or ``refs/heads/...``.

    Returns:
        ``refs/heads/<name>``.

    Raises:
        ConfigurationError: If it is not a valid branch name, or is a lane
            (``agent/...``): chit writes lanes, and never writes its base.
    """
    if not isinstance(name, str):
        raise ConfigurationError("the base branch must be a branch name")
    short = name.removeprefix("refs/heads/")
    full = "refs/heads/" + short
    if (
        not BRANCH_NAME.fullmatch(short)
        or short.startswith("refs/")
        or not pygit2.reference_is_valid_name(full)
    ):
        raise ConfigurationError("the base branch is not a valid branch name")
    if full.startswith(LANE_PREFIX):
        raise ConfigurationError("the base branch cannot be an agent lane (agent/...)")
    return full


def base_heads(handle: Handle) -> list[pygit2.Commit]:
    """Every commit that stands for the base: the remote's as last fetched, then the local.

    Raises:
        RepositoryError: ``not_found`` if neither exists or names a commit.
    """
    found = []
    for name in (handle.upstream_ref, handle.base_ref):
        if name is None:
            continue
        ref = reference(handle.repo, name)
        if ref is None:
            continue
        try:
            found.append(ref.peel(pygit2.Commit))
        except (pygit2.GitError, KeyError, ValueError):
            continue
    if not found:
        raise RepositoryError("not_found", "the base branch is missing")
    return found


def base_head(handle: Handle) -> pygit2.Commit:
    """The commit the base branch points at, as the engine sees it.

    With a remote, the remote's base as last fetched
    (:attr:`Handle.upstream_ref`), else the local base branch.

    Raises:
        RepositoryError: ``not_found`` if the base branch is missing or names
            no commit.
    """
    return base_heads(handle)[0]
