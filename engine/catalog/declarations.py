"""The tool catalog: every tool declared once, and the ``chit-catalog/1`` encoding.

Each :class:`ToolSpec` holds a tool's name, description, input and output models,
required operations and annotations, and names no handler (``engine.tools.table``
does), so declarations never import implementations; ``tools/list``, dispatch,
the docs table and the catalog hash derive from :data:`TOOLS`. The tools:
docs/tools.md; the encoding: docs/catalog-encoding.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from pydantic import BaseModel

from engine.auth import cbor
from engine.catalog import schemas as s
from engine.catalog.confirmation import confirmable
from engine.limits import LIMITS

__all__ = [
    "CATALOG_ENCODING",
    "CATALOG_STORE_REF",
    "DELEGATION_FLAG",
    "TOOLS",
    "Offer",
    "ToolSpec",
    "encode_catalog",
    "hash_catalog",
    "offer_of",
    "tool_by_name",
    "with_confirm",
]

CATALOG_ENCODING = "chit-catalog/1"
DELEGATION_FLAG = "delegable"
"""Pseudo-requirement naming the token's delegation flag in ``requires``."""
CATALOG_STORE_REF = "refs/chit/catalogs"
"""Where each offered catalog's bytes are kept in the repository, by hash (docs/audit.md)."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool, declared once.

    Attributes:
        name: Tool name on the MCP surface.
        description: What the tool does, for the agent.
        input_model: Strict pydantic model of the arguments.
        output_model: Model of the structured result.
        requires: Operations the token must hold (and :data:`DELEGATION_FLAG`
            for the delegation flag). Empty: always offered.
        read_only: MCP ``readOnlyHint``.
        destructive: MCP ``destructiveHint``.
        path_args: Names of arguments that are repository paths the call acts on
            (checked against scope and policy before the handler runs).
    """

    name: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    requires: frozenset[str]
    read_only: bool
    destructive: bool
    path_args: tuple[str, ...] = ()

    @property
    def operation(self) -> str:
        """The single operation named in docs and policy (``none`` if none)."""
        ops = sorted(self.requires - {DELEGATION_FLAG})
        return ops[0] if ops else "none"

    def encoded(self) -> dict[str, Any]:
        """This tool's entry in ``chit-catalog/1``."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": _schema(self.input_model),
            "output_schema": _schema(self.output_model),
            "annotations": {"destructiveHint": self.destructive, "readOnlyHint": self.read_only},
            "requires": sorted(self.requires),
        }


def _tool(
    name: str,
    description: str,
    input_model: type[BaseModel],
    output_model: type[BaseModel],
    requires: Iterable[str],
    *,
    path_args: tuple[str, ...] = (),
    destructive: bool = False,
) -> ToolSpec:
    req = frozenset(requires)
    read_only = not (req & {"write", "commit", "sub-token:issue"})
    return ToolSpec(
        name,
        description,
        input_model,
        output_model,
        req,
        read_only,
        destructive,
        path_args,
    )


R, W, C = ("read",), ("write",), ("commit",)

TOOLS: tuple[ToolSpec, ...] = (
    _tool(
        "effective_scope",
        "What your token grants: agent, lane, operations, path scope, expiry, and the tools "
        "offered. Call this first.",
        s.NoArgs,
        s.EffectiveScope,
        (),
    ),
    _tool(
        "status",
        "Your session's staged change, the lane head it is based on, and how far your lane is "
        "ahead of and behind the base branch, and whether the remote has your lane's commits.",
        s.NoArgs,
        s.Status,
        R,
    ),
    _tool(
        "read_file",
        "Read a file in your scope. Without ref: your session's view (staged edits over your "
        "lane, or the base branch before your lane exists). Content is UTF-8 text, or base64 "
        "for binary. start_line and end_line (1-based, inclusive) read part of a large file.",
        s.ReadFileArgs,
        s.FileContent,
        R,
        path_args=("path",),
    ),
    _tool(
        "list_files",
        "Files and folders of your session's view (your staged edits included) under a path, "
        "in path order, optionally filtered by a glob; paged with cursor. Only what your "
        "scope lets you read is named; the rest is counted in pruned.",
        s.ListFilesArgs,
        s.FileList,
        R,
    ),
    _tool(
        "search_text",
        "Lines matching text (or an RE2 regular expression with regex: true) in the files of "
        "your session's view you may read, with path, line number and the line; bounded, "
        "paged with cursor.",
        s.SearchTextArgs,
        s.TextMatches,
        R,
    ),
    _tool(
        "list_conflicts",
        "Paths where your staged change conflicts with your lane, and where your lane would "
        "conflict with the base branch.",
        s.NoArgs,
        s.Conflicts,
        R,
    ),
    _tool(
        "log",
        "Commits on a branch (default: your lane), newest first, limited to paths in your scope.",
        s.LogArgs,
        s.Log,
        R,
    ),
    _tool(
        "diff",
        "Without ref: your session's staged change. With ref: from that revision to your "
        "session's view. Limited to paths in your scope.",
        s.DiffArgs,
        s.Diff,
        R,
    ),
    _tool(
        "symbol_context",
        "A symbol's definition, signature, docstring, enclosing scope and surrounding code.",
        s.SymbolContextArgs,
        s.SymbolContext,
        R,
    ),
    _tool(
        "symbol_relations",
        "A symbol's callers, callees, references, imports, parent and child classes.",
        s.SymbolRelationsArgs,
        s.Relations,
        R,
    ),
    _tool(
        "search_symbols",
        "Find symbols by name: exact, prefix and fuzzy matches, with kind, path and line.",
        s.SearchSymbolsArgs,
        s.Symbols,
        R,
    ),
    _tool(
        "change_impact",
        "Symbols a change touches and what reaches them, with the tests that cover them. "
        "Nothing given: your staged change.",
        s.ChangeImpactArgs,
        s.Impact,
        R,
    ),
    _tool(
        "project_context",
        "A briefing before you edit some paths: relevant symbols, conventions that apply, and "
        "other sessions working on the same paths.",
        s.ProjectContextArgs,
        s.ProjectContext,
        R,
    ),
    _tool(
        "provenance_graph",
        "The derivation graph around a commit, session, token id or task: tokens, delegations, "
        "sessions, commits and files.",
        s.ProvenanceGraphArgs,
        s.ProvenanceGraph,
        R,
    ),
    _tool(
        "write_file",
        "Stage a file's new content in your session (encoding utf-8 or base64). Nothing lands "
        "until commit.",
        s.WriteFileArgs,
        s.Staged,
        W,
        path_args=("path",),
    ),
    _tool(
        "delete_file",
        "Stage the deletion of a file in your session.",
        s.DeleteFileArgs,
        s.Staged,
        W,
        path_args=("path",),
        destructive=True,
    ),
    _tool(
        "move_file",
        "Stage a move (rename) of a file in your session.",
        s.MoveFileArgs,
        s.Staged,
        W,
        path_args=("source", "destination"),
        destructive=True,
    ),
    _tool(
        "resolve_conflict",
        "Resolve a conflicting path with ours, theirs, or explicit content.",
        s.ResolveConflictArgs,
        s.Resolved,
        W,
        path_args=("path",),
    ),
    _tool(
        "discard",
        "Drop your session's whole staged change (and any unresolved conflicts); your view "
        "goes back to your lane. Nothing is committed.",
        s.NoArgs,
        s.Discarded,
        W,
        destructive=True,
    ),
    _tool(
        "commit",
        "Land your session's staged change as one commit on your lane agent/<name>, with "
        "provenance trailers. Never touches the base branch.",
        s.CommitArgs,
        s.Committed,
        C,
    ),
    _tool(
        "issue_sub_token",
        "Issue a strictly narrower token for a helper agent named <your agent>.<label> "
        "(label: a-z, 0-9, '-', '_'), whose lane becomes agent/<your agent>.<label>.",
        s.IssueSubTokenArgs,
        s.SubToken,
        ("sub-token:issue", DELEGATION_FLAG),
    ),
)

_BY_NAME = {tool.name: tool for tool in TOOLS}


def tool_by_name(name: str) -> ToolSpec | None:
    """Return the declared tool named exactly ``name`` (case-sensitive), or ``None``."""
    return _BY_NAME.get(name)


def encode_catalog(tools: Iterable[ToolSpec]) -> bytes:
    """Encode tools under ``chit-catalog/1``.

    Args:
        tools: The offered tools, in any order (they are sorted by name).

    Returns:
        ``chit-det/1`` bytes of ``{"encoding": "chit-catalog/1", "tools": [...]}``.
    """
    entries = [t.encoded() for t in sorted(tools, key=lambda t: t.name)]
    return cbor.encode({"encoding": CATALOG_ENCODING, "tools": entries})


def hash_catalog(data: bytes) -> str:
    """Return ``sha256:<hex>`` of catalog bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    return schema


