"""Input and output models of every tool (pydantic v2; docs/tools.md, "Arguments and results").

Inputs are strict and closed (``extra="forbid"``): an unknown argument is an
``invalid_argument`` refusal, never ignored. Outputs are what handlers return and
what the catalog publishes as ``outputSchema``. The JSON Schemas derived from
these models are part of the catalog hash, so any change here changes the hash.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.limits import LIMITS

_IN = ConfigDict(extra="forbid", strict=True, frozen=True)
_OUT = ConfigDict(extra="forbid", frozen=True)


def _absent(value: object) -> bool:
    """An optional output left out of the answer when it has nothing to say."""
    return value is None

# Path lengths and forms are checked by engine.paths (path_invalid), not here.
Path = Field(description="Repository path, '/'-separated.")
OptPath = Field(default=None, description="Repository path filter.")
Ref = Field(
    default=None,
    min_length=1,
    max_length=LIMITS.ref_chars,
    description=(
        "A branch name (the base branch by its own name, e.g. main or master; agent/NAME) "
        "or a commit id; default: your lane."
    ),
)


# --- inputs ------------------------------------------------------------------


class NoArgs(BaseModel):
    """No arguments."""

    model_config = _IN


Cursor = Field(
    default=None,
    min_length=1,
    max_length=LIMITS.cursor_chars,
    description="Where to go on: the cursor a truncated answer gave, with the same other "
    "arguments.",
)


class ReadFileArgs(BaseModel):
    """Arguments of read_file."""

    model_config = _IN
    path: str = Path
    ref: str | None = Ref
    start_line: int | None = Field(
        default=None, ge=1, description="First line to return (1-based); default: the first."
    )
    end_line: int | None = Field(
        default=None, ge=1, description="Last line to return (inclusive); default: the last."
    )


class ListFilesArgs(BaseModel):
    """Arguments of list_files."""

    model_config = _IN
    path: str | None = Field(
        default=None, description="A folder (or file) to list under; default: the whole view."
    )
    glob: str | None = Field(
        default=None,
        min_length=1,
        max_length=LIMITS.glob_chars,
        description="Only entries whose path below `path` matches: '*' and '?' within one "
        "segment, '**' for any number of segments (e.g. '**/*.py').",
    )
    limit: int = Field(
        default=200, ge=1, le=LIMITS.list_entries, description="Most entries to return."
    )
    cursor: str | None = Cursor


class SearchTextArgs(BaseModel):
    """Arguments of search_text."""

    model_config = _IN
    query: str = Field(
        min_length=1,
        max_length=LIMITS.search_query_chars,
        description="Text to find, or an RE2 regular expression with regex: true (no "
        "backreferences or lookaround).",
    )
    regex: bool = False
    case: bool = Field(default=True, description="Case-sensitive (default) or not.")
    paths: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=LIMITS.argument_list_entries,
        description="Files or folders to search; default: the whole view.",
    )
    limit: int = Field(
        default=50, ge=1, le=LIMITS.search_matches, description="Most matching lines to return."
    )
    cursor: str | None = Cursor


class LogArgs(BaseModel):
    """Arguments of log."""

    model_config = _IN
    ref: str | None = Ref
    path: str | None = OptPath
    limit: int = Field(
        default=20, ge=1, le=LIMITS.log_commits, description="Most commits to return."
    )


class DiffArgs(BaseModel):
    """Arguments of diff. No ref: the session's staged change."""

    model_config = _IN
    ref: str | None = Ref
    path: str | None = OptPath


class SymbolContextArgs(BaseModel):
    """Arguments of symbol_context."""

    model_config = _IN
    symbol: str = Field(min_length=1, max_length=LIMITS.symbol_chars)
    path: str | None = OptPath


class SymbolRelationsArgs(BaseModel):
    """Arguments of symbol_relations."""

    model_config = _IN
    symbol: str = Field(min_length=1, max_length=LIMITS.symbol_chars)
    path: str | None = OptPath
    kinds: (
        list[Literal["callers", "callees", "references", "imports", "parents", "children"]] | None
    ) = Field(default=None, min_length=1, max_length=6)


class SearchSymbolsArgs(BaseModel):
    """Arguments of search_symbols."""

    model_config = _IN
    query: str = Field(min_length=1, max_length=LIMITS.symbol_chars, pattern=r"\S")
    limit: int = Field(default=20, ge=1, le=LIMITS.search_results)


