"""What one token is offered: the tools it unlocks and their catalog hash.

A tool is offered iff it is declared (``engine.catalog.declarations``), has a
handler (``engine.tools.table``) and every requirement is held
(docs/architecture.md, the ordered check, step 4).
"""

from __future__ import annotations

from functools import lru_cache

from engine.catalog import declarations
from engine.catalog.declarations import DELEGATION_FLAG, Offer, offer_of
from engine.limits import LIMITS
from engine.tools.table import HANDLERS

__all__ = ["Offer", "markdown_table", "offer_for"]


@lru_cache(maxsize=LIMITS.offer_cache_entries)
def offer_for(
    operations: frozenset[str],
    delegable: bool,
    read_only: bool = False,
    confirm: frozenset[str] = frozenset(),
) -> Offer:
    """Compute the offer for a token's operations and delegation flag.

    A tool is offered iff it has a handler and every requirement is held, and,
    when the engine is frozen or serves a read-only edge, it is marked read-only.
    ``effective_scope`` requires nothing and is always offered. An offered tool
    named in ``confirm`` takes the ``confirm`` argument (its schema says so,
    and so the catalog hash); names not offered change nothing.

    Args:
        operations: The verified token's effective operations.
        delegable: The verified token's delegation flag.
        read_only: Offer only tools marked read-only (the engine's read-only mode).
        confirm: The tools the policy's ``[confirm]`` lists (docs/policy.md).

    Returns:
        The :class:`Offer`.
    """
    held = set(operations) | ({DELEGATION_FLAG} if delegable else set())
    names = tuple(
        sorted(
            t.name
            for t in declarations.TOOLS
            if t.name in HANDLERS and t.requires <= held and (t.read_only or not read_only)
        )
    )
    return offer_of(names, tuple(n for n in names if n in confirm))


def markdown_table() -> str:
    """Render the catalog as the Markdown table kept in ``docs/tools.md``."""
    rows = ["| tool | needs | read-only | destructive | offered now |", "|---|---|---|---|---|"]
    for t in declarations.TOOLS:
        needs = ", ".join(sorted(t.requires)) or "nothing (always offered)"
        rows.append(
            f"| `{t.name}` | {needs} | {'yes' if t.read_only else 'no'} | "
            f"{'yes' if t.destructive else 'no'} | "
            f"{'yes' if t.name in HANDLERS else 'withheld (later work)'} |"
        )
    return "\n".join(rows) + "\n"
