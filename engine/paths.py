"""Repository paths, scope globs and session ids for the engine, with its error codes.

The path rules and the matcher live in :mod:`policy.paths` (pure, shared with
policy evaluation; docs/token-format.md, "Paths and globs"); this module maps
their refusals to :class:`engine.errors` codes (docs/errors.md). Session ids,
which name a reference (``refs/chit/sessions/<session>``) and land in commit
trailers and the call log, are checked here too (docs/engine-api.md).
"""

from __future__ import annotations

import re
from typing import TypeGuard

from engine.errors import AccessDeniedError, InvalidRequestError
from engine.limits import LIMITS
from policy.paths import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    PathError,
    glob_contained,
    glob_matches,
    glob_may_match_below,
    in_scope,
    validate_glob,
)
from policy.paths import validate_path as _validate_path

__all__ = [
    "MAX_PATH_BYTES",
    "MAX_SEGMENT_BYTES",
    "glob_contained",
    "glob_matches",
    "glob_may_match_below",
    "in_scope",
    "is_session_id",
    "validate_glob",
    "validate_path",
    "validate_session_id",
]

_SESSION_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{LIMITS.session_id_chars - 1}}}")


def validate_path(path: object) -> str:
    """Check a repository path named by an agent (see :func:`policy.paths.validate_path`).

    Args:
        path: The untrusted value.

    Returns:
        ``path`` unchanged.

    Raises:
        InvalidRequestError: ``path_invalid``.
        AccessDeniedError: ``path_forbidden`` (``.git`` in any spelling).
    """
    try:
        return _validate_path(path)
    except PathError as exc:
        if exc.code == "path_forbidden":
            raise AccessDeniedError("path_forbidden", exc.message) from None
        raise InvalidRequestError("path_invalid", exc.message) from None


def is_session_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a session id: a name that is safe as one reference component.

    1 to ``LIMITS.session_id_chars`` (128) of ``[A-Za-z0-9._-]``, starting with a
    letter or digit, without ``..`` and not ending in ``.`` or ``.lock``: so
    ``refs/chit/sessions/<id>`` is always a valid reference name naming one file
    in one folder, and the id holds no newline, separator or traversal.
    """
    return (
        isinstance(value, str)
        and _SESSION_ID.fullmatch(value) is not None
        and ".." not in value
        and not value.endswith((".", ".lock"))
    )


def validate_session_id(value: object) -> str:
    """Check a session id named by an edge or a client (see :func:`is_session_id`).

    Args:
        value: The untrusted value.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidRequestError: ``invalid_argument`` if it is not a session id.
    """
    if not is_session_id(value):
        raise InvalidRequestError(
            "invalid_argument",
            "the session id must be 1-128 of [A-Za-z0-9._-], start with a letter or digit, "
            "hold no '..' and not end in '.' or '.lock'",
        )
    return value