class ChangeImpactArgs(BaseModel):
    """Arguments of change_impact. Neither given: the session's staged change."""

    model_config = _IN
    paths: list[str] | None = Field(default=None, max_length=LIMITS.argument_list_entries)
    symbols: list[Annotated[str, Field(min_length=1, max_length=LIMITS.symbol_chars)]] | None = (
        Field(default=None, max_length=LIMITS.argument_list_entries)
    )


class ProjectContextArgs(BaseModel):
    """Arguments of project_context."""

    model_config = _IN
    paths: list[str] = Field(min_length=1, max_length=LIMITS.argument_list_entries)


class ProvenanceGraphArgs(BaseModel):
    """Arguments of provenance_graph: a commit, session, token id or task handle."""

    model_config = _IN
    handle: str = Field(min_length=1, max_length=LIMITS.graph_handle_chars)


class WriteFileArgs(BaseModel):
    """Arguments of write_file."""

    model_config = _IN
    path: str = Path
    content: str = Field(description="New content; its size is limited by policy.")
    encoding: Literal["utf-8", "base64"] = "utf-8"


class DeleteFileArgs(BaseModel):
    """Arguments of delete_file."""

    model_config = _IN
    path: str = Path


class MoveFileArgs(BaseModel):
    """Arguments of move_file."""

    model_config = _IN
    source: str = Path
    destination: str = Path


class ResolveConflictArgs(BaseModel):
    """Arguments of resolve_conflict."""

    model_config = _IN
    path: str = Path
    resolution: Literal["ours", "theirs", "content"]
    content: str | None = Field(default=None, max_length=LIMITS.content_chars)
    encoding: Literal["utf-8", "base64"] = "utf-8"


class CommitArgs(BaseModel):
    """Arguments of commit."""

    model_config = _IN
    message: str = Field(min_length=1, max_length=LIMITS.message_chars)


class IssueSubTokenArgs(BaseModel):
    """Arguments of issue_sub_token."""

    model_config = _IN
    agent: str = Field(
        min_length=1,
        max_length=LIMITS.agent_name_chars,
        description="The helper's name: your agent name, a dot and a new label "
        "(a-z, 0-9, '-', '_'), e.g. alice.tests.",
    )
    ops: list[str] = Field(max_length=LIMITS.sub_token_ops_entries)
    paths: list[str] = Field(max_length=LIMITS.caveat_globs)
    ttl_seconds: int = Field(gt=0)
    delegable: bool = False
    repos: list[str] | None = Field(
        default=None,
        max_length=LIMITS.caveat_globs,
        description="Repository name globs, each within yours; omitted: the helper keeps yours.",
    )


# --- outputs -----------------------------------------------------------------


class EffectiveScope(BaseModel):
    """What the presented token grants, and the catalog it is offered."""

    model_config = _OUT
    agent: str
    lane: str
    token_id: str
    session: str = Field(
        description="Your session's handle: resume its staged change from a new connection "
        "with the same token (chit mcp --session, or the Chit-Session header over HTTP)."
    )
    chain: list[str] = Field(description="Agents from the root token down to you.")
    operations: list[str]
    path_scopes: list[list[str]] = Field(
        description="A path is in scope iff every list has a glob matching it."
    )
    expires_at: int
    not_before: int | None
    delegable: bool
    repo: str = Field(description="The repository this session works on.")
    repo_scopes: list[list[str]] = Field(
        description="A repository is in scope iff every list has a glob matching its name; "
        "with no list, only an engine serving one repository accepts this token."
    )
    tools: list[str]
    withheld: int = Field(description="Declared tools this token is not offered.")
    catalog_hash: str
    catalog_encoding: str
    warning: str | None = Field(
        default=None, exclude_if=_absent,
        description="Present only when this engine serves an artefact made for something "
        "else (docs/vital-signs.md): what and what to do. Calls are served as usual.",
    )


class StagedEntry(BaseModel):
    """One staged path."""

    model_config = _OUT
    path: str
    change: Literal["added", "modified", "deleted"]


class RemoteState(BaseModel):
    """Where the repository's remote stands: whether it has your lane's commits, and why not."""

    model_config = _OUT
    url: str = Field(description="The remote's URL, userinfo redacted.")
    lane_behind: bool = Field(description="Commits of your lane are not on the remote yet.")
    lanes_behind: int = Field(description="Lanes of this repository waiting to be pushed.")
    checked: bool = Field(description="The engine has compared its lanes with the remote.")
    error: str | None = Field(description="Why the last push or fetch failed, if it did.")


