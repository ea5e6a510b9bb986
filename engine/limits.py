"""Every bound the engine enforces, with its default and unit, in one frozen dataclass.

Modules read :data:`LIMITS` (``LIMITS.token_chars``) instead of keeping their own
constants; docs/limits.md lists each field with where it is enforced and what a
caller sees past it. Fields are grouped by the floor that enforces them. Pure.

Not here, on purpose:

- widths fixed by a primitive or a format field: MAC tags, AES-GCM keys, nonces
  and tags, block ids, root and sealing keys, the semantic codec's int32 range,
  curve constants, and the replay cache's latest ``keep_until`` (SQLite's
  64-bit integers, ``engine.state.store.MAX_JTI_KEEP_UNTIL``);
- SQL batch sizes that bound nothing an input can grow: the semantic index's
  400 ``(path, blob)`` pairs per ``SELECT`` and the store's 512 rows per page;
- the path bounds of :mod:`policy.paths` (policy imports nothing of the engine),
  and the policy's own ``[limits]`` (docs/policy.md), which are the
  organisation's, not the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

__all__ = ["LIMITS", "Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """The engine's bounds; every field is a positive number of the unit its name says.

    Raises:
        ValueError: If a field is not a positive value of its default's type
            (``int``, or ``float`` for seconds that may be fractional).
    """

    # --- tokens and agent names (engine/auth, engine/paths.py) ---------------------
    token_chars: int = 8192
    """Characters of a token's text form; also the bytes its envelope and each block decode from."""
    token_blocks: int = 16
    """Blocks in one token, the root block included."""
    agent_name_chars: int = 64
    """Characters of an agent name, a delegated agent's dotted name included."""
    caveat_globs: int = 64
    """Globs in one ``paths`` caveat (and in ``issue_sub_token``'s ``paths``)."""
    glob_chars: int = 1024
    """Characters of one path glob a token carries: bounds the matcher's worst case."""
    repo_name_chars: int = 64
    """Characters of a repository's name, and of one glob of a ``repos`` caveat."""
    identity_record_bytes: int = 8_192
    """Bytes of the identity an artefact records (docs/vital-signs.md); a longer one is ignored."""
    identity_record_entries: int = 64
    """Roots, keys or repositories in one identity record; more and the record is ignored."""
    vital_tail_grace_seconds: float = 5.0
    """Seconds past ``calllog_checkpoint_seconds`` an unsigned call-log tail may age unreported."""
    presence_write_seconds: float = 30.0
    """Seconds an engine waits at least between writes of what it saw to the presence table."""
    presence_window_seconds: int = 300
    """Seconds back ``chit doctor`` looks for the engines and edges seen recently."""
    presence_keep_seconds: int = 86_400
    """Seconds a presence row is kept after it was last seen; older rows are deleted."""
    presence_rows: int = 1_000
    """Rows the presence table keeps (the most recently seen), and edges one engine notes."""
    presence_label_chars: int = 128
    """Characters of an engine's or edge's label kept (an edge's ``chit-edge`` header, escaped)."""
    warning_line_chars: int = 1_024
    """Characters of the vital-sign warning line an edge adds to its instructions."""
    caveat_time_ceiling_seconds: int = 2**37
    """Unix seconds an ``exp`` or ``nbf`` caveat stays below (2**37 is year 6325)."""
    delegation_depth_blocks: int = 3
    """Delegation blocks below the root that verification accepts unless told otherwise."""
    keyring_full_check_seconds: float = 1.0
    """Seconds a running engine trusts a key folder's modification time alone."""
    token_parse_cache_entries: int = 1024
    """Token texts whose parsed form is memoised."""
    token_shape_cache_entries: int = 1024
    """Block chains whose analysed shape is memoised."""
    token_block_cache_entries: int = 4096
    """Block byte strings whose decoding (and, apart, caveats) is memoised."""
    grant_cache_entries: int = 4096
    """Caveat chains whose intersected grant is memoised."""
    scope_match_cache_entries: int = 16384
    """Pairs of a token's path scopes and a path whose match is memoised."""

    # --- chit-det/1 (engine/auth/cbor.py) -------------------------------------------
    cbor_default_size_bytes: int = 65536
    """Bytes :func:`engine.auth.cbor.decode` accepts when the caller names no ``max_size``."""
    cbor_default_depth_levels: int = 16
    """Nesting levels of arrays and maps accepted when the caller names no ``max_depth``."""
    cbor_depth_ceiling_levels: int = 256
    """Largest ``max_depth`` a caller may name: keeps the recursive walk far from Python's limit."""

    # --- catalog, tool arguments and offers (engine/catalog, engine/tools) ------------
    ref_chars: int = 256
    """Characters of a ``ref`` argument (a branch name or commit id)."""
    content_chars: int = 32 * 1024 * 1024
    """Characters of ``resolve_conflict``'s ``content`` argument (32 Mi)."""
    message_chars: int = 16_384
    """Characters of a commit message."""
    symbol_chars: int = 512
    """Characters of a symbol or query argument of the semantic tools."""
    search_results: int = 200
    """Largest ``limit`` of ``search_symbols``."""
    argument_list_entries: int = 256
    """Paths or symbols one ``change_impact`` or ``project_context`` call names."""
    graph_handle_chars: int = 256
    """Characters of ``provenance_graph``'s ``handle``."""
    sub_token_ops_entries: int = 8
    """Entries of ``issue_sub_token``'s ``ops`` list."""
    catalog_cache_entries: int = 256
    """Sets of tool names whose encoded catalog is memoised."""
    offer_cache_entries: int = 64
    """Grants (operations, delegation, read-only) whose offer is memoised."""

    # --- finding: list_files, search_text, read_file's line range (engine/tools) ------
    list_entries: int = 1_000
    """Largest ``limit`` of ``list_files``."""
    list_scan_entries: int = 200_000
    """Entries of the view one ``list_files`` call walks before it stops and says so."""
    search_matches: int = 500
    """Largest ``limit`` of ``search_text``."""
    search_query_chars: int = 1_000
    """Characters of ``search_text``'s ``query``."""
    search_line_chars: int = 400
    """Characters of a matching line ``search_text`` shows (a window around the match)."""
    search_scan_bytes: int = 64 << 20
    """Bytes of file content one ``search_text`` call searches (64 MiB) before it stops."""
    search_scan_files: int = 20_000
    """Files one ``search_text`` call searches before it stops."""
    search_seconds: float = 5.0
    """Seconds one ``search_text`` call searches before it stops (checked between files)."""
    search_pattern_bytes: int = 8 << 20
    """Bytes of memory RE2 may use for one compiled ``search_text`` pattern (8 MiB)."""
    range_file_bytes: int = 64 << 20
    """Bytes of a file ``read_file`` reads for a line range, or ``search_text`` searches."""
    cursor_chars: int = 8_192
    """Characters of a ``cursor`` argument of ``list_files`` or ``search_text``."""

    # --- git (engine/git) -----------------------------------------------------------
    git_object_cache_bytes: int = 4 << 20
    """Bytes of parsed commits and trees each libgit2 handle caches (4 MiB)."""
    tree_index_entries: int = 32_768
    """Entries of all kept tree name maps (about 3 MiB); a tree over a quarter is kept alone."""
    log_commits: int = 200
    """Largest ``limit`` of ``log``."""
    log_scan_commits: int = 10_000
    """Commits one ``log`` call examines before it reports truncation."""
    ref_reach_commits: int = 100_000
    """Commits beyond the base walked to find whether a branch reaches a commit id."""
    log_paths: int = 50
    """Changed paths ``log`` lists per commit."""
    log_summary_chars: int = 200
    """Characters of a commit's summary line that ``log`` shows."""
    store_attempts: int = 8
    """Attempts to add an entry to chit's content store while other writers race."""
    store_retry_pause_seconds: float = 0.005
    """Seconds between two attempts to add an entry to chit's content store."""
    stale_ref_lock_seconds: float = 10.0
    """Age in seconds past which git's ``.lock`` on a ref chit writes is a dead writer's."""
    remote_url_chars: int = 2048
    """Characters of a repository's remote URL (operator configuration)."""
    remote_command_seconds: float = 30.0
    """Seconds one ``git fetch``, ``push`` or ``ls-remote`` may run before it is killed."""
    remote_output_bytes: int = 1 << 20
    """Bytes of one such command's output that are read (1 MiB); the rest is dropped."""
    remote_push_attempts: int = 3
    """Pushes of one commit while the remote's lane moved (each after a fetch and a merge)."""
    remote_retry_first_seconds: float = 1.0
    """Seconds before the first background retry of a failed push; doubled after each failure."""
    remote_retry_max_seconds: float = 60.0
    """Seconds between two background retries of a failed push, at most."""
    remote_check_seconds: float = 300.0
    """Seconds between two comparisons of every lane with the remote by an engine's background."""
    remote_error_chars: int = 500
    """Characters of git's (scrubbed) error text kept to say why the remote is behind."""
    saved_session_record_bytes: int = 16 << 20
    """Bytes of a saved session's record (``chit-session/1``) that are decoded (16 MiB)."""
    saved_session_entries: int = 100_000
    """Staged paths and conflicts read back from one saved session."""

    # --- state (engine/state) -------------------------------------------------------
    intents_per_repository: int = 10_000
    """Live intents kept per repository; past it the ones expiring first are dropped."""
    intents_per_token: int = 16
    """Live intents kept per token (its latest sessions); older ones are dropped."""
    intent_paths: int = 256
    """Paths one intent (or one session's shared staged paths) names."""
    intent_sweep_seconds: int = 60
    """Seconds between two deletions of expired intents by one store (reads skip them anyway)."""
    sqlite_busy_timeout_seconds: float = 10.0
    """Seconds a SQLite connection waits for a lock another process holds."""
    postgres_connect_seconds: float = 10.0
    """Seconds a PostgreSQL store waits to connect (and for a pooled connection)."""
    postgres_statement_seconds: float = 30.0
    """Seconds one PostgreSQL statement may run (a lock wait included) before it fails."""
    postgres_pool_connections: int = 16
    """Connections one PostgreSQL store opens at most (the change listener's apart)."""
    change_poll_seconds: float = 0.25
    """Seconds between two reads of the change feed's position (SQLite; PostgreSQL listens)."""
    change_retry_seconds: float = 1.0
    """Seconds before the change feed's watcher retries after its store failed."""
    change_wait_seconds: float = 30.0
    """Seconds one wait for the change feed lasts at most."""
    change_waiters: int = 256
    """Waits for the change feed one engine server serves at once (``POST /v1/changes``)."""
    changes_kept: int = 1000
    """Change-feed rows kept; older ones are deleted as new ones are announced."""

    # --- audit and call log (engine/audit) --------------------------------------------
    provenance_record_bytes: int = 1 << 20
    """Bytes of a provenance envelope, and of the record inside it, that are decoded (1 MiB)."""
    attestation_bytes: int = 4 << 20
    """Bytes of one attestation (a DSSE envelope's JSON line) that are read (4 MiB)."""
    attestation_note_bytes: int = 16 << 20
    """Bytes of a commit's attestation note (``refs/notes/chit``) that are read (16 MiB)."""
    calllog_entry_bytes: int = 65536
    """Bytes of a stored call-log entry that are decoded."""
    calllog_head_bytes: int = 4096
    """Bytes of the stored call-log chain head that are decoded."""
    calllog_checkpoint_entries: int = 1000
    """Entries the call log may hold past its newest checkpoint; the append reaching it signs."""
    calllog_checkpoint_seconds: float = 1.0
    """Seconds an engine leaves the entries it appended unsigned before it signs a checkpoint."""
    calllog_checkpoint_bytes: int = 8192
    """Bytes of a checkpoint note that are read (a stored one or one given to verify)."""
    calllog_queue_entries: int = 10_000
    """Entries of read-only calls and refusals queued for the log's writer; a full queue waits."""
    calllog_batch_entries: int = 1000
    """Queued entries the background writer appends in one transaction."""
    calllog_wait_seconds: float = 10.0
    """Seconds a call waits for queue room or for its entry to be durable (else internal_error)."""
    calllog_text_chars: int = 256
    """Characters of an argument's text logged verbatim; longer text keeps a prefix."""
    calllog_label_chars: int = 128
    """Characters of a logged tool name or session id."""
    calllog_key_chars: int = 64
    """Characters of a logged argument name (and of a described value's type name)."""
    calllog_items: int = 32
    """Members of a logged list or object; the rest are counted."""
    calllog_argument_depth_levels: int = 4
    """Nesting levels of logged arguments; deeper values are described."""
    calllog_arguments_bytes: int = 8192
    """Bytes of one entry's redacted arguments; past it only their shape is logged."""
    export_commits: int = 10_000
    """Commits of a range ``chit audit export`` or ``attest-lane`` examines."""
    export_bytes: int = 256 << 20
    """Bytes of attestations one ``chit audit export`` writes (256 MiB)."""
    merged_commits: int = 100_000
    """Commits of the base's history one audit of merged work reads, and lane commits per squash."""
    merged_records: int = 100_000
    """Provenance records the audit of merged work reads to recognise squashes and rebases."""
    graph_commits: int = 5000
    """Lane commits the provenance graph reads."""
    graph_summary_chars: int = 80
    """Characters of a commit's summary line in the provenance graph."""
    graph_verdict_cache_entries: int = 65536
    """Commit verdicts the provenance graph memoises; the cache is emptied when full."""

    # --- semantic index (engine/semantic) ---------------------------------------------
    semantic_file_bytes: int = 1_000_000
    """Bytes of a file that is parsed; a larger one gets an empty, truncated record."""
    definitions_per_file: int = 10_000
    """Definitions (and Rust ``impl`` blocks) recorded per file."""
    occurrences_per_file: int = 50_000
    """Occurrences recorded per file."""
    imports_per_file: int = 50_000
    """Imports recorded per file."""
    signature_chars: int = 300
    """Characters of a recorded signature; a longer one is cut, ending in ``…``."""
    doc_chars: int = 2_000
    """Characters of a recorded docstring or leading comment; a longer one is cut."""
    name_chars: int = 4_096
    """Characters of a recorded name, qualname, module or base; a longer one is left out."""
    bases_per_definition: int = 256
    """Base classes recorded per definition."""
    semantic_payload_bytes: int = 16_000_000
    """Bytes of one encoded record or outline kept (a 1 MB source file encodes well below)."""
    semantic_rows: int = 200_000
    """Rows the persisted index keeps (ten times ``indexed_files``); the oldest go first."""
    binding_hops: int = 4
    """Files followed through re-exports when finding a name's origins."""
    blob_cache_entries: int = 50_000
    """Parsed files (by blob) an indexer keeps in memory."""
    view_cache_entries: int = 16
    """Tree indexes (views) an indexer keeps in memory."""
    indexed_files: int = 20_000
    """Files of known languages one view indexes; past it the caller's scope comes first."""
    listed_files: int = 200_000
    """Files of one tree listed for indexing."""
    fuzzy_candidates: int = 150
    """Names compared by edit ratio per fuzzy query (those sharing most bigrams)."""
    pool_workers: int = 8
    """Worker processes of the parse pool."""
    pool_min_files: int = 24
    """Files to parse below which the calling thread parses them (no pool)."""
    pool_batch_bytes: int = 256 * 1024
    """Bytes of plaintext in one batch sent to a parse worker, at most (256 KiB)."""
    pool_min_batch_bytes: int = 16 * 1024
    """Bytes of plaintext a batch sent to a parse worker is let grow to, at least (16 KiB)."""
    pool_close_seconds: float = 5.0
    """Seconds a closing parse pool waits for its workers before it ends them."""

    # --- semantic tools (engine/tools/semantic) ---------------------------------------
    result_budget_bytes: int = 32_768
    """Bytes of UTF-8 JSON a semantic tool result's lists (or code window) take."""
    code_window_lines: int = 60
    """Lines of code ``symbol_context`` shows around a definition."""
    impact_depth_levels: int = 3
    """Levels of callers ``change_impact`` follows."""
    impact_nodes: int = 2_000
    """Definitions ``change_impact`` reaches before it stops."""
    ambiguous_name_definitions: int = 8
    """Visible definitions of one name above which ``change_impact`` does not follow it."""
    intent_ttl_seconds: int = 3_600
    """Seconds an intent or a session's shared staged paths stay listed (at most the token's)."""
    intent_paths_bytes: int = 16_384
    """UTF-8 bytes of paths one intent (or one session's shared staged paths) keeps."""
    convention_file_bytes: int = 8_192
    """Bytes of each convention file (README, AGENTS.md, ...) ``project_context`` returns."""

    # --- service (engine/service) -----------------------------------------------------
    open_sessions: int = 4096
    """Sessions an engine keeps in memory; when full, idle ones are forgotten (work stays saved)."""
    session_id_chars: int = 128
    """Characters of a session id."""
    session_sweep_seconds: int = 60
    """Seconds between two sweeps of expired sessions' saved refs by one engine."""
    session_sweep_refs: int = 256
    """Saved sessions one sweep reads at most (the next sweep goes on from there)."""
    policy_file_bytes: int = 4 << 20
    """Bytes of the policy file read (4 MiB); a larger one is invalid."""

    # --- admin and exchange (engine/admin, engine/auth/issuers.py) --------------------
    freeze_reason_chars: int = 500
    """Characters of ``chit freeze --reason``."""
    jwt_chars: int = 16_384
    """Characters of a JWT presented to the token exchange."""
    jti_chars: int = 256
    """Characters of a JWT's ``jti`` claim (a UUID has 36)."""
    issuer_key_file_bytes: int = 1 << 20
    """Bytes of an issuer's key file (JWKS or PEM) read (1 MiB)."""

    # --- approvals and operators (engine/auth/discharge.py, engine/service/approvals.py) --
    operator_name_chars: int = 64
    """Characters of an operator's or an operator group's name."""
    operator_groups: int = 16
    """Groups one operator belongs to."""
    operators: int = 1_024
    """Operators one store registers."""
    approval_note_chars: int = 500
    """Characters of an approver's ``--note``."""
    approval_discharge_bytes: int = 4_096
    """Bytes of a discharge (``chit-approval/1``) or its decision body decoded."""
    approvals_pending_per_token: int = 64
    """Pending approvals one token may have waiting; more are refused with ``limit_exceeded``."""
    approvals_listed: int = 1_000
    """Approvals ``chit approvals list`` and ``status`` read at most."""

    def __post_init__(self) -> None:
        for field in fields(self):
            kind = type(field.default)
            value: object = getattr(self, field.name)
            if type(value) is not kind or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{field.name} must be a positive {kind.__name__}")


LIMITS: Final = Limits()
"""The limits the engine runs with."""
