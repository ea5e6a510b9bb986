"""Tool handlers. Each runs after the ordered check passed for its call.

A handler gets a :class:`CallContext` (the verified token, the session, the
repository, the policy, ``now`` and the offer) and the validated arguments, and
returns the tool's output model. Paths named in ``path_args`` were already
validated, scope-checked and policy-checked by the service; anything else a
handler touches it checks itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import policy
from engine import git
from engine.audit import graph, provenance
from engine.auth import agents, caveats
from engine.auth import token as tokens
from engine.catalog import schemas as s
from engine.catalog.declarations import CATALOG_ENCODING
from engine.errors import (
    AccessDeniedError,
    ConfigurationError,
    InvalidRequestError,
    RepositoryError,
    denied,
)
from engine.paths import MAX_GLOB_CHARS, glob_contained, validate_glob
from engine.state import Delegation
from engine.tools.context import CallContext

__all__ = [
    "commit",
    "delete_file",
    "diff",
    "effective_scope",
    "issue_sub_token",
    "list_conflicts",
    "log",
    "move_file",
    "provenance_graph",
    "read_file",
    "resolve_conflict",
    "status",
    "write_file",
]

TRAILER_PREFIX = "Chit-"
_TRAILER_LINE = re.compile(r"^\s*chit-[A-Za-z0-9-]*\s*:", re.IGNORECASE | re.MULTILINE)


_MESSAGE_FORBIDDEN = frozenset(
    [chr(c) for c in range(0x20) if chr(c) not in "\n\t"]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u2028", "\u2029"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)


def _forbidden_in_message(char: str) -> bool:
    """Characters that forge lines or reorder text in ``git log`` (CR, C1, U+2028, bidi)."""
    return char in _MESSAGE_FORBIDDEN


def effective_scope(ctx: CallContext, _args: s.NoArgs) -> s.EffectiveScope:
    """Describe the token and its offer."""
    t = ctx.token
    return s.EffectiveScope(
        agent=t.agent,
        lane=t.lane,
        token_id=t.token_id,
        chain=[agent for _id, agent in t.chain],
        operations=sorted(t.operations),
        path_scopes=[list(g) for g in t.path_scopes],
        expires_at=t.expires_at,
        not_before=t.not_before,
        delegable=t.delegable,
        tools=ctx.offer.names(),
        withheld=ctx.offer.withheld,
        catalog_hash=ctx.offer.catalog_hash,
        catalog_encoding=CATALOG_ENCODING,
    )


def status(ctx: CallContext, _args: s.NoArgs) -> s.Status:
    """Report the session's staged change and lane position."""
    info = ctx.repo.status(ctx.token.agent, ctx.session.staged)
    staged = [s.StagedEntry(**e) for e in info["staged"] if ctx.visible(e["path"])]
    return s.Status(
        session=ctx.session.session_id,
        lane=info["lane"],
        lane_exists=info["lane_exists"],
        lane_head=info["lane_head"],
        base=info["base"],
        main_head=info["main_head"],
        ahead=info["ahead"],
        behind=info["behind"],
        staged=staged,
        staged_bytes=ctx.session.staged.byte_size(),
    )


def read_file(ctx: CallContext, args: s.ReadFileArgs) -> s.FileContent:
    """Read a file from the session view or a revision."""
    if args.ref is None:
        data = ctx.repo.view_read(ctx.token.agent, ctx.session.staged, args.path)
        ctx.session.seen[args.path] = _digest(data)
    else:
        data = ctx.repo.read_at(args.ref, args.path)
    limit = ctx.policy.limits.file_bytes
    if len(data) > limit:
        raise AccessDeniedError(
            "limit_exceeded",
            f"the file is {len(data)} bytes, over the limit of {limit}",
            rule="limits.file_bytes",
        )
    try:
        return s.FileContent(
            path=args.path,
            ref=args.ref,
            encoding="utf-8",
            content=data.decode("utf-8"),
            size=len(data),
        )
    except UnicodeDecodeError:
        return s.FileContent(
            path=args.path,
            ref=args.ref,
            encoding="base64",
            content=base64.b64encode(data).decode("ascii"),
            size=len(data),
        )


def log(ctx: CallContext, args: s.LogArgs) -> s.Log:
    """List commits, pruned to the caller's scope."""
    result = ctx.repo.log(args.ref, ctx.token.agent, args.path, args.limit, ctx.visible)
    return s.Log.model_validate(result)


