"""Token verification: what a ``chit-token/1`` token grants at a given time.

:func:`verify_at_time` checks a parsed token in the order docs/token-format.md
(*Verification, in order*) gives and returns a :class:`VerifiedToken`, the only
way to make one (biscuit's split: an :class:`~engine.auth.token.UnverifiedToken`
grants nothing). Pure: bytes, keys and ``now`` in; a value or an error out
(engine/auth/clock.py supplies the clock).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from engine.auth import cbor
from engine.auth._mac import chain_tags, delegation_key, hmac_sha256, tags_equal
from engine.auth.agents import validate_agent_name
from engine.auth.caveats import Caveats, Grant, interpret, intersect
from engine.auth.reponames import repo_in_scopes
from engine.auth.token import (
    ALGORITHM,
    FORMAT_VERSION,
    UnverifiedToken,
    decode_block,
    malformed,
    parse,
)
from engine.errors import TokenError
from engine.limits import LIMITS
from engine.paths import in_scope

__all__ = [
    "KeyLookup",
    "VerifiedToken",
    "describe",
    "grant_of_blocks",
    "verify_at_time",
]

_ROOT_KEYS = frozenset({"id", "agent", "caveats"})
_ATTENUATION_KEYS = frozenset({"id", "caveats"})
_DELEGATION_KEYS = frozenset({"id", "agent", "caveats", "proof"})

_SEAL = object()  # held only by this module: the proof a VerifiedToken was verified

KeyLookup = Callable[[str], bytes | None]
"""Maps a key id to its root key (32 bytes), or ``None`` if unknown or retired."""


@dataclass(frozen=True)
class VerifiedToken:
    """A token whose chain verified at a given time. Only :func:`verify_at_time` makes one.

    Attributes:
        token_id: Hex id of the token's identity block: the root block, or the
            last delegation block. Revoking it kills the token and every token
            derived from it.
        block_ids: Hex ids of every block, root first.
        key_id: The root key id that verified it.
        agent: The agent the token names; its lane is ``agent/<agent>``.
        operations: Intersection of every block's operations.
        path_scopes: One glob list per block that states paths; a path is in
            scope iff every list has a glob matching it.
        expires_at: Effective expiry, unix seconds.
        not_before: Effective not-before, unix seconds, or ``None``.
        delegable: The delegation flag after every block.
        chain: ``(block id, agent)`` of the root and of every delegation block,
            root first; the last names the token's agent.
        parsed: The parsed form it was verified from: the blocks' exact bytes
            and the tag that verified, for what the engine builds on it
            (a delegation, a provenance record) without parsing text again.
        repo_scopes: One glob list per block's ``repos`` caveat, root first.
        single_repo_only: The root block names no repository: the token is
            good only on an engine serving exactly one (see :meth:`allows_repo`).
    """

    token_id: str
    block_ids: tuple[str, ...]
    key_id: str
    agent: str
    operations: frozenset[str]
    path_scopes: tuple[tuple[str, ...], ...]
    expires_at: int
    not_before: int | None
    delegable: bool
    parsed: UnverifiedToken = field(repr=False, compare=False)
    chain: tuple[tuple[str, str], ...] = ()
    repo_scopes: tuple[tuple[str, ...], ...] = ()
    single_repo_only: bool = True
    _seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._seal is not _SEAL:
            raise TypeError("only verify_at_time() makes a VerifiedToken")

    @classmethod
    def _of(cls, shape: _Shape, parsed: UnverifiedToken) -> VerifiedToken:
        """The token :func:`verify_at_time` returns once every check has passed.

        The same object the generated ``__init__`` would make from these values,
        built by filling its ``__dict__`` at once (the frozen ``__init__`` sets
        each of its fourteen fields through ``object.__setattr__``, which cost as
        much as the rest of a verification without its MACs).
        """
        token = object.__new__(cls)
        token.__dict__.update(shape.verified, key_id=parsed.key_id, parsed=parsed, _seal=_SEAL)
        return token

    @property
    def depth(self) -> int:
        """Number of delegation hops (0 for a root token)."""
        return max(len(self.chain) - 1, 0)

    @property
    def blocks(self) -> tuple[bytes, ...]:
        """The blocks' exact bytes as verified, root first."""
        return self.parsed.blocks

    @property
    def lane(self) -> str:
        """The lane branch name, ``agent/<agent>``."""
        return f"agent/{self.agent}"

    def allows_repo(self, name: str, *, only_repo: bool) -> bool:
        """Whether the token is good for the repository ``name`` (docs/token-format.md).

        Args:
            name: The repository's name.
            only_repo: The engine serves exactly one repository, and it is ``name``.

        Returns:
            True iff ``name`` matches some glob of every ``repos`` caveat and,
            for a token whose root block names no repository, ``only_repo``.
        """
        if self.single_repo_only and not only_repo:
            return False
        return repo_in_scopes(name, self.repo_scopes)

    def allows_path(self, path: str) -> bool:
        """Return True iff ``path`` (already validated) is inside every block's path scope."""
        if not self.path_scopes:
            return False
        return _in_every_scope(self.path_scopes, path)


