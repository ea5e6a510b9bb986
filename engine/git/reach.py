"""Which commits an agent may name by id: those a branch it may name reaches.

``read_file``, ``log`` and ``diff`` take a commit id; chit's own records
(``refs/chit/*``: provenance, catalogs, saved sessions) live in the same object
database, so an id alone must not reach them. A commit is visible when the base
(local or as last fetched) or a branch under ``refs/heads/`` reaches it
(docs/tools.md, "Views and scope").
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pygit2
from pygit2.enums import SortMode

from engine.errors import RepositoryError
from engine.git.base import base_heads
from engine.git.handle import Handle
from engine.limits import LIMITS

__all__ = ["is_visible_commit"]

_BRANCHES = "refs/heads/"
_KEPT = 4096  # remembered answers (facts about fixed heads, so never stale)
_answers: OrderedDict[tuple[str, str, tuple[str, ...]], bool] = OrderedDict()
_answers_lock = threading.Lock()


def _heads(handle: Handle) -> tuple[list[pygit2.Oid], list[pygit2.Oid]]:
    """The base's heads and every other branch head (ids, without repeats)."""
    repo = handle.repo
    try:
        bases = [commit.id for commit in base_heads(handle)]
    except RepositoryError:
        bases = []
    seen = set(bases)
    branches: list[pygit2.Oid] = []
    for ref in repo.references.iterator():
        if not ref.name.startswith(_BRANCHES):
            continue
        try:
            head = ref.peel(pygit2.Commit).id
        except (pygit2.GitError, KeyError, ValueError):
            continue
        if head not in seen:
            seen.add(head)
            branches.append(head)
    return bases, branches


def _reached(repo: pygit2.Repository, commit: pygit2.Oid, bases: list[pygit2.Oid],
             branches: list[pygit2.Oid]) -> bool:
    """Whether a base or a branch head is, or descends from, ``commit``."""
    if commit in bases or commit in branches:
        return True
    if any(repo.descendant_of(base, commit) for base in bases):
        return True
    if not branches:
        return False
    # What the branches hold beyond the base is usually little: walk just that.
    walker = repo.walk(branches[0], SortMode.NONE)
    for head in branches[1:]:
        walker.push(head)
    for base in bases:
        walker.hide(base)
    for walked, found in enumerate(walker):
        if found.id == commit:
            return True
        if walked >= LIMITS.ref_reach_commits:
            # Past the bound, ask each branch head alone (git's merge-base walk).
            return any(repo.descendant_of(head, commit) for head in branches)
    return False


def is_visible_commit(handle: Handle, commit: pygit2.Oid) -> bool:
    """Whether an agent may name ``commit`` by id.

    Args:
        handle: The repository.
        commit: A commit's id.

    Returns:
        True iff the base branch (local, or the remote's as last fetched) or a
        branch under ``refs/heads/`` (lanes included) points at ``commit`` or
        descends from it. Answers are remembered per set of heads, so a moved
        branch is asked again.
    """
    bases, branches = _heads(handle)
    key = (handle.repo.path, str(commit), tuple(str(head) for head in bases + branches))
    with _answers_lock:
        known = _answers.get(key)
        if known is not None:
            _answers.move_to_end(key)
            return known
    answer = _reached(handle.repo, commit, bases, branches)
    with _answers_lock:
        _answers[key] = answer
        while len(_answers) > _KEPT:
            _answers.popitem(last=False)
    return answer