def diff(ctx: CallContext, args: s.DiffArgs) -> s.Diff:
    """Diff the staged change or a revision against the session view, pruned to scope."""
    result = ctx.repo.diff(ctx.token.agent, ctx.session.staged, args.ref, args.path, ctx.visible)
    return s.Diff.model_validate(result)


def _decode_content(content: str, encoding: str) -> bytes:
    if encoding == "utf-8":
        return content.encode("utf-8", errors="strict")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("invalid_argument", "content is not valid base64") from None


def _staged_result(staged: git.StagedChange, path: str, change: Any) -> s.Staged:
    return s.Staged(
        path=path, change=change, staged_files=len(staged.changes), staged_bytes=staged.byte_size()
    )


def _trial(staged: git.StagedChange) -> git.StagedChange:
    return git.StagedChange(
        base=staged.base,
        changes=dict(staged.changes),
        modes=dict(staged.modes),
        conflicts=dict(staged.conflicts),
        conflict_modes=dict(staged.conflict_modes),
    )


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _current(ctx: CallContext, path: str) -> bytes | None:
    try:
        return ctx.repo.view_read(ctx.token.agent, ctx.session.staged, path)
    except RepositoryError as exc:
        if exc.code == "not_found":
            return None
        raise


def _check_seen(ctx: CallContext, *paths: str) -> None:
    """Refuse stale or conflicted writes.

    A path whose content changed since this session read it, or one with an
    unresolved conflict (resolve_conflict settles those), is a ``conflict``.
    """
    for path in paths:
        if path in ctx.session.staged.conflicts:
            raise RepositoryError(
                "conflict",
                f"{path!r} has an unresolved conflict; settle it with resolve_conflict",
                path=path,
            )
        if path in ctx.session.seen and ctx.session.seen[path] != _digest(_current(ctx, path)):
            raise RepositoryError(
                "conflict",
                f"{path!r} changed on your lane since you read it; read it again, then write",
                path=path,
            )


def _unstaged_or(staged: git.StagedChange, path: str, change: str) -> str:
    return change if path in staged.changes else "unstaged"


def write_file(ctx: CallContext, args: s.WriteFileArgs) -> s.Staged:
    """Stage a write. Nothing changes if any check fails."""
    data = _decode_content(args.content, args.encoding)
    staged = ctx.session.staged
    _check_seen(ctx, args.path)
    existed = ctx.repo.exists(ctx.token.agent, staged, args.path)
    trial = _trial(staged)
    ctx.repo.stage_write(ctx.token.agent, trial, args.path, data)
    ctx.enforce_sizes("write_file", args.path, len(data), trial)
    _adopt(staged, trial)
    ctx.session.seen[args.path] = _digest(data)
    change = _unstaged_or(staged, args.path, "modified" if existed else "added")
    return _staged_result(staged, args.path, change)


def delete_file(ctx: CallContext, args: s.DeleteFileArgs) -> s.Staged:
    """Stage a deletion."""
    staged = ctx.session.staged
    _check_seen(ctx, args.path)
    trial = _trial(staged)
    ctx.repo.stage_delete(ctx.token.agent, trial, args.path)
    ctx.enforce_sizes("delete_file", args.path, 0, trial)
    _adopt(staged, trial)
    ctx.session.seen[args.path] = None
    return _staged_result(staged, args.path, _unstaged_or(staged, args.path, "deleted"))


def move_file(ctx: CallContext, args: s.MoveFileArgs) -> s.Staged:
    """Stage a move."""
    staged = ctx.session.staged
    _check_seen(ctx, args.source, args.destination)
    trial = _trial(staged)
    ctx.repo.stage_move(ctx.token.agent, trial, args.source, args.destination)
    moved = trial.changes.get(args.destination)
    ctx.enforce_sizes("move_file", args.destination, len(moved or b""), trial)
    _adopt(staged, trial)
    ctx.session.seen[args.source] = None
    ctx.session.seen[args.destination] = _digest(moved)
    return _staged_result(staged, args.destination, "moved")


def _adopt(staged: git.StagedChange, trial: git.StagedChange) -> None:
    staged.base = trial.base
    staged.changes = trial.changes
    staged.modes = trial.modes
    staged.conflicts = trial.conflicts
    staged.conflict_modes = trial.conflict_modes


