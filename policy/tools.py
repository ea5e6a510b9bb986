"""The tools a policy may name, and the operation each needs (docs/policy.md, "Rules").

Kept apart from ``policy.model`` so that every model of the policy (rules,
``[confirm]``) can check tool names against one table without importing the
document that holds them all.
"""

from __future__ import annotations

__all__ = ["CHANGING_OPERATIONS", "OPERATIONS", "TOOL_OPERATIONS"]

TOOL_OPERATIONS: dict[str, str] = {
    "effective_scope": "none",
    "status": "read",
    "read_file": "read",
    "list_files": "read",
    "search_text": "read",
    "list_conflicts": "read",
    "log": "read",
    "diff": "read",
    "symbol_context": "read",
    "symbol_relations": "read",
    "search_symbols": "read",
    "change_impact": "read",
    "project_context": "read",
    "provenance_graph": "read",
    "write_file": "write",
    "delete_file": "write",
    "move_file": "write",
    "resolve_conflict": "write",
    "discard": "write",
    "commit": "commit",
    "issue_sub_token": "sub-token:issue",
}
"""Every tool a rule may name, with the operation it needs (``none``: always offered).

The engine's catalog is the source of truth; a test keeps this copy equal to it
(``policy`` imports nothing from ``engine``).
"""

OPERATIONS = frozenset(TOOL_OPERATIONS.values())
"""Operations a rule may name: ``none``, ``read``, ``write``, ``commit``, ``sub-token:issue``."""

CHANGING_OPERATIONS = frozenset({"write", "commit", "sub-token:issue"})
"""Operations of the tools that change something (stage, land or hand out authority)."""
