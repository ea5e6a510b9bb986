"""Agent names: root labels and the dotted names of delegated agents.

A name is what a token's identity block says and what a lane branch is called
(``agent/<name>``), so its shape keeps every lane a safe git ref and every
delegation below its parent (docs/token-format.md, *Blocks*). Pure: strings in,
a name or an error out.
"""

from __future__ import annotations

from engine.limits import LIMITS

__all__ = ["is_agent_name", "validate_agent_name"]

_AGENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def validate_agent_name(name: object, *, parent: str | None = None) -> str:
    """Check an agent name.

    A root agent's name is a *label*: 1-64 of ``a-z 0-9 - _``, starting with a
    letter or digit, never ``lock``. A delegated agent's name is its parent's name,
    a dot, and a new label (``lead.helper``), at most 64 characters in all: so a
    delegation can never name a root agent, nor another parent's child, and every
    lane ``agent/<name>`` is a safe git ref.

    Args:
        name: The untrusted name.
        parent: The delegating agent's name, for a delegated agent; ``None`` for a
            root agent.

    Returns:
        The name, unchanged.

    Raises:
        ValueError: If the name is not of that shape.
    """
    if parent is None:
        if not _is_label(name):
            raise ValueError(
                "agent names are 1-64 characters of a-z, 0-9, '-', '_', starting alnum"
            )
        return str(name)
    prefix = parent + "."
    if (
        not isinstance(name, str)
        or len(name) > LIMITS.agent_name_chars
        or not name.startswith(prefix)
        or not _is_label(name[len(prefix) :])
    ):
        raise ValueError(
            f"a delegated agent is named {parent}.<label> (label: a-z, 0-9, '-', '_'; "
            f"at most {LIMITS.agent_name_chars} characters in all)"
        )
    return name


def _is_label(name: object) -> bool:
    return (
        isinstance(name, str)
        and 1 <= len(name) <= LIMITS.agent_name_chars
        and set(name) <= _AGENT_CHARS
        and name[0].isalnum()
        and name != "lock"
    )


def is_agent_name(name: str) -> bool:
    """True iff ``name`` is a root agent name or a dotted chain of labels (a lane name)."""
    return len(name) <= LIMITS.agent_name_chars and all(_is_label(p) for p in name.split("."))