def commit(ctx: CallContext, args: s.CommitArgs) -> s.Committed:
    """Land the staged change on the caller's lane with provenance trailers."""
    message = args.message.strip()
    if not message or any(_forbidden_in_message(c) for c in message):
        raise InvalidRequestError(
            "invalid_argument",
            "the commit message is empty or holds control, line-separator or bidi characters",
        )
    if _TRAILER_LINE.search(message):
        raise InvalidRequestError(
            "invalid_argument", "commit messages may not contain lines starting with 'Chit-'"
        )
    staged = ctx.session.staged
    if staged.is_empty():
        raise InvalidRequestError("invalid_argument", "nothing is staged")
    if staged.conflicts:
        raise _unresolved(ctx, staged)
    # A session is shared by every token of its identity, an attenuated one
    # included: what a wider token staged may lie outside this one's scope.
    # Those paths are not named (they are outside what this token may see).
    outside = sum(1 for path in staged.changes if not ctx.token.allows_path(path))
    if outside:
        raise AccessDeniedError(
            "path_outside_scope",
            f"{outside} staged path(s) are outside this token's scope; only a token whose "
            "scope holds every staged path can commit them",
            outside=outside,
        )
    files = len(staged.changes)
    decision = policy.evaluate(
        ctx.policy,
        policy.Request(
            agent=ctx.token.agent,
            tool="commit",
            operation="commit",
            paths=tuple(sorted(staged.changes)),
            staged_bytes=staged.byte_size(),
            staged_files=files,
            commit_files=files,
            message=message,
        ),
    )
    if not decision.allowed:
        raise denied(decision)
    trailers = {
        "Chit-Agent": ctx.token.agent,
        "Chit-Session": ctx.session.session_id,
        "Chit-Token-Id": ctx.token.token_id,
        "Chit-Catalog-Hash": ctx.offer.catalog_hash,
        "Chit-Catalog-Encoding": CATALOG_ENCODING,
    }
    body = message + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers.items())
    ctx.repo.put_blob_in_store(
        ctx.catalog_store, ctx.offer.catalog_hash.removeprefix("sha256:"), ctx.offer.catalog_bytes
    )
    try:
        oid = ctx.repo.commit(
            ctx.token.agent,
            staged,
            body,
            author_name=ctx.token.agent,
            author_email=f"{ctx.token.agent}@agents.chit.invalid",
            time=ctx.now,
            merge=True,
            seal=_sealer(ctx),
        )
    except RepositoryError as exc:
        if exc.code == "conflict" and staged.conflicts:
            raise _unresolved(ctx, staged) from None
        if exc.code == "conflict" and ctx.repo.head_for(ctx.token.agent).id != staged.base:
            raise RepositoryError(
                "conflict",
                "your lane moved while this commit was being made; nothing was committed. "
                "Commit again: the staged change will be merged onto the lane",
                lane=ctx.token.lane,
            ) from None
        raise
    landed = ctx.repo.resolve(str(oid))
    key = provenance.PROVENANCE_TRAILER
    return s.Committed(
        commit=str(oid),
        lane=ctx.token.lane,
        parent=str(landed.parent_ids[0]),
        files=files,
        catalog_hash=ctx.offer.catalog_hash,
        catalog_encoding=CATALOG_ENCODING,
        trailers=trailers | {key: git.commit_trailers(landed)[key]},
    )


def _sealer(ctx: CallContext) -> Callable[[dict[str, Any]], bytes]:
    """The closure that signs this commit's provenance record (docs/provenance-format.md)."""
    if ctx.signing_key is None:
        raise ConfigurationError("no signing key configured")
    key = ctx.signing_key()
    raw = tokens.parse(ctx.token_text)
    chain_ids = {block_id for block_id, _agent in ctx.token.chain[1:]}
    issued = {d.child_id: d.issued_at for d in ctx.store.delegations() if d.child_id in chain_ids}
    hops = provenance.delegation_chain(ctx.token, raw, issued)

    def seal(facts: dict[str, Any]) -> bytes:
        commit = {k: facts[k] for k in ("tree", "parents", "author", "committer")}
        commit["message"] = provenance.message_digest(facts["message"])
        record = {
            "v": provenance.RECORD_VERSION,
            "kid": key.key_id,
            "lane": ctx.token.lane,
            "agent": ctx.token.agent,
            "session": ctx.session.session_id,
            "token_id": ctx.token.token_id,
            "time": ctx.now,
            "commit": commit,
            "chain": [hop.encoded() for hop in hops],
            "catalog": {"hash": ctx.offer.catalog_hash, "encoding": CATALOG_ENCODING},
            "policy": ctx.policy_hash,
            "change": facts["change"],
        }
        return provenance.seal(record, key)

    return seal