@dataclass(frozen=True)
class Offer:
    """The tools offered to one token and their catalog hash.

    Attributes:
        tools: Offered tools, sorted by name.
        catalog_hash: ``sha256:<hex>`` of :attr:`catalog_bytes`.
        catalog_bytes: The ``chit-catalog/1`` encoding.
        withheld: How many declared tools are not offered.
    """

    tools: tuple[ToolSpec, ...]
    catalog_hash: str
    catalog_bytes: bytes
    withheld: int
    _by_name: dict[str, ToolSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, ToolSpec] = {}
        for tool in self.tools:
            by_name.setdefault(tool.name, tool)  # the first of a name, as a scan finds it
        object.__setattr__(self, "_by_name", by_name)

    def names(self) -> list[str]:
        """Offered tool names, sorted."""
        return [t.name for t in self.tools]

    def get(self, name: str) -> ToolSpec | None:
        """Return the offered tool named exactly ``name``, or ``None``."""
        if type(name) is str:
            return self._by_name.get(name)
        for tool in self.tools:  # anything else compares as it always did
            if tool.name == name:
                return tool
        return None


def with_confirm(spec: ToolSpec) -> ToolSpec:
    """``spec`` as offered where the policy's ``[confirm]`` lists it.

    Its input model takes an optional ``confirm`` boolean (``engine.catalog.confirmation``).
    """
    return dataclasses.replace(spec, input_model=confirmable(spec.input_model))


@lru_cache(maxsize=LIMITS.catalog_cache_entries)
def offer_of(names: tuple[str, ...], confirm: tuple[str, ...] = ()) -> Offer:
    """The :class:`Offer` of the declared tools named in ``names`` (sorted, each declared).

    Args:
        names: The offered tools' names, sorted.
        confirm: Names among ``names`` whose calls must carry ``"confirm":
            true`` (the policy's ``[confirm]``), sorted: those tools are
            offered :func:`with_confirm`. Empty: the catalog is exactly the
            one without confirmation.

    Raises:
        KeyError: If a name is not declared (a caller bug).
    """
    tools = tuple(
        with_confirm(_BY_NAME[n]) if n in confirm else _BY_NAME[n] for n in names
    )
    data = encode_catalog(tools)
    return Offer(tools, hash_catalog(data), data, len(TOOLS) - len(tools))
