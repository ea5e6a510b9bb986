"""The ``commit`` tool: the staged change lands on the caller's lane, with provenance.

The message is checked (no forged ``Chit-`` trailers, no control, line-separator
or bidi characters), the engine appends its trailers, and the sealer signs the
commit's provenance record (docs/provenance-format.md, docs/tools.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import policy
from engine import git
from engine.audit import intoto, provenance
from engine.audit.approval import approval_entry
from engine.catalog import schemas as s
from engine.catalog.declarations import CATALOG_ENCODING
from engine.errors import (
    AccessDeniedError,
    ChitError,
    ConfigurationError,
    InvalidRequestError,
    RepositoryError,
    denied,
)
from engine.tools.conflicts import unresolved
from engine.tools.context import CallContext

__all__ = ["commit"]

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


def _checked_message(text: str) -> str:
    """The commit message, stripped; refused if empty, with odd characters or trailers."""
    message = text.strip()
    if not message or any(_forbidden_in_message(c) for c in message):
        raise InvalidRequestError(
            "invalid_argument",
            "the commit message is empty or holds control, line-separator or bidi characters",
        )
    if _TRAILER_LINE.search(message):
        raise InvalidRequestError(
            "invalid_argument", "commit messages may not contain lines starting with 'Chit-'"
        )
    return message


def commit(ctx: CallContext, args: s.CommitArgs) -> s.Committed:
    """Land the staged change on the caller's lane with provenance trailers."""
    message = _checked_message(args.message)
    staged = ctx.session.staged
    if staged.is_empty():
        raise InvalidRequestError("invalid_argument", "nothing is staged")
    if staged.conflicts:
        raise unresolved(ctx, staged)
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
        provenance.ASSISTED_TRAILER: provenance.assisted_by(ctx.token.agent),
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
    seal, attest = _sealer(ctx)  # an approved change that cannot land as approved is refused here
    try:
        oid = ctx.repo.commit(
            ctx.token.agent,
            staged,
            body,
            author_name=ctx.token.agent,
            author_email=f"{ctx.token.agent}@agents.chit.invalid",
            time=ctx.now,
            merge=True,
            seal=seal,
            attest=attest,
        )
    except RepositoryError as exc:
        if exc.code == "conflict" and staged.conflicts:
            raise unresolved(ctx, staged) from None
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


def _content(ctx: CallContext, view: git.StagedChange | None, path: str) -> bytes | None:
    """A path's plaintext in a view of the caller's lane (``None``: the lane head), or None."""
    try:
        return ctx.repo.view_read(ctx.token.agent, view, path)
    except ChitError:
        return None


def _approved_parent(ctx: CallContext) -> str:
    """The commit an approved change may land on: one where it lands exactly as approved.

    The staged base, or the lane head when every staged path the lane changed
    since the base holds there what is staged (a merge then lands the staged
    content at every staged path).

    Raises:
        RepositoryError: ``conflict`` if the lane holds other content at a
            staged path: merging would land what nobody approved.
    """
    staged = ctx.session.staged
    agent = ctx.token.agent
    head = ctx.repo.head_for(agent)
    if staged.base is None or head.id == staged.base:
        return str(staged.base)
    at_base = git.StagedChange(base=staged.base)
    for path in ctx.repo.staged_paths_changed_on_lane(agent, staged):
        on_lane, before = _content(ctx, None, path), _content(ctx, at_base, path)
        if on_lane != before and on_lane != staged.changes.get(path):
            raise RepositoryError(
                "conflict",
                "your lane changed a staged path since the approval was asked, so merging "
                "would land other content than was approved; nothing was committed. Read "
                "the path from your lane, write your change again and commit: that asks "
                "for a new approval",
                lane=ctx.token.lane,
            )
    return str(head.id)


def _sealer(
    ctx: CallContext,
) -> tuple[Callable[[dict[str, Any]], bytes], Callable[[str, bytes], bytes]]:
    """The closures that sign this commit's provenance record and its attestation.

    The first makes the record's envelope (docs/provenance-format.md), the
    second the in-toto attestation of the landed commit (docs/attestations.md).
    """
    if ctx.signing_key is None:
        raise ConfigurationError("no signing key configured")
    key = ctx.signing_key()
    chain_ids = {block_id for block_id, _agent in ctx.token.chain[1:]}
    issued = {d.child_id: d.issued_at for d in ctx.store.delegations() if d.child_id in chain_ids}
    hops = provenance.delegation_chain(ctx.token, issued)

    approval = ctx.approval
    base = None if approval is None else _approved_parent(ctx)

    def seal(facts: dict[str, Any]) -> bytes:
        commit = {k: facts[k] for k in ("tree", "parents", "author", "committer")}
        commit["message"] = provenance.message_digest(facts["message"])
        if approval is not None and commit["parents"] != [base]:
            # The lane moved after the check above: what merges now was not
            # compared with what was approved. Nothing is written, and the
            # approval is put back for the retry.
            raise RepositoryError(
                "conflict", "your lane moved while this approved commit was being made; nothing "
                "was committed. Commit again", lane=ctx.token.lane,
            )
        record: dict[str, Any] = {
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
        if approval is not None:
            record["v"] = provenance.RECORD_VERSION_APPROVED
            record["approval"] = approval_entry(
                approval.discharge, approval.operator_public_key, approval.request,
                approval.change,
            )
        return provenance.seal(record, key)

    def attest(commit: str, envelope: bytes) -> bytes:
        return intoto.attest_commit(commit, envelope, key)

    return seal, attest
