"""Repository paths and scope globs for the engine, with the engine's error codes.

The rules and the matcher live in :mod:`policy.paths` (pure, shared with policy
evaluation; docs/token-format.md, "Paths and globs"); this module maps their
refusals to :class:`engine.errors` codes (docs/errors.md).
"""

from __future__ import annotations

from engine.errors import AccessDeniedError, InvalidRequestError
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
    "validate_glob",
    "validate_path",
]


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
