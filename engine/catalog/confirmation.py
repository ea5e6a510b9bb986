"""The ``confirm`` argument: what a tool listed under the policy's ``[confirm]`` takes.

For a token whose offer holds such a tool, the tool's input model gains an
optional ``confirm`` boolean (default false), so its input schema, and the
catalog hash, say so; other tools keep their models and refuse the argument
as an unknown one (docs/tools.md, "Confirmation"; docs/catalog-encoding.md).
"""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel, Field, create_model

__all__ = ["CONFIRM_ARGUMENT", "confirmable", "confirmed"]

CONFIRM_ARGUMENT = "confirm"
"""The argument's name."""

_DESCRIPTION = (
    "Set true to carry the call out. Without it nothing changes: the answer is "
    "confirmation_required with a preview of what the call would do."
)


@cache
def confirmable(model: type[BaseModel]) -> type[BaseModel]:
    """The input model ``model`` with an optional ``confirm`` boolean.

    The new model has the same name, docstring and configuration (strict,
    closed, frozen), so its JSON Schema is ``model``'s with one more property
    (``{"type": "boolean", "default": false, ...}``), never a required one.
    Handlers get an instance of a subclass of ``model``.

    Args:
        model: A tool's input model.

    Returns:
        The subclass (one per model: repeated calls return the same class).
    """
    made: type[BaseModel] = create_model(
        model.__name__,
        __base__=model,
        __doc__=model.__doc__,
        __module__=model.__module__,
        confirm=(bool, Field(default=False, title="Confirm", description=_DESCRIPTION)),
    )
    return made


def confirmed(args: BaseModel) -> bool:
    """Whether validated arguments say ``"confirm": true``.

    Args:
        args: A call's validated arguments.

    Returns:
        True only for a model made by :func:`confirmable` whose ``confirm`` is true.
    """
    return getattr(args, CONFIRM_ARGUMENT, False) is True