class VitalSign(BaseModel):
    """One vital sign of the repository's artefacts (docs/vital-signs.md): signal-only."""

    model_config = _OUT
    sign: str = Field(description="What was checked (semantic_index, ...).")
    state: str = Field(description="ok; mismatch: the artefact was made for something else; "
                       "behind, unreachable, unsigned_tail, stale: it lags (docs/vital-signs.md).")
    reason: str
    expected: str | None = Field(default=None, exclude_if=_absent,
                                 description="The identity served, on a mismatch.")
    found: str | None = Field(default=None, exclude_if=_absent,
                              description="The identity the artefact records, on a mismatch.")
    lanes: list[str] | None = Field(default=None, exclude_if=_absent,
                                    description="The lanes concerned (your own, when the "
                                    "remote is behind on it).")
    age_seconds: int | None = Field(default=None, exclude_if=_absent,
                                    description="How long the condition has lasted, seconds.")
    since: int | None = Field(default=None, exclude_if=_absent,
                              description="When it began, Unix seconds.")


class PendingApproval(BaseModel):
    """An approval this session's call waits for (docs/approvals.md)."""

    model_config = _OUT
    id: str
    tool: str
    expires_at: int


class Status(BaseModel):
    """The session's staged change and its lane."""

    model_config = _OUT
    session: str = Field(
        description="Your session's handle: resume its staged change from a new connection "
        "with the same token (chit mcp --session, or the Chit-Session header over HTTP)."
    )
    lane: str
    lane_exists: bool
    lane_head: str | None
    base: str | None
    base_branch: str = Field(description="The branch lanes start from (main, master, ...).")
    main_head: str = Field(description="The base branch's head (with a remote: as last fetched).")
    ahead: int
    behind: int
    staged: list[StagedEntry]
    staged_bytes: int
    remote: RemoteState | None = Field(description="The remote, if the repository has one.")
    approvals: list[PendingApproval] = Field(
        default_factory=list,
        description="Calls of this session waiting for an operator's approval; retry each "
        "with the same arguments once approved.",
    )
    coherence: list[VitalSign] | None = Field(
        default=None, exclude_if=_absent,
        description="Vital signs of the artefacts served (absent when there is nothing to "
        "compare); a mismatch means one was made for another repository or home. "
        "Calls are served as usual.",
    )


class FileContent(BaseModel):
    """A file's content, whole or a range of its lines."""

    model_config = _OUT
    path: str
    ref: str | None
    encoding: Literal["utf-8", "base64"]
    content: str
    size: int = Field(description="Bytes of the whole file.")
    start_line: int | None = Field(
        default=None, exclude_if=_absent,
        description="With a line range: the first line returned (1-based).",
    )
    end_line: int | None = Field(
        default=None, exclude_if=_absent,
        description="With a line range: the last line returned (start_line - 1 when none).",
    )
    total_lines: int | None = Field(
        default=None, exclude_if=_absent, description="With a line range: lines in the file."
    )


class ListedEntry(BaseModel):
    """One entry of a listing."""

    model_config = _OUT
    path: str
    kind: Literal["file", "folder", "symlink", "submodule"]
    size: int | None = Field(
        default=None, exclude_if=_absent,
        description="A file's size in bytes as stored (a protected file's sealed size).",
    )


class FileList(BaseModel):
    """Files and folders of the session view, pruned to the caller's scope."""

    model_config = _OUT
    entries: list[ListedEntry]
    pruned: int = Field(
        description="Entries under `path` you may not see, never named (a folder with nothing "
        "of your scope inside counts once); the same on every page, whatever the glob."
    )
    truncated: bool = Field(description="More entries follow: call again with `cursor`.")
    cursor: str | None = Field(description="Where the next page starts, when truncated.")
    incomplete: bool = Field(
        description=f"The view under `path` holds more than {LIMITS.list_scan_entries} "
        "entries: only the first ones in path order are listed; list a narrower path."
    )


class TextMatch(BaseModel):
    """One matching line."""

    model_config = _OUT
    path: str
    line: int = Field(description="Line number, 1-based.")
    column: int = Field(description="Where the first match on the line starts, 1-based, "
                        "in characters.")
    text: str = Field(description="The line, or a window of it around the match if long.")
    cut: bool = Field(description="The line is longer than `text` shows.")


class TextMatches(BaseModel):
    """Lines matching a search, in files the caller may read."""

    model_config = _OUT
    matches: list[TextMatch]
    files_searched: int
    skipped: int = Field(
        description="Files you may read that were not searched: binary, or over "
        f"{LIMITS.range_file_bytes} bytes."
    )
    truncated: bool = Field(
        description="The search stopped early (limit, or bytes, files or time budget): call "
        "again with `cursor` to go on."
    )
    cursor: str | None = Field(description="Where the next call goes on, when truncated.")


