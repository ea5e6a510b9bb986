"""The operator's token commands: mint, inspect, attenuate and revoke tokens.

Minting uses the home's newest root key and the policy's lifetime cap;
inspecting and attenuating need no key and no engine. The token format is in
docs/token-format.md.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from engine.admin.state import state_store
from engine.audit.calllog import decode_entry
from engine.auth import token as tokens
from engine.auth.rootkeys import Keyring
from engine.errors import ChitError
from engine.paths import validate_path
from engine.service.policyfile import load_policy
from engine.state import Store
from policy.overlap import globs_may_overlap

__all__ = ["attenuate_token", "inspect_token", "mint_token", "parse_duration", "revoke"]

_DURATION = re.compile(r"^([0-9]{1,9})([smhd]?)$", re.ASCII)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """Parse ``90``, ``90s``, ``15m``, ``2h`` or ``7d`` into seconds.

    Raises:
        ValueError: If the text is not such a duration or is zero.
    """
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError("durations look like 90s, 15m, 2h or 7d")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


def mint_token(
    home: str | os.PathLike[str],
    *,
    agent: str,
    operations: list[str],
    paths: list[str],
    ttl_seconds: int,
    delegable: bool = False,
    now: int | None = None,
    repos: list[str] | None = None,
) -> dict[str, Any]:
    """Mint a root token with the newest active root key.

    Args:
        home: The chit home.
        agent: Agent name; its lane is ``agent/<agent>``.
        operations: Operations to grant.
        paths: Path globs to grant.
        ttl_seconds: Lifetime in seconds, at most the policy's
            ``limits.token_lifetime_seconds``.
        delegable: Grant the delegation flag.
        now: Issue time, unix seconds (default: the clock).
        repos: Repository name globs the token is good for (``chit mint
            --repos``); ``None``: no ``repos`` caveat, a token good only where
            the engine serves exactly one repository.

    Returns:
        ``{"token", "token_id", "agent", "key_id", "expires_at"}``.

    Raises:
        ConfigurationError: If the keyring or policy is unusable.
        ValueError: If an argument is invalid or the lifetime exceeds policy.
    """
    pol = load_policy(home)
    if ttl_seconds > pol.limits.token_lifetime_seconds:
        raise ValueError(
            f"ttl exceeds the policy's limits.token_lifetime_seconds "
            f"({pol.limits.token_lifetime_seconds})"
        )
    if not paths:
        raise ValueError("give at least one path glob")
    if not operations:
        raise ValueError("give at least one operation")
    if "sub-token:issue" in operations and not delegable:
        raise ValueError("sub-token:issue is useless without --delegable")
    for glob in paths:
        if any(_is_dotgit_glob(segment) for segment in glob.split("/")):
            raise ValueError("a glob naming .git can never match: chit never exposes .git")
    issued = int(time.time()) if now is None else now
    key = Keyring(home).signing_key()
    text = tokens.mint(
        key.secret,
        key.key_id,
        agent=agent,
        operations=operations,
        paths=paths,
        expires_at=issued + ttl_seconds,
        delegable=delegable,
        repos=repos,
    )
    parsed = tokens.parse(text)
    return {
        "token": text,
        "token_id": parsed.unverified_blocks()[0]["id"],
        "agent": agent,
        "key_id": key.key_id,
        "expires_at": issued + ttl_seconds,
    }


def _is_dotgit_glob(segment: str) -> bool:
    try:
        validate_path(segment)
    except ChitError as exc:
        return exc.code == "path_forbidden"
    return False


def inspect_token(text: str) -> dict[str, Any]:
    """Describe a token without verifying it (never shows the tag).

    Returns:
        ``{"verified": False, "version", "algorithm", "key_id", "id" (the
        token's id: its last identity block, whose revocation ends this token
        with every attenuation and sub-token of it), "agent", "chain",
        "last_block_id" (revoking it ends only this attenuation and what
        derives from it; the token id when nothing was attenuated), "blocks":
        [{"id", "agent"?, "caveats"}]}``.

    Raises:
        MalformedDataError: ``token_malformed`` if it does not parse.
    """
    parsed = tokens.parse(text)
    blocks = parsed.unverified_blocks()
    identities = [b for b in blocks if "agent" in b]
    identity = identities[-1] if identities else blocks[0]
    return {
        "verified": False,
        "version": parsed.version,
        "algorithm": parsed.algorithm,
        "key_id": parsed.key_id,
        "id": identity["id"],
        "agent": identity.get("agent"),
        "chain": [{"id": b["id"], "agent": b["agent"]} for b in identities],
        "last_block_id": blocks[-1]["id"],
        "blocks": blocks,
    }


def attenuate_token(
    text: str,
    *,
    operations: list[str] | None = None,
    paths: list[str] | None = None,
    ttl_seconds: int | None = None,
    drop_delegation: bool = False,
    now: int | None = None,
    repos: list[str] | None = None,
) -> dict[str, Any]:
    """Narrow a token offline (no key, no engine): see :func:`engine.auth.token.attenuate`.

    Args:
        text: The token to narrow.
        operations: Operations to keep.
        paths: Globs to limit to.
        ttl_seconds: Expire this many seconds from ``now`` (never later than the parent).
        drop_delegation: Remove the delegation flag.
        now: Unix seconds (default: the clock).
        repos: Repository name globs to limit to.

    Returns:
        ``{"token", "id" (the token's unchanged id), "blocks"}``.

    Raises:
        MalformedDataError: ``token_malformed`` if the token does not parse.
        ValueError: If nothing is narrowed or an argument is invalid.
    """
    _refuse_no_authority(tokens.parse(text), operations, paths, repos)
    issued = int(time.time()) if now is None else now
    narrowed = tokens.attenuate(
        text,
        operations=operations,
        paths=paths,
        expires_at=None if ttl_seconds is None else issued + ttl_seconds,
        drop_delegation=drop_delegation,
        repos=repos,
    )
    info = inspect_token(narrowed)
    return {"token": narrowed, "id": info["id"], "blocks": len(info["blocks"])}


def _refuse_no_authority(
    parsed: tokens.UnverifiedToken,
    operations: list[str] | None,
    paths: list[str] | None,
    repos: list[str] | None,
) -> None:
    """Refuse an attenuation that would leave no authority at all.

    Authority is the intersection of every block's caveats
    (docs/token-format.md): operations none of which the token holds, or globs
    none of which can meet one of the token's path (or repository) lists,
    would mint a token that can do nothing. Globs are compared with
    :func:`policy.overlap.globs_may_overlap`, which answers "may overlap" when
    unsure, so only a provably empty result is refused.

    Raises:
        ValueError: Naming what is disjoint.
        MalformedDataError: ``token_malformed`` if a block does not decode.
    """
    held_ops: set[str] | None = None
    lists: dict[str, list[list[str]]] = {"paths": [], "repos": []}
    for block in parsed.unverified_blocks():
        for caveat in block["caveats"]:
            if not isinstance(caveat, list) or len(caveat) != 2:
                continue
            kind, value = caveat
            if kind == "ops" and isinstance(value, list):
                held_ops = set(value) if held_ops is None else held_ops & set(value)
            elif kind in lists and isinstance(value, list):
                lists[kind].append([str(v) for v in value])
    if operations is not None and held_ops is not None and not set(operations) & held_ops:
        raise ValueError(
            f"no authority would be left: the token holds only {sorted(held_ops)}, none of "
            f"{sorted(set(operations))}")
    for kind, asked in (("paths", paths), ("repos", repos)):
        if asked is None:
            continue
        for held in lists[kind]:
            if not any(globs_may_overlap(a, h, fold=False) for a in asked for h in held):
                raise ValueError(
                    f"no authority would be left: none of {asked} can meet the token's "
                    f"{kind} {held}")


def revoke(
    home: str | os.PathLike[str], block_id: str, *, reason: str = "", state: str | None = None
) -> dict[str, Any]:
    """Revoke a token or block id; every token derived from it fails from its next call.

    The revocation is announced on the change feed, so every engine on the
    store tells the connections it affects (``tools/list_changed``) within a
    second (docs/deployment.md, "The change feed").

    Args:
        home: The chit home.
        block_id: 32 hex digits: a token id or any block id.
        reason: A note kept with the revocation.
        state: A state URL (``--state``); ``None``: the home's.

    Returns:
        ``{"id", "revoked_at", "new", "known"}``: ``new`` if it was not
        revoked before; ``known`` what the store knows of the id, ``None`` if
        nothing: ``{"agent", "seen": "delegation"}`` for a sub-token the engine
        issued (or the token that issued one), ``{"agent", "seen": "calls"}``
        for a token whose chain made a call within the policy's longest token
        lifetime. chit records no minted token, so a root token that has not
        called yet is unknown; the revocation holds all the same.

    Raises:
        ValueError: If the id is not 32 lowercase hex digits.
        StoreError: If the state store fails; nothing is revoked.
    """
    now = int(time.time())
    wanted = block_id.strip().lower()
    lifetime = load_policy(home).limits.token_lifetime_seconds
    with state_store(home, state) as store:
        added = store.revoke(wanted, now=now, reason=reason)
        known = _known_id(store, wanted, since=now - lifetime)
    return {"id": wanted, "revoked_at": now, "new": added, "known": known}


def _known_id(store: Store, block_id: str, *, since: int) -> dict[str, str] | None:
    """What the store knows of ``block_id``: an issued delegation, or a caller's chain.

    Only call-log entries from ``since`` on are read (no token lives longer),
    and each is decoded as untrusted data; one that does not decode is passed over.
    """
    for delegation in store.delegations():
        if delegation.child_id == block_id:
            return {"agent": delegation.child_agent, "seen": "delegation"}
        if delegation.parent_id == block_id:
            return {"agent": delegation.parent_agent, "seen": "delegation"}
    for row in store.log_rows(since=since):
        try:
            entry = decode_entry(row.entry)
        except ValueError:
            continue
        chain = [c.hex() if isinstance(c, bytes) else str(c) for c in entry.get("chain", ())]
        if block_id in chain:
            return {"agent": str(entry.get("agent", "")), "seen": "calls"}
    return None
