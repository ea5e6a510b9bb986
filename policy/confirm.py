"""``[confirm]``: tools whose calls must say ``"confirm": true`` (docs/policy.md, "Confirmation").

Confirmation asks whether the caller meant it; it is not an approval by
someone else. A listed tool called without ``"confirm": true`` is answered
with ``confirmation_required`` and a preview, and changes nothing. Off by
default: a policy without ``[confirm]`` keeps its hash and every catalog.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from policy.tools import CHANGING_OPERATIONS, TOOL_OPERATIONS

__all__ = ["Confirm"]


def _list(value: object) -> object:
    """TOML arrays arrive as lists; the frozen model holds a tuple."""
    if isinstance(value, list | tuple):
        return tuple(value)
    raise ValueError("must be an array of tool names")


def _confirmable(value: str) -> str:
    """A tool that changes something: only such a call has anything to confirm."""
    operation = TOOL_OPERATIONS.get(value)
    if operation is None:
        raise ValueError(f"unknown tool {value!r}; known: {', '.join(sorted(TOOL_OPERATIONS))}")
    if operation not in CHANGING_OPERATIONS:
        changing = sorted(t for t, op in TOOL_OPERATIONS.items() if op in CHANGING_OPERATIONS)
        raise ValueError(
            f"{value!r} changes nothing, so there is nothing to confirm; "
            f"tools that can ask for confirmation: {', '.join(changing)}"
        )
    return value


def _distinct(value: tuple[str, ...]) -> tuple[str, ...]:
    twice = sorted({name for name in value if value.count(name) > 1})
    if twice:
        raise ValueError(f"lists {', '.join(repr(name) for name in twice)} more than once")
    return value


class Confirm(BaseModel):
    """The ``[confirm]`` table.

    Attributes:
        tools: Tool names (distinct, each a tool that changes something:
            ``write_file``, ``delete_file``, ``move_file``,
            ``resolve_conflict``, ``discard``, ``commit``,
            ``issue_sub_token``). Empty (the default): no tool asks.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    tools: Annotated[
        tuple[Annotated[str, AfterValidator(_confirmable)], ...],
        BeforeValidator(_list),
        AfterValidator(_distinct),
        Field(max_length=len(TOOL_OPERATIONS)),
    ] = ()

    def covers(self, tool: str) -> bool:
        """Whether a call of ``tool`` must carry ``"confirm": true``.

        Args:
            tool: A tool name, exactly as declared.

        Returns:
            True iff ``tool`` is listed.
        """
        return tool in self.tools