def _unresolved(ctx: CallContext, staged: git.StagedChange) -> RepositoryError:
    return RepositoryError(
        "conflict",
        "your lane moved and these paths changed on both sides; see list_conflicts, "
        "settle each with resolve_conflict (ours, theirs or content), then commit again",
        paths=sorted(p for p in staged.conflicts if ctx.visible(p)),
        lane=ctx.token.lane,
    )


def _conflict_view(path: str, sides: tuple[bytes | None, ...]) -> s.Conflict:
    def text(data: bytes) -> str | None:
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return None if "\x00" in decoded else decoded

    present = [d for d in sides if d is not None]
    if all(text(d) is not None for d in present):
        views = [None if d is None else text(d) for d in sides]
        return s.Conflict(path=path, base=views[0], ours=views[1], theirs=views[2])
    b64 = [None if d is None else base64.b64encode(d).decode("ascii") for d in sides]
    return s.Conflict(
        path=path, base=b64[0], ours=b64[1], theirs=b64[2], binary=True, encoding="base64"
    )


def list_conflicts(ctx: CallContext, _args: s.NoArgs) -> s.Conflicts:
    """The session's unresolved conflicts, and where the lane would conflict with main."""
    staged = ctx.session.staged
    session = [
        _conflict_view(path, sides)
        for path, sides in sorted(staged.conflicts.items())
        if ctx.visible(path)
    ]
    with_main = [
        _conflict_view(c["path"], (c["base"], c["ours"], c["theirs"]))
        for c in ctx.repo.conflicts_with_main(ctx.token.agent, ctx.visible)
    ]
    return s.Conflicts(session=session, with_main=with_main)


def resolve_conflict(ctx: CallContext, args: s.ResolveConflictArgs) -> s.Resolved:
    """Settle one conflicting path with ours, theirs or explicit content."""
    staged = ctx.session.staged
    if args.path not in staged.conflicts:
        raise RepositoryError("not_found", "that path has no unresolved conflict in this session")
    _base, ours, theirs = staged.conflicts[args.path]
    if args.resolution == "content":
        if args.content is None:
            raise InvalidRequestError(
                "invalid_argument", "resolution 'content' needs content", fields=["content"]
            )
        chosen: bytes | None = _decode_content(args.content, args.encoding)
    elif args.content is not None:
        raise InvalidRequestError(
            "invalid_argument", "content is only for resolution 'content'", fields=["content"]
        )
    else:
        chosen = ours if args.resolution == "ours" else theirs
    ours_mode, theirs_mode = staged.conflict_modes.get(args.path, (None, None))
    chosen_mode = {"ours": ours_mode, "theirs": theirs_mode}.get(args.resolution)
    trial = _trial(staged)
    trial.conflicts.pop(args.path)
    trial.conflict_modes.pop(args.path, None)
    if chosen is None:
        # Absent on the chosen side: delete it if the (merged) base still has it.
        if ctx.repo.exists(ctx.token.agent, _without(trial, args.path), args.path):
            trial.changes[args.path] = None
        else:
            trial.changes.pop(args.path, None)
    else:
        unstaged = _without(trial, args.path)
        ctx.repo.stage_write(ctx.token.agent, unstaged, args.path, chosen)
        trial.changes, trial.modes = unstaged.changes, unstaged.modes
        if chosen_mode is not None and chosen_mode != git.MODE_FILE:
            # Keep the chosen side's type (executable, symlink), not a plain file.
            trial.changes[args.path] = chosen
            trial.modes[args.path] = chosen_mode
    ctx.enforce_sizes("resolve_conflict", args.path, len(chosen or b""), trial)
    _adopt(staged, trial)
    staged.conflicts = trial.conflicts
    ctx.session.seen[args.path] = _digest(chosen)
    return s.Resolved(path=args.path, resolution=args.resolution, remaining=len(staged.conflicts))


def _without(staged: git.StagedChange, path: str) -> git.StagedChange:
    changes = {p: d for p, d in staged.changes.items() if p != path}
    modes = {p: m for p, m in staged.modes.items() if p != path}
    return git.StagedChange(
        base=staged.base,
        changes=changes,
        modes=modes,
        conflicts=dict(staged.conflicts),
        conflict_modes=dict(staged.conflict_modes),
    )


def _widens(what: str, asked: Any, held: Any) -> AccessDeniedError:
    return AccessDeniedError(
        "delegation_widens",
        f"the requested {what} is not contained in what this token holds",
        asked=asked,
        held=held,
    )