def verify_at_time(
    token: UnverifiedToken | str,
    keys: KeyLookup,
    now: int,
    *,
    is_revoked: Callable[[Iterable[str]], bool] = lambda _ids: False,
    depth_limit: int = LIMITS.delegation_depth_blocks,
    version: int = FORMAT_VERSION,
    algorithm: str = ALGORITHM,
) -> VerifiedToken:
    """Verify a token at time ``now`` and return what it grants.

    Order (docs/token-format.md, "Verification"): parse; version and algorithm
    against the engine's configuration (never the token's claim); key id; the
    chained tag over the received block bytes (constant-time); block decoding
    and shapes; caveats (unknown types fail closed); each delegation block's
    engine proof and the delegating hop's flag and ``sub-token:issue``; depth;
    expiry and not-before; revocation of any block id.

    Args:
        token: The text form or an already parsed token.
        keys: Key id to root key lookup (retired keys return ``None``).
        now: Current time, unix seconds.
        is_revoked: Returns True if any of the given hex block ids is revoked.
        depth_limit: Most delegation blocks accepted below the root block.
        version: The format version the engine is configured for.
        algorithm: The MAC algorithm the engine is configured for.

    Returns:
        The :class:`VerifiedToken`.

    Raises:
        MalformedDataError: ``token_malformed``.
        TokenError: ``token_unsupported_version``, ``token_unknown_key``,
            ``token_invalid_signature`` (one opaque error for every forgery),
            ``token_expiry_required``, ``token_expired``,
            ``token_not_yet_valid``, ``token_revoked``,
            ``delegation_not_permitted`` (a delegation block the engine did not
            make, or made from a hop without the flag and ``sub-token:issue``),
            ``delegation_depth_exceeded``.
        CaveatError: ``caveat_unknown`` or ``caveat_malformed``.
    """
    parsed = parse(token) if isinstance(token, str) else token
    if parsed.version != version or parsed.algorithm != algorithm:
        raise TokenError(
            "token_unsupported_version",
            f"this engine accepts chit-token/{version} with {algorithm} only",
        )
    root_key = keys(parsed.key_id)
    if root_key is None:
        raise TokenError("token_unknown_key", "the token's key id is not known to this engine")
    tags = chain_tags(root_key, parsed.blocks)
    if not parsed.tag_matches(tags[-1]):
        raise TokenError("token_invalid_signature", "the token's signature does not verify")

    shape = _analyse(parsed.blocks)
    if len(shape.identities) > 1:
        kd = delegation_key(root_key)
    for (index, _agent), hop_allowed in zip(shape.identities[1:], shape.hops_allowed, strict=True):
        block = shape.blocks[index]
        # Only the engine holds the root key, so only it can make this proof.
        expected = hmac_sha256(kd, tags[index - 1] + block.core)
        if not isinstance(block.proof, bytes) or not tags_equal(expected, block.proof):
            raise TokenError(
                "delegation_not_permitted",
                "a delegation block can only be issued by the engine (issue_sub_token)",
            )
        if not hop_allowed:
            raise TokenError(
                "delegation_not_permitted",
                "a hop delegated without the delegation flag and sub-token:issue",
            )
    depth = len(shape.identities) - 1
    if depth > depth_limit:
        raise TokenError(
            "delegation_depth_exceeded",
            f"the token is {depth} delegations deep; the limit is {depth_limit}",
        )

    grant = shape.grant
    if grant.expires_at is None:
        raise TokenError("token_expiry_required", "the token has no expiry caveat")
    if now >= grant.expires_at:
        raise TokenError("token_expired", "the token has expired", expired_at=grant.expires_at)
    if grant.not_before is not None and now < grant.not_before:
        raise TokenError(
            "token_not_yet_valid", "the token is not valid yet", not_before=grant.not_before
        )
    if is_revoked(shape.block_ids):
        raise TokenError("token_revoked", "the token, or a token it derives from, was revoked")
    return VerifiedToken._of(shape, parsed)


def grant_of_blocks(blocks: Sequence[bytes]) -> dict[str, Any]:
    """The authority granted by a token's first blocks, caveats intersected.

    For provenance: the scope a delegation hop held is the grant of every block
    before the next hop's. Decodes only; verifying the blocks' MAC and proofs is
    the caller's business (pass blocks of a token that :func:`verify_at_time`
    accepted).

    Args:
        blocks: Block bytes, root block first (at least one).

    Returns:
        ``{"ops": frozenset[str], "paths": tuple[tuple[str, ...], ...],
        "exp": int | None, "nbf": int | None, "delegable": bool,
        "repos": tuple[tuple[str, ...], ...]}``.

    Raises:
        MalformedDataError, CaveatError: If a block does not decode.
        ValueError: If ``blocks`` is empty.
    """
    if not blocks:
        raise ValueError("no blocks")
    grant = intersect(tuple(_block_caveats(raw) for raw in blocks))
    return {
        "ops": grant.operations,
        "paths": grant.path_scopes,
        "exp": grant.expires_at,
        "nbf": grant.not_before,
        "delegable": grant.delegable,
        "repos": grant.repo_scopes,
    }


