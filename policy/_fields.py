"""Field types and validators shared by the policy's models (policy/model.py, policy/approval.py).

The tool and operation names a policy may use, and the selectors and checks
every table reuses, so that ``[[rules]]`` and ``[[approval]]`` validate alike.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from policy._agents import validate_agent_pattern
from policy.paths import validate_glob
from policy.tools import OPERATIONS, TOOL_OPERATIONS

MAX_SELECTORS = 256
"""Most entries in one rule's ``agents``, ``tools``, ``operations`` or ``paths``."""

MAX_REASON_CHARS = 200
"""Longest rule ``reason``."""


# --- field helpers -------------------------------------------------------------


def _array(value: object) -> object:
    """TOML arrays arrive as lists; the frozen models hold tuples."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, tuple):
        return value
    raise ValueError("must be an array")


def _non_empty(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ValueError("must not be empty; leave the key out to match everything")
    return value


def _distinct(value: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(value)) != len(value):
        raise ValueError("lists the same entry twice")
    return value


def _known(known: frozenset[str] | dict[str, str], noun: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in known:
            raise ValueError(f"unknown {noun} {value!r}; known: {', '.join(sorted(known))}")
        return value

    return check


_REPO_GLOB = re.compile(r"[A-Za-z0-9._*?-]{1,64}", re.ASCII)


def _repo_glob(value: str) -> str:
    """A repository name glob, as the engine's ``repos`` caveat takes it (docs/token-format.md)."""
    if _REPO_GLOB.fullmatch(value) is None or "**" in value or value in (".", ".."):
        raise ValueError("a repository glob is 1-64 of A-Z a-z 0-9 . _ - * ?, without '**'")
    return value


_Glob = Annotated[str, AfterValidator(validate_glob)]
_AgentPattern = Annotated[str, AfterValidator(validate_agent_pattern)]
_Tool = Annotated[str, AfterValidator(_known(TOOL_OPERATIONS, "tool"))]
_Operation = Annotated[str, AfterValidator(_known(OPERATIONS, "operation"))]

_Globs = Annotated[
    tuple[_Glob, ...],
    BeforeValidator(_array),
    AfterValidator(_distinct),
    Field(max_length=MAX_SELECTORS),
]


def _selection(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """An optional selector: absent matches everything; present, it must say something."""
    if value is None:
        return None
    if len(value) > MAX_SELECTORS:
        raise ValueError(f"has more than {MAX_SELECTORS} entries")
    return _distinct(_non_empty(value))


_Agents = Annotated[
    tuple[_AgentPattern, ...] | None, BeforeValidator(_array), AfterValidator(_selection)
]
_Tools = Annotated[tuple[_Tool, ...] | None, BeforeValidator(_array), AfterValidator(_selection)]
_Operations = Annotated[
    tuple[_Operation, ...] | None, BeforeValidator(_array), AfterValidator(_selection)
]
_RuleGlobs = Annotated[
    tuple[_Glob, ...] | None, BeforeValidator(_array), AfterValidator(_selection)
]


_FORBIDDEN_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _safe_text(value: str) -> str:
    """Operator text shown to agents and written to logs: one plain line."""
    if _FORBIDDEN_TEXT.search(value):
        raise ValueError("holds a control, line-separator or bidirectional character")
    if not unicodedata.is_normalized("NFC", value):
        raise ValueError("is not in Unicode NFC form")
    return value


def _located(where: str, message: str) -> PydanticCustomError:
    """A model-level problem that belongs to one field (reported at ``where``)."""
    return PydanticCustomError("policy_located", "{message}", {"where": where, "message": message})


def check_can_match(
    tools: tuple[str, ...] | None, operations: tuple[str, ...] | None, noun: str
) -> None:
    """Refuse selectors that can never match: no listed tool needs a listed operation.

    Raises:
        PydanticCustomError: Located at ``operations``, naming the ``noun``
            (``rule`` or ``table``).
    """
    if tools is not None and operations is not None:
        needed = {TOOL_OPERATIONS[t] for t in tools}
        if not needed & set(operations):
            raise _located(
                "operations",
                f"no listed tool needs a listed operation, so this {noun} can never match",
            )
