"""Vital signs of lag: the remote behind, the call log's unsigned tail, a stale index, the policy.

Beside coherence (engine/service/coherence.py: was an artefact made for this
engine?), these say whether something has fallen behind. Each is signal-only
(docs/vital-signs.md): it never refuses, delays or changes a call, and a sign
that cannot be read is silent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from engine.errors import ChitError, StoreError
from engine.limits import LIMITS
from engine.service.coherence import Identity, Signal, check_pending, check_store, store_record
from engine.service.served import Served, ServedRepos
from engine.state import Store

__all__ = [
    "call_log_sign",
    "freshness_sign",
    "policy_sign",
    "recorded_store_sign",
    "signs_for_status",
    "store_sign",
]

logger = logging.getLogger("chit.engine")


def store_sign(store: Store, served: list[Identity], *, record: bool) -> Signal | None:
    """The state store's sign: whose it records it is, against the repositories served.

    A store with no record (new, or from before records) becomes this
    engine's: its record is written when ``record`` is true, and the sign is
    silent either way.

    Args:
        store: The state store.
        served: The identities of the repositories this engine serves.
        record: Write this engine's record into a store that has none
            (``False`` for a read-only engine).

    Returns:
        ``None`` (silent: no record, an unreadable or oversized one), or
        :func:`engine.service.coherence.check_store`'s signal.
    """
    mine = json.dumps(store_record(served), sort_keys=True)
    try:
        text = store.recorded_owner()
        if text is None:
            if record:
                store.record_owner(mine)
            return None
    except StoreError:
        return None
    return recorded_store_sign(text, served)


def recorded_store_sign(
    text: str | None, served: list[Identity], *, names: bool = True
) -> Signal | None:
    """The state store's sign from its record as read (read only: ``chit doctor``).

    Args:
        text: Untrusted: the store's record (JSON text), or ``None``.
        served: The identities of the repositories served.
        names: Compare names (``False``: the names served under are not known).

    Returns:
        ``None`` (silent: no record, an oversized or malformed one), or
        :func:`engine.service.coherence.check_store`'s signal.
    """
    if text is None or len(text) > LIMITS.identity_record_bytes:
        return None
    try:
        return check_store(served, json.loads(text), names=names)
    except (ValueError, RecursionError):
        return None


def call_log_sign(store: Store, now: float) -> Signal | None:
    """The ``call_log`` sign: entries left unsigned longer than a checkpoint should take.

    An engine signs a checkpoint within ``calllog_checkpoint_seconds`` of an
    append; a tail older than that plus ``vital_tail_grace_seconds`` means no
    engine is signing (one stopped uncleanly, or its checkpoints fail).

    Args:
        store: The state store (read only here).
        now: Unix seconds.

    Returns:
        ``unsigned_tail`` with the oldest unsigned entry's age and time,
        ``ok`` when the log is signed to its end or its tail is young,
        ``None`` (silent) when there is no log yet or it cannot be read.
    """
    try:
        tree = store.log_tree()
        if tree is None or tree.size <= tree.signed:
            return None if tree is None else Signal("call_log", "ok", "signed to its end")
        first = _first_unsigned(_rows_since(store, tree.signed_at), tree.signed)
    except (StoreError, ValueError):
        return None
    if first is None:
        return None
    age = int(now) - first
    if age <= LIMITS.calllog_checkpoint_seconds + LIMITS.vital_tail_grace_seconds:
        return Signal("call_log", "ok", "its unsigned tail is younger than a checkpoint takes")
    unsigned = tree.size - tree.signed
    return Signal("call_log", "unsigned_tail",
                  f"{unsigned} entries have waited {age} s for a signed checkpoint "
                  f"(one is due every {LIMITS.calllog_checkpoint_seconds:g} s)",
                  age_seconds=age, since=first)


def _rows_since(store: Store, signed_at: int) -> Iterator[Any]:
    return store.log_rows(since=signed_at if isinstance(signed_at, int) else 0, batch=64)


def _first_unsigned(rows: Iterator[Any], signed: int) -> int | None:
    """The time of the first row after ``signed`` (read at most one checkpoint's worth)."""
    for read, row in enumerate(rows):
        if read >= LIMITS.calllog_checkpoint_entries:
            return None
        if isinstance(row.seq, int) and row.seq > signed:
            return row.time if isinstance(row.time, int) else None
    return None


def freshness_sign(indexed: tuple[str, str] | None, head: str, tree: str) -> Signal | None:
    """The ``semantic_index_freshness`` sign: has the index indexed the base head?

    The persisted index is filled as views are asked for; it records the base
    head it last indexed (``meta`` key ``indexed``). Compared by tree, so a
    head that moved without changing a file is fresh.

    Args:
        indexed: ``(commit, tree)`` recorded, or ``None`` (silent: nothing
            indexed the base yet, or an index from before the record).
        head: The base branch's head commit (hex).
        tree: Its tree (hex).

    Returns:
        ``None``, ``ok``, or ``stale`` with ``expected`` the base head and
        ``found`` the commit indexed.
    """
    if indexed is None:
        return None
    commit, indexed_tree = indexed
    if indexed_tree == tree:
        return Signal("semantic_index_freshness", "ok", "the base head is indexed")
    return Signal("semantic_index_freshness", "stale",
                  "the base branch moved since it was last indexed; the next semantic "
                  "query on it indexes it", expected=head, found=commit)


def policy_sign(problem: str | None) -> Signal:
    """The ``policy`` sign: ``invalid`` with why (every call is refused), else ``ok``."""
    if problem is None:
        return Signal("policy", "ok", "valid")
    return Signal("policy", "invalid", f"{problem}; every call is refused until it is fixed")


def signs_for_status(repos: ServedRepos, served: Served, store: Store, *, agent: str,
                     now: float) -> list[dict[str, Any]]:
    """Every sign ``status`` carries for one repository, that is not silent.

    Coherence (:meth:`ServedRepos.coherence`, ``ok`` included), then the
    signs of lag only when something lags: the remote (only the caller's own
    lane named), the call log and the index's freshness. A sign that fails
    to read is left out; this never raises.

    Args:
        repos: The engine's repositories.
        served: The repository of the call.
        store: The state store.
        agent: The caller's agent name.
        now: Unix seconds.

    Returns:
        ``[{sign, state, reason, ...}]`` (:meth:`Signal.as_dict`).
    """
    out: list[Signal] = []
    for lag, read in (
        (False, lambda: repos.coherence(served)),
        (True, lambda: [check_pending(served.repo.remote_report(), f"agent/{agent}")]),
        (True, lambda: [call_log_sign(store, now)]),
        (True, lambda: [_freshness(served)]),
    ):
        try:
            out.extend(sign for sign in read()
                       if sign is not None and not (lag and sign.state == "ok"))
        except (ChitError, StoreError, OSError, ValueError) as exc:
            logger.debug("a vital sign could not be read (%s)", type(exc).__name__)
    return [sign.as_dict() for sign in out]


def _freshness(served: Served) -> Signal | None:
    if served.index is None:
        return None
    head = served.repo.base_head()
    return freshness_sign(served.index.recorded_indexed(), str(head.id), str(head.tree_id))
