"""Which function handles each declared tool (docs/tools.md).

The declarations (``engine.catalog.declarations``) name no handler; this table
does, and it is the only place that ties the two. A declared tool missing here
is withheld from every offer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from engine.tools import (
    commit,
    conflicts,
    delegation,
    discard,
    files,
    history,
    listing,
    provenance,
    scope,
    search,
)
from engine.tools.semantic import impact, project, relations, symbols

__all__ = ["HANDLERS", "Handler", "handler_for"]

Handler = Callable[[Any, Any], BaseModel]
"""``(CallContext, validated arguments) -> the tool's output model``."""

HANDLERS: Mapping[str, Handler] = MappingProxyType(
    {
        "effective_scope": scope.effective_scope,
        "status": scope.status,
        "read_file": files.read_file,
        "list_files": listing.list_files,
        "search_text": search.search_text,
        "list_conflicts": conflicts.list_conflicts,
        "log": history.log,
        "diff": history.diff,
        "symbol_context": symbols.symbol_context,
        "symbol_relations": relations.symbol_relations,
        "search_symbols": symbols.search_symbols,
        "change_impact": impact.change_impact,
        "project_context": project.project_context,
        "provenance_graph": provenance.provenance_graph,
        "write_file": files.write_file,
        "delete_file": files.delete_file,
        "move_file": files.move_file,
        "resolve_conflict": conflicts.resolve_conflict,
        "discard": discard.discard,
        "commit": commit.commit,
        "issue_sub_token": delegation.issue_sub_token,
    }
)


def handler_for(name: str) -> Handler | None:
    """Return the handler of the declared tool named exactly ``name``, or ``None``."""
    return HANDLERS.get(name)
