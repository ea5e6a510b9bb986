"""Indexing a repository's base branch ahead of time (``chit index``, docs/semantic.md).

The first semantic call on a cold repository parses every file of its view;
an operator can pay for that before any agent does. The records land in the
persisted index every engine of the repository reads, so the next engine
starts warm.
"""

from __future__ import annotations

from typing import Any

from engine import git
from engine.errors import ConfigurationError
from engine.semantic.indexer import indexer_for
from engine.service.served import Served, ServedRepos

__all__ = ["index_base"]

_AGENT = "chit"  # the base view is the same for every agent; a valid name is all it needs


def _pick(repos: ServedRepos, name: str | None) -> Served:
    served = list(repos)
    if name is None:
        if len(served) != 1:
            names = ", ".join(repos.names)
            raise ConfigurationError(
                f"this engine serves {len(served)} repositories: name one ({names})")
        return served[0]
    for candidate in served:
        if candidate.name == name:
            return candidate
    raise ConfigurationError(f"this engine serves no repository named {name!r}")


def index_base(repos: ServedRepos, name: str | None = None) -> dict[str, Any]:
    """Index the base branch's tip of one served repository, persisting what it parses.

    Progress is reported through :mod:`engine.progress` (files indexed of how
    many) to whoever listens on this thread.

    Args:
        repos: The engine's repositories.
        name: The repository's name; ``None`` for an engine's only one.

    Returns:
        ``{"repo", "base", "commit", "files", "parsed", "loaded", "up_to_date"}``:
        files indexed in the base view, how many were parsed now and how
        many loaded from the persisted index; ``up_to_date`` when nothing
        needed parsing.

    Raises:
        ConfigurationError: If the engine serves no such repository, or
            several and ``name`` is ``None``.
        RepositoryError: If the base branch has no commit.
    """
    served = _pick(repos, name)
    repo = served.repo
    head = repo.base_head()
    indexer = indexer_for(repo)
    parsed, loaded = indexer.parsed, indexer.loaded
    tree = indexer.view(repo, _AGENT, git.StagedChange(base=head.id), None)
    parsed_now = indexer.parsed - parsed
    return {
        "repo": served.name,
        "base": repo.base,
        "commit": str(head.id),
        "files": len(tree.indexed),
        "parsed": parsed_now,
        "loaded": indexer.loaded - loaded,
        "up_to_date": parsed_now == 0,
    }
