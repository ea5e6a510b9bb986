"""Repository names and the globs of the ``repos`` caveat: validation, matching, containment.

An engine serves repositories by name (docs/deployment.md, "Several
repositories"); a token names the repositories it is good for with ``repos``
caveats whose globs are matched against those names (docs/token-format.md,
*Repositories*). Names and globs are short ASCII, matched and contained
as one path segment is (policy/segments.py). Pure: strings in, a value or an error out.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from engine.limits import LIMITS
from policy.segments import segment_contained, segment_matches

__all__ = [
    "repo_glob_contained",
    "repo_identity",
    "repo_in_scopes",
    "repo_matches",
    "validate_repo_glob",
    "validate_repo_name",
]

_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{LIMITS.repo_name_chars - 1}}}", re.ASCII)
_GLOB = re.compile(rf"[A-Za-z0-9._*?-]{{1,{LIMITS.repo_name_chars}}}", re.ASCII)


def validate_repo_name(name: object) -> str:
    """Check a repository's name and return it unchanged.

    A name is 1 to ``LIMITS.repo_name_chars`` characters of ``A-Z a-z 0-9 . _
    -``, starting with a letter or digit: one path component, never ``.`` or
    ``..``, no ``/``, NUL, glob character or space. Names are compared exactly
    (case matters: ``App`` is not ``app``).

    Args:
        name: The candidate (untrusted, any type).

    Returns:
        ``name``.

    Raises:
        ValueError: If it is not such a name; the message never repeats it.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValueError(
            f"a repository name is 1-{LIMITS.repo_name_chars} of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return name


def repo_identity(name: str) -> str:
    """The form two repository names are compared in when one may stand for the other.

    Case is folded and ``-`` read as ``_`` (``My-Repo`` and ``my_repo`` are one
    identity): the rule that keeps an engine from serving two names one is
    easily taken for (engine/service/repos.py) and that compares the name an
    artefact recorded with the name it is served under (docs/vital-signs.md).
    Glob matching and ``repos`` caveats still compare names exactly.

    Args:
        name: A repository name (:func:`validate_repo_name`).

    Returns:
        Its identity: lower case, ``_`` for ``-``.
    """
    return name.casefold().replace("-", "_")


def validate_repo_glob(glob: object) -> str:
    """Check one glob of a ``repos`` caveat and return it unchanged.

    A glob is 1 to ``LIMITS.repo_name_chars`` characters of the name alphabet
    plus ``*`` (any run of characters) and ``?`` (exactly one); ``**``, ``.``
    and ``..`` are refused, and every other character (``/``, ``[``, NUL,
    space) is refused too, so no glob reads two ways.

    Args:
        glob: The candidate (untrusted, any type).

    Returns:
        ``glob``.

    Raises:
        ValueError: If it is not such a glob; the message never repeats it.
    """
    if (
        not isinstance(glob, str)
        or _GLOB.fullmatch(glob) is None
        or "**" in glob
        or glob in (".", "..")
    ):
        raise ValueError(
            f"a repository glob is 1-{LIMITS.repo_name_chars} of A-Z a-z 0-9 . _ - * ?, "
            "without '**'"
        )
    return glob


@functools.lru_cache(maxsize=4096)
def repo_matches(glob: str, name: str) -> bool:
    """Whether ``glob`` matches all of the repository name ``name`` (fails closed).

    Args:
        glob: A repository glob (an invalid one matches nothing).
        name: A repository name (an invalid one is matched by nothing).

    Returns:
        True iff ``*`` and ``?`` can be read so that ``glob`` spells ``name``.
    """
    try:
        validate_repo_glob(glob)
        validate_repo_name(name)
    except ValueError:
        return False
    return segment_matches(glob, name)


def repo_in_scopes(name: str, scopes: Sequence[Sequence[str]]) -> bool:
    """Whether ``name`` matches some glob of every scope (``True`` for no scope at all).

    Args:
        name: A repository name.
        scopes: One glob list per ``repos`` caveat; an empty list matches nothing.

    Returns:
        The intersection's verdict (``False`` for an invalid name, whatever the
        scopes). Whether no scope at all is good enough is the caller's rule (a
        token whose root block names no repository is good only where the
        engine serves exactly one).
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        return False
    return all(any(repo_matches(glob, name) for glob in scope) for scope in scopes)


@functools.lru_cache(maxsize=4096)
def repo_glob_contained(inner: str, outer: str) -> bool:
    """Whether every name ``inner`` matches is matched by ``outer`` (a sound check).

    ``outer``'s ``*`` may absorb any run of ``inner``'s characters, wildcards
    included; ``outer``'s ``?`` one literal or one ``?``; literals must be
    equal; ``inner``'s ``*`` only by ``outer``'s ``*``. True only when
    containment is certain (``app-*`` is within ``*``, ``*`` is not within
    ``app-*``).

    Args:
        inner: A repository glob (an invalid one is never contained).
        outer: A repository glob (an invalid one contains nothing).

    Returns:
        True iff containment is proven.
    """
    try:
        validate_repo_glob(inner)
        validate_repo_glob(outer)
    except ValueError:
        return False
    return segment_contained(inner, outer)