def describe(token: VerifiedToken) -> Mapping[str, Any]:
    """Return the caller-safe description of a verified token (never its tag)."""
    return {
        "token_id": token.token_id,
        "agent": token.agent,
        "lane": token.lane,
        "operations": sorted(token.operations),
        "path_scopes": [list(g) for g in token.path_scopes],
        "expires_at": token.expires_at,
        "not_before": token.not_before,
        "delegable": token.delegable,
        "repo_scopes": [list(g) for g in token.repo_scopes],
        "single_repo_only": token.single_repo_only,
    }


# --- internals ---------------------------------------------------------------


class _Shape(NamedTuple):
    """What the blocks say, decoded and interpreted (no key, no time involved)."""

    blocks: tuple[_Block, ...]
    identities: tuple[tuple[int, str], ...]
    hops_allowed: tuple[bool, ...]
    grant: Grant
    block_ids: tuple[str, ...]
    verified: Mapping[str, object]
    """The fields of a :class:`VerifiedToken` that the blocks decide: all but
    ``key_id``, ``parsed`` and ``_seal``."""


# A pure function of the received block bytes, so memoised; everything that
# needs the key, the clock or the revocation list happens in verify_at_time.
@functools.lru_cache(maxsize=LIMITS.token_shape_cache_entries)
def _analyse(raw_blocks: tuple[bytes, ...]) -> _Shape:
    blocks = tuple(_block(raw) for raw in raw_blocks)
    if blocks[0].keys != _ROOT_KEYS:
        raise malformed("the root block must hold id, agent and caveats")
    for block in blocks[1:]:
        if block.keys not in (_ATTENUATION_KEYS, _DELEGATION_KEYS, _ROOT_KEYS):
            raise malformed("a later block holds id and caveats, or id, agent, caveats, proof")
    identities: list[tuple[int, str]] = []
    for index, block in enumerate(blocks):
        if "agent" in block.keys:
            parent = identities[-1][1] if identities else None
            try:
                identities.append((index, validate_agent_name(block.agent, parent=parent)))
            except ValueError:
                raise malformed("a block's agent name is invalid") from None
    per_block = tuple(_block_caveats(raw) for raw in raw_blocks)
    hops = []
    for index, _agent in identities[1:]:
        before = intersect(per_block[:index])
        hops.append(before.delegable and "sub-token:issue" in before.operations)
    block_ids = tuple(block.id.hex() for block in blocks)
    grant = intersect(per_block)
    identity_index, agent = identities[-1]
    verified = {
        "token_id": block_ids[identity_index],
        "block_ids": block_ids,
        "agent": agent,
        "operations": grant.operations,
        "path_scopes": grant.path_scopes,
        "expires_at": grant.expires_at,
        "not_before": grant.not_before,
        "delegable": grant.delegable,
        "chain": tuple((block_ids[i], name) for i, name in identities),
        "repo_scopes": grant.repo_scopes,
        "single_repo_only": grant.single_repo_only,
    }
    return _Shape(
        blocks=blocks,
        identities=tuple(identities),
        hops_allowed=tuple(hops),
        grant=grant,
        block_ids=block_ids,
        verified=MappingProxyType(verified),
    )


# Whether a path is in every scope is a pure function of the scopes (the
# token's globs) and the path, so it is memoised; which token may ask is decided
# by verify_at_time on every call.
@functools.lru_cache(maxsize=LIMITS.scope_match_cache_entries)
def _in_every_scope(path_scopes: tuple[tuple[str, ...], ...], path: str) -> bool:
    return all(in_scope(path, globs) for globs in path_scopes)


class _Block(NamedTuple):
    """A decoded block: what verification needs of it (never mutated).

    ``caveats`` is the decoded caveat list as :func:`decode_block` gave it, kept
    so that :func:`_block_caveats` interprets it without decoding the bytes again.
    A named tuple, not a frozen dataclass: one is made per block of every
    never-seen token, and the dataclass's field-by-field ``__init__`` cost more
    than the block's other work besides decoding.
    """

    id: bytes
    keys: frozenset[str]
    agent: object
    proof: object
    core: bytes
    caveats: list[Any]


# Decoding is a pure function of the block's bytes, so it is memoised; the MAC,
# the proofs, time and revocation are still checked on every verification.
@functools.lru_cache(maxsize=LIMITS.token_block_cache_entries)
def _block(raw: bytes) -> _Block:
    block = decode_block(raw)
    if "proof" in block:
        core = cbor.encode({k: v for k, v in block.items() if k != "proof"})
    else:
        core = raw
    return _Block(
        block["id"],
        frozenset(block),
        block.get("agent"),
        block.get("proof"),
        core,
        block["caveats"],
    )


# The block is decoded once (by _block) whether its shape or its caveats are
# asked for first; interpreting them is memoised separately.
@functools.lru_cache(maxsize=LIMITS.token_block_cache_entries)
def _block_caveats(raw: bytes) -> Caveats:
    return interpret(_block(raw).caveats)