class LogEntry(BaseModel):
    """One commit."""

    model_config = _OUT
    id: str
    summary: str
    author: str
    time: int
    paths: list[str]
    paths_truncated: bool
    trailers: dict[str, str]


class Log(BaseModel):
    """Commits, newest first, pruned to the caller's scope."""

    model_config = _OUT
    commits: list[LogEntry]
    pruned: int
    truncated: bool


class DiffFile(BaseModel):
    """One changed path."""

    model_config = _OUT
    path: str
    change: str
    patch: str | None
    binary: bool = False
    old_mode: int | None = None
    new_mode: int | None = None


class Diff(BaseModel):
    """Changed paths, pruned to the caller's scope."""

    model_config = _OUT
    files: list[DiffFile]
    pruned: int


class Staged(BaseModel):
    """The result of a staging write."""

    model_config = _OUT
    path: str
    change: Literal["added", "modified", "deleted", "moved", "unstaged"] = Field(
        description="'unstaged': the path is back to its base content, nothing staged there."
    )
    staged_files: int
    staged_bytes: int


class Discarded(BaseModel):
    """A staged change dropped by ``discard``."""

    model_config = _OUT
    session: str
    files: int = Field(description="Staged paths dropped.")
    conflicts: int = Field(description="Unresolved conflicts dropped.")


class Committed(BaseModel):
    """A commit that landed on the caller's lane."""

    model_config = _OUT
    commit: str
    lane: str
    parent: str
    files: int
    catalog_hash: str
    catalog_encoding: str
    trailers: dict[str, str]


class Conflict(BaseModel):
    """One conflicting path: its content at the merge base, on your side, on theirs.

    ``None`` means the side has no file there. With ``binary`` true every side is
    base64 (``encoding`` says so); resolve such a path with ``encoding: base64``.
    """

    model_config = _OUT
    path: str
    base: str | None
    ours: str | None
    theirs: str | None
    binary: bool = False
    encoding: Literal["utf-8", "base64"] = "utf-8"


class Conflicts(BaseModel):
    """Conflicts of the session, and of the lane against the base branch (``with_main``)."""

    model_config = _OUT
    session: list[Conflict]
    with_main: list[Conflict]


class Resolved(BaseModel):
    """A resolved conflict."""

    model_config = _OUT
    path: str
    resolution: str
    remaining: int


class Symbol(BaseModel):
    """A symbol in the index."""

    model_config = _OUT
    symbol: str
    kind: str
    path: str
    line: int


class Symbols(BaseModel):
    """Symbols, pruned to the caller's scope."""

    model_config = _OUT
    symbols: list[Symbol]
    pruned: int
    truncated: bool


class SymbolContext(BaseModel):
    """A symbol's definition and surroundings."""

    model_config = _OUT
    symbol: Symbol
    signature: str | None
    doc: str | None
    scope: str | None
    code: str
    truncated: bool


class Relation(BaseModel):
    """One relation of a symbol."""

    model_config = _OUT
    kind: str
    symbol: Symbol


class Relations(BaseModel):
    """A symbol's relations, pruned to the caller's scope."""

    model_config = _OUT
    symbol: str
    relations: list[Relation]
    pruned: int
    truncated: bool


class Impact(BaseModel):
    """Symbols a change touches and what reaches them."""

    model_config = _OUT
    touched: list[Symbol]
    affected: list[Symbol]
    tests: list[str]
    pruned: int
    truncated: bool


class PeerIntent(BaseModel):
    """Another session working on overlapping paths (never their content)."""

    model_config = _OUT
    agent: str
    paths: list[str]


class ProjectContext(BaseModel):
    """A pre-write briefing for some paths."""

    model_config = _OUT
    symbols: list[Symbol]
    conventions: list[FileContent]
    peers: list[PeerIntent]
    pruned: int
    truncated: bool


class GraphNode(BaseModel):
    """A node of the provenance graph."""

    model_config = _OUT
    id: str
    kind: str
    label: str


class GraphEdge(BaseModel):
    """An edge of the provenance graph."""

    model_config = _OUT
    source: str
    target: str
    kind: str


class ProvenanceGraph(BaseModel):
    """The derivation graph around a handle, pruned to the caller's scope."""

    model_config = _OUT
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    pruned: int
    truncated: bool = Field(
        default=False,
        description=f"True if only the first {LIMITS.graph_commits} lane commits were read.",
    )


class SubToken(BaseModel):
    """A delegated token."""

    model_config = _OUT
    token: str
    token_id: str
    agent: str
    expires_at: int
