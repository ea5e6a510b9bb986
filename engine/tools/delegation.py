"""The delegation tool: ``issue_sub_token`` makes a strictly narrower token for a helper.

Operations, path globs (sound glob inclusion), repository globs and expiry must
each be contained in what the caller's token holds, within the policy's depth and lifetime limits;
the engine makes the block and records the delegation (docs/tools.md,
docs/token-format.md).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from engine.auth import agents, caveats
from engine.auth import token as tokens
from engine.auth.reponames import repo_glob_contained, validate_repo_glob
from engine.catalog import schemas as s
from engine.errors import AccessDeniedError, InvalidRequestError
from engine.limits import LIMITS
from engine.paths import glob_contained, validate_glob
from engine.state import Delegation
from engine.tools.context import CallContext

__all__ = ["issue_sub_token"]


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
            f"'-', '_', starting alnum; at most {LIMITS.agent_name_chars} characters in all)",
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
    _check_paths(ctx, args.paths)
    if args.repos is not None:
        _check_repos(ctx, args.repos)
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
            parent.parsed,
            root_key,
            agent=args.agent,
            operations=sorted(ops),
            paths=list(args.paths),
            expires_at=expires_at,
            delegable=args.delegable,
            repos=None if args.repos is None else list(args.repos),
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
            scope={
                "ops": sorted(ops),
                "paths": list(args.paths),
                "delegable": args.delegable,
                **({} if args.repos is None else {"repos": list(args.repos)}),
            },
        )
    )
    return s.SubToken(token=text, token_id=child_id, agent=args.agent, expires_at=expires_at)


def _check_paths(ctx: CallContext, paths: list[str]) -> None:
    """Refuse globs that are malformed or not contained in every scope the token holds."""
    parent = ctx.token
    held = [list(g) for g in parent.path_scopes]
    if not 1 <= len(paths) <= LIMITS.caveat_globs or any(
        len(g) > LIMITS.glob_chars or not unicodedata.is_normalized("NFC", g) for g in paths
    ):
        raise InvalidRequestError(
            "invalid_argument",
            f"give 1 to {LIMITS.caveat_globs} NFC globs of at most {LIMITS.glob_chars} characters",
            fields=["paths"],
        )
    for glob in paths:
        if isinstance(glob, str) and ".." in glob.split("/"):
            raise _widens("paths", paths, held)
        try:
            validate_glob(glob)
        except ValueError:
            raise InvalidRequestError(
                "invalid_argument", "a path glob is invalid", fields=["paths"]
            ) from None
        if not parent.path_scopes or not all(
            any(glob_contained(glob, outer) for outer in scope) for scope in parent.path_scopes
        ):
            raise _widens("paths", paths, held)


def _check_repos(ctx: CallContext, repos: list[str]) -> None:
    """Refuse repository globs that are malformed or not within every ``repos`` scope held.

    A token whose root block names no repository holds the one repository of
    the engine it is used on (it is accepted nowhere else), so a helper's
    globs must stay within that repository's name.
    """
    parent = ctx.token
    held = [list(g) for g in parent.repo_scopes]
    if parent.single_repo_only:
        held.insert(0, [ctx.repo_name])
    if not 1 <= len(repos) <= LIMITS.caveat_globs:
        raise InvalidRequestError(
            "invalid_argument",
            f"give 1 to {LIMITS.caveat_globs} repository globs",
            fields=["repos"],
        )
    for glob in repos:
        try:
            validate_repo_glob(glob)
        except ValueError:
            raise InvalidRequestError(
                "invalid_argument", "a repository glob is invalid", fields=["repos"]
            ) from None
        if not held or not all(
            any(repo_glob_contained(glob, outer) for outer in scope) for scope in held
        ):
            raise _widens("repos", repos, held)