def issue_sub_token(ctx: CallContext, args: s.IssueSubTokenArgs) -> s.SubToken:
    """Delegate a strictly narrower token to a new agent (engine-made block)."""
    parent = ctx.token
    try:
        agents.validate_agent_name(args.agent, parent=parent.agent)
    except ValueError:
        raise InvalidRequestError(
            "invalid_argument",
            f"a helper of {parent.agent} is named {parent.agent}.<label> (label: a-z, 0-9, "
            f"'-', '_', starting alnum; at most {agents.MAX_AGENT_CHARS} characters in all)",
            fields=["agent"],
        ) from None
    limit = ctx.policy.limits.delegation_depth
    if parent.depth + 1 > limit:
        raise AccessDeniedError(
            "delegation_depth_exceeded",
            f"a sub-token would be {parent.depth + 1} delegations deep; the limit is {limit}",
        )
    ops = set(args.ops)
    if not ops or not ops <= caveats.OPERATIONS or len(ops) != len(args.ops):
        raise InvalidRequestError(
            "invalid_argument",
            f"ops are distinct names from {sorted(caveats.OPERATIONS)}",
            fields=["ops"],
        )
    if not ops <= parent.operations:
        raise _widens("operations", sorted(ops), sorted(parent.operations))
    if args.delegable and "sub-token:issue" not in ops:
        raise InvalidRequestError(
            "invalid_argument", "a delegable sub-token also needs sub-token:issue", fields=["ops"]
        )
    held = [list(g) for g in parent.path_scopes]
    if not 1 <= len(args.paths) <= caveats.MAX_GLOBS or any(
        len(g) > MAX_GLOB_CHARS or not unicodedata.is_normalized("NFC", g) for g in args.paths
    ):
        raise InvalidRequestError(
            "invalid_argument",
            f"give 1 to {caveats.MAX_GLOBS} NFC globs of at most {MAX_GLOB_CHARS} characters",
            fields=["paths"],
        )
    for glob in args.paths:
        if isinstance(glob, str) and ".." in glob.split("/"):
            raise _widens("paths", args.paths, held)
        try:
            validate_glob(glob)
        except ValueError:
            raise InvalidRequestError(
                "invalid_argument", "a path glob is invalid", fields=["paths"]
            ) from None
        if not parent.path_scopes or not all(
            any(glob_contained(glob, outer) for outer in scope) for scope in parent.path_scopes
        ):
            raise _widens("paths", args.paths, held)
    expires_at = ctx.now + args.ttl_seconds
    if expires_at > parent.expires_at:
        raise _widens("expiry", expires_at, parent.expires_at)
    if args.ttl_seconds > ctx.policy.limits.token_lifetime_seconds:
        raise AccessDeniedError(
            "limit_exceeded",
            "ttl_seconds exceeds the policy's token lifetime",
            rule="limits.token_lifetime_seconds",
        )
    root_key = ctx.keys(parent.key_id)
    if root_key is None:  # retired between verification and now
        raise AccessDeniedError("token_unknown_key", "the token's key was retired")
    try:
        text, child_id = tokens.delegate(
            ctx.token_text,
            root_key,
            agent=args.agent,
            operations=sorted(ops),
            paths=list(args.paths),
            expires_at=expires_at,
            delegable=args.delegable,
        )
    except ValueError:
        raise AccessDeniedError(
            "limit_exceeded", "the sub-token would be too large (blocks or characters)"
        ) from None
    ctx.store.record_delegation(
        Delegation(
            child_id=child_id,
            parent_id=parent.token_id,
            parent_agent=parent.agent,
            child_agent=args.agent,
            issued_at=ctx.now,
            expires_at=expires_at,
            scope={"ops": sorted(ops), "paths": list(args.paths), "delegable": args.delegable},
        )
    )
    return s.SubToken(token=text, token_id=child_id, agent=args.agent, expires_at=expires_at)


def provenance_graph(ctx: CallContext, args: s.ProvenanceGraphArgs) -> s.ProvenanceGraph:
    """The derivation graph around a commit, session or token id, pruned to the caller's scope.

    Only commits whose provenance record verifies under the engine's public keys
    take part (engine/graph.py).
    """
    if ctx.public_keys is None:
        raise ConfigurationError("no public keys configured")
    entries, _unverified, truncated = graph.collect(ctx.repo, ctx.public_keys())
    found = graph.build_graph(entries, args.handle.strip(), ctx.visible)
    return s.ProvenanceGraph(
        nodes=[s.GraphNode(**n) for n in found["nodes"]],
        edges=[s.GraphEdge(**e) for e in found["edges"]],
        pruned=found["pruned"],
        truncated=truncated,
    )
