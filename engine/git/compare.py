"""How far a remote is behind the local lanes, asked now: for the background and ``chit doctor``.

One ``git ls-remote`` and, for ``chit doctor``, one ``git push --dry-run`` of
what the remote lacks; nothing moves on either side (docs/deployment.md, "Lanes
on the organisation's remote").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pygit2

from engine.git.base import base_heads
from engine.git.handle import Handle
from engine.git.names import LANE_PREFIX
from engine.git.reconcile import PARKED_PREFIX
from engine.git.refs import lane_ref, ref_target
from engine.git.remote import PushOutcome, Remote, RemoteError

__all__ = ["Unpushed", "compare_lanes", "unpushed"]


@dataclass
class Unpushed:
    """What the remote lacks, by agent, and what it holds of chit's stores.

    Attributes:
        behind: Agent to why its lane is not on the remote.
        parked: Agent to its parked references the remote lacks.
        stores: Store reference to the remote's head of it.
    """

    behind: dict[str, str] = field(default_factory=dict)
    parked: dict[str, set[str]] = field(default_factory=dict)
    stores: dict[str, pygit2.Oid] = field(default_factory=dict)


def unpushed(handle: Handle, remote: Remote, stores: Sequence[str]) -> Unpushed:
    """Every local lane whose head is not the remote's, and parked refs the remote lacks.

    Args:
        handle: The local repository.
        remote: Its remote.
        stores: The chit stores pushed with every lane commit.

    Raises:
        RemoteError: If the remote cannot be listed.
    """
    heads = remote.heads([LANE_PREFIX + "*", PARKED_PREFIX + "*", *stores])
    found = Unpushed(stores={s: heads[s] for s in stores if s in heads})
    repo = handle.repo
    for name in repo.references:
        if name.startswith(LANE_PREFIX):
            agent = name[len(LANE_PREFIX):]
            if _agent(agent) and heads.get(name) != ref_target(repo, lane_ref(agent)):
                found.behind[agent] = "not yet pushed"
        elif name.startswith(PARKED_PREFIX) and name not in heads:
            agent = name[len(PARKED_PREFIX):].split("/", 1)[0]
            if _agent(agent):  # else not a name chit parks under
                found.parked.setdefault(agent, set()).add(name)
                found.behind[agent] = "parked commits not yet pushed"
    return found


def _agent(name: str) -> bool:
    try:
        lane_ref(name)
    except ValueError:
        return False
    return True


def compare_lanes(handle: Handle, remote: Remote, stores: Sequence[str]) -> dict[str, Any]:
    """Compare every local lane with the remote now, for ``chit doctor``. Changes nothing.

    Args:
        handle: The local repository.
        remote: Its remote.
        stores: The chit stores pushed with every lane commit.

    Lists the remote (``git ls-remote``); for the lanes it lacks commits
    of, asks whether it would take them (``git push --dry-run``).

    Returns:
        ``{"url", "reachable", "error" (scrubbed, or None), "lanes":
        [{"lane", "state", "commits"}], "behind": [lane names], "would_push":
        None | True | the dry run's reason}``; ``state`` is ``level``,
        ``behind`` (``commits`` not on the remote), ``remote_ahead``,
        ``diverged`` or ``unknown`` (the remote's head is not fetched here);
        parked lane heads the remote lacks are ``behind`` too.
    """
    repo = handle.repo
    out: dict[str, Any] = {"url": remote.url.shown, "reachable": False, "error": None,
                           "lanes": [], "behind": [], "would_push": None}
    try:
        heads = remote.heads([LANE_PREFIX + "*", PARKED_PREFIX + "*"])
    except RemoteError as exc:
        out["error"] = exc.reason
        return out
    out["reachable"] = True
    updates: dict[str, pygit2.Oid] = {}
    for name in sorted(repo.references):
        if not name.startswith((LANE_PREFIX, PARKED_PREFIX)):
            continue
        local = ref_target(repo, name)
        if local is None:
            continue
        theirs = heads.get(name)
        state, commits = "level", 0
        if theirs != local:
            if theirs is None:
                state = "behind"
                walker = repo.walk(local)
                for base in base_heads(handle):
                    walker.hide(base.id)
                commits = sum(1 for _ in walker)
            elif repo.get(theirs) is None:
                state = "unknown"
            elif repo.descendant_of(local, theirs):
                state, commits = "behind", repo.ahead_behind(local, theirs)[0]
            elif repo.descendant_of(theirs, local):
                state = "remote_ahead"
            else:
                state = "diverged"
        shown = name.removeprefix("refs/heads/")
        out["lanes"].append({"lane": shown, "state": state, "commits": commits})
        if state == "behind":
            out["behind"].append(shown)
            updates[name] = local
    if updates:
        for store in stores:
            oid = ref_target(repo, store)
            if oid is not None:
                updates[store] = oid
        tried = remote.push(updates, dry_run=True)
        out["would_push"] = True if tried.outcome is PushOutcome.PUSHED else tried.reason
    return out
