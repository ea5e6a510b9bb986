"""A call's arguments: validated against the tool's input model, paths checked for scope.

Step 3 of the ordered check (docs/architecture.md): every path argument is
validated and must lie inside every block's scope; a ``path`` filter (``log``,
``diff``) must have something in scope under it, so it cannot probe outside.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from engine.auth.verify import VerifiedToken
from engine.catalog.declarations import ToolSpec
from engine.errors import AccessDeniedError, InvalidRequestError
from engine.paths import glob_may_match_below, validate_path

__all__ = ["parse_arguments", "scoped_paths"]

_PROBLEMS_SAID = 5  # the fields whose problem the message states; ``fields`` names them all
_PROBLEM_CHARS = 160  # of one problem's text


def parse_arguments(spec: ToolSpec, arguments: dict[str, Any] | None) -> BaseModel:
    """Validate a call's JSON arguments against the tool's input model.

    Args:
        spec: The tool called.
        arguments: The JSON arguments object (``None`` is no arguments).

    Returns:
        The validated arguments.

    Raises:
        InvalidRequestError: ``invalid_argument``, ``fields`` naming what is
            wrong and the message saying why, bounds included ("limit: Input
            should be less than or equal to 500"); never the value given.
    """
    try:
        return spec.input_model.model_validate(arguments or {})
    except ValidationError as exc:
        problems: dict[str, str] = {}
        for error in exc.errors(include_input=False, include_url=False):
            field = ".".join(str(p) for p in error["loc"]) or "(arguments)"
            problems.setdefault(field, str(error["msg"])[:_PROBLEM_CHARS])
        fields = sorted(problems)
        said = "; ".join(f"{f}: {problems[f]}" for f in fields[:_PROBLEMS_SAID])
        raise InvalidRequestError(
            "invalid_argument", f"invalid arguments for this tool: {said}", fields=fields
        ) from None


def scoped_paths(spec: ToolSpec, args: BaseModel, token: VerifiedToken) -> tuple[str, ...]:
    """Check a call's paths against the token's scope; return them for the policy.

    Args:
        spec: The tool called.
        args: Its validated arguments.
        token: The verified token of the call.

    Returns:
        The validated path arguments, then the ``path`` filter if the tool has one.

    Raises:
        InvalidRequestError: ``path_invalid`` for a path that is not valid.
        AccessDeniedError: ``path_forbidden`` for ``.git`` in any spelling;
            ``path_outside_scope`` for a path argument outside the scope, or a
            filter with nothing in scope under it.
    """
    paths = []
    for name in spec.path_args:
        path = validate_path(getattr(args, name))
        if not token.allows_path(path):
            raise AccessDeniedError(
                "path_outside_scope", f"{path!r} is outside this token's scope"
            )
        paths.append(path)
    value = getattr(args, "path", None)
    if "path" not in spec.path_args and value is not None:
        # A filter (log, diff): a file or folder with something in scope under it.
        # Results are pruned to scope; the filter itself must not probe outside.
        paths.append(_check_filter(token, validate_path(value)))
    return tuple(paths)


def _check_filter(token: VerifiedToken, path: str) -> str:
    if token.allows_path(path):
        return path
    if token.path_scopes and all(
        any(glob_may_match_below(g, path) for g in globs) for globs in token.path_scopes
    ):
        return path
    raise AccessDeniedError("path_outside_scope", f"{path!r} is outside this token's scope")
