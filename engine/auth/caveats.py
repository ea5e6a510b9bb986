"""Caveats of chit tokens: reading a block's caveats, writing new ones, intersecting them.

A caveat is a ``[type, value]`` pair; a token grants the intersection of every
caveat of every block, and an unknown or malformed caveat fails the token
(docs/token-format.md, *Caveats*). Pure: values in, a value or an error out.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.auth.reponames import validate_repo_glob
from engine.errors import CaveatError
from engine.limits import LIMITS
from engine.paths import validate_glob

__all__ = [
    "OPERATIONS",
    "Caveats",
    "Grant",
    "encode_ops",
    "encode_paths",
    "encode_repos",
    "encode_time",
    "interpret",
    "intersect",
    "root_caveats",
]

OPERATIONS: frozenset[str] = frozenset({"read", "write", "commit", "sub-token:issue"})
_CAVEAT_TYPES = frozenset({"ops", "paths", "repos", "exp", "nbf", "deleg"})


@dataclass(frozen=True)
class Caveats:
    """The caveats of one block, interpreted.

    Attributes:
        ops: Operations this block allows, or ``None`` if it states none.
        path_lists: One glob list per ``paths`` caveat in the block (empty: none
            stated). A path passes the block iff every list has a matching glob.
        expires_at: Earliest expiry stated in the block (unix seconds), or ``None``.
        not_before: Latest not-before stated in the block (unix seconds), or ``None``.
        delegable: The delegation flag as stated (``None``: not stated).
        repo_lists: One glob list per ``repos`` caveat in the block (empty:
            none stated). A repository passes the block iff every list has a
            glob matching its name.
    """

    ops: frozenset[str] | None = None
    path_lists: tuple[tuple[str, ...], ...] = ()
    expires_at: int | None = None
    not_before: int | None = None
    delegable: bool | None = None
    repo_lists: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Grant:
    """What a run of blocks grants together: their caveats intersected.

    Attributes:
        operations: Operations every block that states some allows (empty if
            none states any).
        path_scopes: Every ``paths`` caveat's globs, root block first.
        expires_at: The earliest expiry, unix seconds, or ``None`` if none is stated.
        not_before: The latest not-before, unix seconds, or ``None``.
        delegable: The delegation flag: granted by the root block, kept unless a
            later block drops it.
        repo_scopes: Every ``repos`` caveat's globs, root block first.
        single_repo_only: The root block states no ``repos`` caveat: the token
            is good only on an engine serving exactly one repository, whatever
            later blocks say (they can only narrow).
    """

    operations: frozenset[str]
    path_scopes: tuple[tuple[str, ...], ...]
    expires_at: int | None
    not_before: int | None
    delegable: bool
    repo_scopes: tuple[tuple[str, ...], ...] = ()
    single_repo_only: bool = True


def interpret(items: list[Any]) -> Caveats:
    """Interpret one block's caveat list, failing closed.

    Args:
        items: The block's decoded ``caveats`` list (untrusted).

    Returns:
        The block's :class:`Caveats`; repeated caveats within it intersect.

    Raises:
        CaveatError: ``caveat_unknown`` for a type this engine does not know,
            ``caveat_malformed`` for a value of the wrong type or form.
    """
    ops: frozenset[str] | None = None
    exp: int | None = None
    nbf: int | None = None
    deleg: bool | None = None
    path_lists: list[tuple[str, ...]] = []
    repo_lists: list[tuple[str, ...]] = []
    for item in items:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
            raise CaveatError("caveat_malformed", "a caveat is a [type, value] pair")
        kind, value = item
        if kind not in _CAVEAT_TYPES:
            raise CaveatError(
                "caveat_unknown", "the token carries a caveat type this engine does not know"
            )
        if kind == "ops":
            stated = _check_ops(value)
            ops = stated if ops is None else ops & stated
        elif kind == "paths":
            path_lists.append(_check_paths(value))
        elif kind == "repos":
            repo_lists.append(_check_repos(value))
        elif kind == "exp":
            t = _check_time(kind, value)
            exp = t if exp is None else min(exp, t)
        elif kind == "nbf":
            t = _check_time(kind, value)
            nbf = t if nbf is None else max(nbf, t)
        else:
            if not isinstance(value, bool):
                raise _caveat_malformed(kind, "must be true or false")
            deleg = value if deleg is None else (deleg and value)
    return Caveats(ops, tuple(path_lists), exp, nbf, deleg, tuple(repo_lists))


@functools.lru_cache(maxsize=LIMITS.grant_cache_entries)
def intersect(per_block: tuple[Caveats, ...]) -> Grant:
    """The intersection of the given blocks' caveats (memoised: a pure function).

    Args:
        per_block: Each block's caveats, root block first.

    Returns:
        The :class:`Grant` of those blocks together.
    """
    stated_ops = [c.ops for c in per_block if c.ops is not None]
    expiries = [c.expires_at for c in per_block if c.expires_at is not None]
    not_befores = [c.not_before for c in per_block if c.not_before is not None]
    return Grant(
        operations=frozenset.intersection(*stated_ops) if stated_ops else frozenset(),
        path_scopes=tuple(globs for c in per_block for globs in c.path_lists),
        expires_at=min(expiries) if expiries else None,
        not_before=max(not_befores) if not_befores else None,
        # Granted only by the root block; any later block may only drop it.
        delegable=per_block[0].delegable is True
        and all(c.delegable is not False for c in per_block[1:]),
        repo_scopes=tuple(globs for c in per_block for globs in c.repo_lists),
        # Only the root block can bind a token to named repositories: a token
        # minted without (before the caveat existed) stays a one-repository
        # token, so an attenuation adding ["repos", ["*"]] widens nothing.
        single_repo_only=not per_block[0].repo_lists,
    )


def _caveat_malformed(kind: str, reason: str) -> CaveatError:
    return CaveatError("caveat_malformed", f"caveat {kind!r} is malformed: {reason}")


def _check_ops(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _caveat_malformed("ops", "must be a list of operation names")
    if len(set(value)) != len(value) or not set(value) <= OPERATIONS:
        raise _caveat_malformed("ops", f"operations are distinct names from {sorted(OPERATIONS)}")
    return frozenset(value)


def _check_paths(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > LIMITS.caveat_globs:
        raise _caveat_malformed("paths", f"must be a list of at most {LIMITS.caveat_globs} globs")
    if not all(isinstance(v, str) and len(v) <= LIMITS.glob_chars for v in value):
        raise _caveat_malformed(
            "paths", f"globs are text of at most {LIMITS.glob_chars} characters"
        )
    try:
        return tuple(validate_glob(v) for v in value)
    except ValueError:
        raise _caveat_malformed("paths", "a glob is invalid") from None


def _check_repos(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > LIMITS.caveat_globs:
        raise _caveat_malformed("repos", f"must be a list of at most {LIMITS.caveat_globs} globs")
    try:
        return tuple(validate_repo_glob(v) for v in value)
    except ValueError:
        raise _caveat_malformed("repos", "a repository glob is invalid") from None


def _check_time(kind: str, value: object) -> int:
    ceiling = LIMITS.caveat_time_ceiling_seconds
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < ceiling:
        raise _caveat_malformed(kind, "must be an integer number of seconds since the epoch")
    return value


# --- writing caveats for a new block ---------------------------------------------


def encode_ops(operations: Iterable[str]) -> list[str]:
    """The value of an ``ops`` caveat: the operations, distinct and sorted.

    Raises:
        ValueError: If an operation is not one of :data:`OPERATIONS`.
    """
    ops = sorted(set(operations))
    if not set(ops) <= OPERATIONS:
        raise ValueError(f"operations must be among {sorted(OPERATIONS)}")
    return ops


def encode_paths(paths: Sequence[str]) -> list[str]:
    """The value of a ``paths`` caveat: 1 to ``LIMITS.caveat_globs`` valid NFC globs.

    Raises:
        ValueError: If ``paths`` is one string, empty or too long, or a glob is
            not NFC text of at most ``LIMITS.glob_chars`` characters or is invalid.
    """
    if isinstance(paths, str):
        raise ValueError("paths must be a list of globs, not one string")
    if not 1 <= len(paths) <= LIMITS.caveat_globs:
        raise ValueError(f"give 1 to {LIMITS.caveat_globs} path globs")
    for glob in paths:
        if not isinstance(glob, str) or len(glob) > LIMITS.glob_chars:
            raise ValueError(f"globs are text of at most {LIMITS.glob_chars} characters")
        if not unicodedata.is_normalized("NFC", glob):
            raise ValueError("globs must be NFC-normalised text")
    return [validate_glob(p) for p in paths]


def encode_repos(repos: Sequence[str]) -> list[str]:
    """The value of a ``repos`` caveat: 1 to ``LIMITS.caveat_globs`` repository globs.

    Raises:
        ValueError: If ``repos`` is one string, empty or too long, or a glob is
            invalid (:func:`engine.auth.reponames.validate_repo_glob`).
    """
    if isinstance(repos, str):
        raise ValueError("repos must be a list of globs, not one string")
    if not 1 <= len(repos) <= LIMITS.caveat_globs:
        raise ValueError(f"give 1 to {LIMITS.caveat_globs} repository globs")
    return [validate_repo_glob(r) for r in repos]


def encode_time(t: int) -> int:
    """The value of an ``exp`` or ``nbf`` caveat: unix seconds below the ceiling.

    The ceiling is ``LIMITS.caveat_time_ceiling_seconds`` (year 6325).

    Raises:
        ValueError: If ``t`` is not a positive integer below the ceiling.
    """
    ceiling = LIMITS.caveat_time_ceiling_seconds
    if isinstance(t, bool) or not isinstance(t, int) or not 0 < t < ceiling:
        raise ValueError("times are positive integer unix seconds")
    return t


def root_caveats(
    operations: Iterable[str],
    paths: Sequence[str],
    expires_at: int,
    not_before: int | None,
    delegable: bool,
    repos: Sequence[str] | None = None,
) -> list[list[Any]]:
    """The caveat list of a root block.

    Args:
        operations: Subset of :data:`OPERATIONS`.
        paths: Path globs.
        expires_at: Expiry, unix seconds.
        not_before: Not-before, unix seconds, or ``None`` (left out).
        delegable: Grant the delegation flag (left out when false).
        repos: Repository globs, or ``None`` (left out: a token good only on
            an engine serving exactly one repository).

    Returns:
        ``[["ops", ...], ["paths", ...]]``, then ``["repos", ...]`` when given,
        ``["exp", ...]``, then ``nbf`` and ``deleg`` when given.

    Raises:
        ValueError: If any argument is outside its domain.
    """
    caveats: list[list[Any]] = [
        ["ops", encode_ops(operations)],
        ["paths", encode_paths(paths)],
    ]
    if repos is not None:
        caveats.append(["repos", encode_repos(repos)])
    caveats.append(["exp", encode_time(expires_at)])
    if not_before is not None:
        caveats.append(["nbf", encode_time(not_before)])
    if delegable:
        caveats.append(["deleg", True])
    return caveats
