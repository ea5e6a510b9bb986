"""chit tokens: macaroon-style bearer capabilities (format ``chit-token/1``).

A token is a chain of blocks. The first (root) block is minted by the engine
under a root key chosen by key id; every further block can only narrow what the
token grants. Each block is a ``chit-det/1`` CBOR map carried as an opaque byte
string, and the chain is authenticated with HMAC-SHA256 in the macaroon
construction (Birgisson et al., NDSS 2014)::

    k0  = HMAC-SHA256(root_key, "chit-token/1 hmac-sha256")
    t0  = HMAC-SHA256(k0, block_0)
    t_i = HMAC-SHA256(t_{i-1}, block_i)
    tag = t_n

The tag is checked over the blocks exactly as received, before any caveat is
read. Authority is the intersection of every block's caveats. The full byte
format, caveat semantics and verification order are in ``docs/token-format.md``.

This module is pure: bytes, keys and ``now`` in; a value or an error out. The two
types follow biscuit's split: :class:`UnverifiedToken` may be inspected but
grants nothing; only :func:`verify_at_time` produces a :class:`VerifiedToken`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import secrets
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.auth import cbor
from engine.auth._mac import TAG_BYTES, hmac_sha256, tags_equal
from engine.errors import (
    CaveatError,
    MalformedDataError,
    ProfileError,
    TokenError,
)
from engine.paths import MAX_GLOB_CHARS, in_scope, validate_glob

__all__ = [
    "ALGORITHM",
    "FORMAT_VERSION",
    "MAX_BLOCKS",
    "MAX_TOKEN_CHARS",
    "OPERATIONS",
    "TEXT_PREFIX",
    "Caveats",
    "UnverifiedToken",
    "VerifiedToken",
    "attenuate",
    "delegate",
    "grant_of_blocks",
    "mint",
    "parse",
    "verify_at_time",
]

TEXT_PREFIX = "chit_"
FORMAT_VERSION = 1
ALGORITHM = "hmac-sha256"
OPERATIONS: frozenset[str] = frozenset({"read", "write", "commit", "sub-token:issue"})
MAX_TOKEN_CHARS = 8192
MAX_BLOCKS = 16
BLOCK_ID_BYTES = 16
# 2**37 seconds is year 6325; anything later is not a real instant.
MAX_TIME = 2**37
_DOMAIN = b"chit-token/1 hmac-sha256"
_ENVELOPE_KEYS = frozenset({"v", "alg", "kid", "blocks", "tag"})
_ROOT_KEYS = frozenset({"id", "agent", "caveats"})
_ATTENUATION_KEYS = frozenset({"id", "caveats"})
_DELEGATION_KEYS = frozenset({"id", "agent", "caveats", "proof"})
_DELEGATION_DOMAIN = b"chit-token/1 delegation"
DEFAULT_DEPTH_LIMIT = 3
_CAVEAT_TYPES = frozenset({"ops", "paths", "exp", "nbf", "deleg"})
_AGENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
MAX_AGENT_CHARS = 64
MAX_GLOBS = 64

_SEAL = object()  # held only by this module: the proof a VerifiedToken was verified

KeyLookup = Callable[[str], bytes | None]
"""Maps a key id to its root key (32 bytes), or ``None`` if unknown or retired."""


def _malformed(reason: str) -> MalformedDataError:
    return MalformedDataError("token_malformed", f"token is malformed: {reason}")


def validate_agent_name(name: object, *, parent: str | None = None) -> str:
    """Check an agent name.

    A root agent's name is a *label*: 1-64 of ``a-z 0-9 - _``, starting with a
    letter or digit, never ``lock``. A delegated agent's name is its parent's name,
    a dot, and a new label (``lead.helper``), at most 64 characters in all: so a
    delegation can never name a root agent, nor another parent's child, and every
    lane ``agent/<name>`` is a safe git ref.

    Args:
        name: The untrusted name.
        parent: The delegating agent's name, for a delegated agent; ``None`` for a
            root agent.

    Returns:
        The name, unchanged.

    Raises:
        ValueError: If the name is not of that shape.
    """
    if parent is None:
        if not _is_label(name):
            raise ValueError(
                "agent names are 1-64 characters of a-z, 0-9, '-', '_', starting alnum"
            )
        return str(name)
    prefix = parent + "."
    if (
        not isinstance(name, str)
        or len(name) > MAX_AGENT_CHARS
        or not name.startswith(prefix)
        or not _is_label(name[len(prefix) :])
    ):
        raise ValueError(
            f"a delegated agent is named {parent}.<label> (label: a-z, 0-9, '-', '_'; "
            f"at most {MAX_AGENT_CHARS} characters in all)"
        )
    return name


def _is_label(name: object) -> bool:
    return (
        isinstance(name, str)
        and 1 <= len(name) <= MAX_AGENT_CHARS
        and set(name) <= _AGENT_CHARS
        and name[0].isalnum()
        and name != "lock"
    )


def is_agent_name(name: str) -> bool:
    """True iff ``name`` is a root agent name or a dotted chain of labels (a lane name)."""
    return len(name) <= MAX_AGENT_CHARS and all(_is_label(p) for p in name.split("."))


@dataclass(frozen=True)
class Caveats:
    """The caveats of one block, interpreted.

    Attributes:
        ops: Operations this block allows, or ``None`` if it states none.
        path_lists: One glob list per ``paths`` caveat in the block (empty: none
            stated). A path passes the block iff every list has a matching glob.
        expires_at: Earliest expiry stated in the block (unix seconds), or ``None``.
        not_before: Latest not-before stated in the block (unix seconds), or ``None``.
        delegable: The delegation flag as stated (``None``: not stated).
    """

    ops: frozenset[str] | None = None
    path_lists: tuple[tuple[str, ...], ...] = ()
    expires_at: int | None = None
    not_before: int | None = None
    delegable: bool | None = None


@dataclass(frozen=True)
class UnverifiedToken:
    """A token that parsed under the format but whose tag has not been checked.

    Everything here is untrusted: use it to pick the key id or to inspect a token,
    never to decide access. The tag is kept out of ``repr``.

    Attributes:
        version: Format version the token claims.
        algorithm: MAC algorithm the token claims.
        key_id: Root key id the token claims.
        blocks: The blocks' exact bytes as received.
    """

    version: int
    algorithm: str
    key_id: str
    blocks: tuple[bytes, ...]
    _tag: bytes = field(repr=False)

    def unverified_blocks(self) -> list[dict[str, Any]]:
        """Decode the blocks for inspection, without verifying anything.

        Returns:
            One dict per block: ``id`` (hex), ``agent`` (root or delegation block,
            else absent) and ``caveats`` (list of ``[type, value]``).

        Raises:
            MalformedDataError: ``token_malformed`` if a block does not decode.
        """
        out: list[dict[str, Any]] = []
        for raw in self.blocks:
            block = _decode_block(raw)
            item: dict[str, Any] = {"id": block["id"].hex(), "caveats": block["caveats"]}
            if "agent" in block:
                item["agent"] = block["agent"]
            out.append(item)
        return out


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
    chain: tuple[tuple[str, str], ...] = ()
    _seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._seal is not _SEAL:
            raise TypeError("only verify_at_time() makes a VerifiedToken")

    @property
    def depth(self) -> int:
        """Number of delegation hops (0 for a root token)."""
        return max(len(self.chain) - 1, 0)

    @property
    def lane(self) -> str:
        """The lane branch name, ``agent/<agent>``."""
        return f"agent/{self.agent}"

    def allows_path(self, path: str) -> bool:
        """Return True iff ``path`` (already validated) is inside every block's path scope."""
        if not self.path_scopes:
            return False
        return all(in_scope(path, globs) for globs in self.path_scopes)


def parse(text: object) -> UnverifiedToken:
    """Parse the text form strictly, without verifying the chain.

    Args:
        text: ``chit_`` followed by unpadded base64url (RFC 4648 §5) of the
            envelope, at most :data:`MAX_TOKEN_CHARS` characters.

    Returns:
        The :class:`UnverifiedToken`.

    Raises:
        MalformedDataError: ``token_malformed`` for a wrong prefix, bad or
            non-canonical base64url, bytes outside ``chit-det/1`` or an envelope
            of the wrong shape.
    """
    if not isinstance(text, str):
        raise _malformed("not a string")
    return _parse(text)


# Parsing is a pure function of the text and its result immutable: memoised.
@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> UnverifiedToken:
    """:func:`parse` for a ``str`` (memoised; exceptions are never cached)."""
    text = text.strip()
    if len(text) > MAX_TOKEN_CHARS:
        raise _malformed("too long")
    if not text.startswith(TEXT_PREFIX):
        raise _malformed(f"missing the {TEXT_PREFIX!r} prefix")
    body = text[len(TEXT_PREFIX) :]
    raw = _b64url_decode(body)
    try:
        envelope = cbor.decode(raw, max_size=MAX_TOKEN_CHARS)
    except ProfileError as exc:
        raise _malformed(exc.reason) from None
    if not isinstance(envelope, dict) or set(envelope) != _ENVELOPE_KEYS:
        raise _malformed("envelope must be a map of v, alg, kid, blocks, tag")
    version, algorithm, key_id = envelope["v"], envelope["alg"], envelope["kid"]
    blocks, tag = envelope["blocks"], envelope["tag"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise _malformed("v must be an integer")
    if not isinstance(algorithm, str) or not isinstance(key_id, str) or not key_id:
        raise _malformed("alg and kid must be text")
    if not isinstance(tag, bytes) or len(tag) != TAG_BYTES:
        raise _malformed("tag must be 32 bytes")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= MAX_BLOCKS:
        raise _malformed(f"blocks must be a list of 1 to {MAX_BLOCKS} byte strings")
    raw_blocks = tuple(b for b in blocks if isinstance(b, bytes))
    if len(raw_blocks) != len(blocks):
        raise _malformed("blocks must be byte strings")
    return UnverifiedToken(version, algorithm, key_id, raw_blocks, tag)


def verify_at_time(
    token: UnverifiedToken | str,
    keys: KeyLookup,
    now: int,
    *,
    is_revoked: Callable[[Iterable[str]], bool] = lambda _ids: False,
    depth_limit: int = DEFAULT_DEPTH_LIMIT,
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
    tags = _chain_tags(root_key, parsed.blocks)
    if not tags_equal(tags[-1], parsed._tag):
        raise TokenError("token_invalid_signature", "the token's signature does not verify")

    shape = _analyse(parsed.blocks)
    if len(shape.identities) > 1:
        delegation_key = hmac_sha256(root_key, _DELEGATION_DOMAIN)
    for (index, _agent), hop_allowed in zip(shape.identities[1:], shape.hops_allowed, strict=True):
        block = shape.blocks[index]
        # Only the engine holds the root key, so only it can make this proof.
        expected = hmac_sha256(delegation_key, tags[index - 1] + block.core)
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
    block_ids = shape.block_ids
    if is_revoked(block_ids):
        raise TokenError("token_revoked", "the token, or a token it derives from, was revoked")
    identity_index, agent = shape.identities[-1]
    return VerifiedToken(
        token_id=block_ids[identity_index],
        block_ids=block_ids,
        key_id=parsed.key_id,
        agent=agent,
        operations=grant.operations,
        path_scopes=grant.path_scopes,
        expires_at=grant.expires_at,
        not_before=grant.not_before,
        delegable=grant.delegable,
        chain=tuple((block_ids[i], name) for i, name in shape.identities),
        _seal=_SEAL,
    )


@dataclass(frozen=True)
class _Shape:
    """What the blocks say, decoded and interpreted (no key, no time involved)."""

    blocks: tuple[_Block, ...]
    identities: tuple[tuple[int, str], ...]
    hops_allowed: tuple[bool, ...]
    grant: _Grant
    block_ids: tuple[str, ...]


# A pure function of the received block bytes, so memoised; everything that
# needs the key, the clock or the revocation list happens in verify_at_time.
@functools.lru_cache(maxsize=1024)
def _analyse(raw_blocks: tuple[bytes, ...]) -> _Shape:
    blocks = tuple(_block(raw) for raw in raw_blocks)
    if blocks[0].keys != _ROOT_KEYS:
        raise _malformed("the root block must hold id, agent and caveats")
    for block in blocks[1:]:
        if block.keys not in (_ATTENUATION_KEYS, _DELEGATION_KEYS, _ROOT_KEYS):
            raise _malformed("a later block holds id and caveats, or id, agent, caveats, proof")
    identities: list[tuple[int, str]] = []
    for index, block in enumerate(blocks):
        if "agent" in block.keys:
            parent = identities[-1][1] if identities else None
            try:
                identities.append((index, validate_agent_name(block.agent, parent=parent)))
            except ValueError:
                raise _malformed("a block's agent name is invalid") from None
    per_block = tuple(_block_caveats(raw) for raw in raw_blocks)
    hops = []
    for index, _agent in identities[1:]:
        before = _effective(per_block[:index])
        hops.append(before.delegable and "sub-token:issue" in before.operations)
    return _Shape(
        blocks=blocks,
        identities=tuple(identities),
        hops_allowed=tuple(hops),
        grant=_effective(per_block),
        block_ids=tuple(block.id.hex() for block in blocks),
    )


@dataclass(frozen=True)
class _Grant:
    operations: frozenset[str]
    path_scopes: tuple[tuple[str, ...], ...]
    expires_at: int | None
    not_before: int | None
    delegable: bool


def _effective(per_block: Sequence[Caveats]) -> _Grant:
    return _effective_of(tuple(per_block))


@functools.lru_cache(maxsize=4096)
def _effective_of(per_block: tuple[Caveats, ...]) -> _Grant:
    """The intersection of the given blocks' caveats (root block first)."""
    stated_ops = [c.ops for c in per_block if c.ops is not None]
    expiries = [c.expires_at for c in per_block if c.expires_at is not None]
    not_befores = [c.not_before for c in per_block if c.not_before is not None]
    return _Grant(
        operations=frozenset.intersection(*stated_ops) if stated_ops else frozenset(),
        path_scopes=tuple(globs for c in per_block for globs in c.path_lists),
        expires_at=min(expiries) if expiries else None,
        not_before=max(not_befores) if not_befores else None,
        # Granted only by the root block; any later block may only drop it.
        delegable=per_block[0].delegable is True
        and all(c.delegable is not False for c in per_block[1:]),
    )


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
        "exp": int | None, "nbf": int | None, "delegable": bool}``.

    Raises:
        MalformedDataError, CaveatError: If a block does not decode.
        ValueError: If ``blocks`` is empty.
    """
    if not blocks:
        raise ValueError("no blocks")
    grant = _effective_of(tuple(_block_caveats(raw) for raw in blocks))
    return {
        "ops": grant.operations,
        "paths": grant.path_scopes,
        "exp": grant.expires_at,
        "nbf": grant.not_before,
        "delegable": grant.delegable,
    }


def mint(
    root_key: bytes,
    key_id: str,
    *,
    agent: str,
    operations: Iterable[str],
    paths: Sequence[str],
    expires_at: int,
    not_before: int | None = None,
    delegable: bool = False,
) -> str:
    """Mint a root token. Engine-only: it needs the root key.

    Args:
        root_key: The root key (32 random bytes) for ``key_id``.
        key_id: The key id recorded in the token.
        agent: Agent name (see :func:`validate_agent_name`).
        operations: Subset of :data:`OPERATIONS`.
        paths: Path globs (``engine.paths.validate_glob``).
        expires_at: Expiry, unix seconds (required).
        not_before: Optional not-before, unix seconds.
        delegable: Grant the delegation flag.

    Returns:
        The text form, ``chit_...``.

    Raises:
        ValueError: If any argument is outside its domain.
    """
    validate_agent_name(agent)
    caveats = _caveat_list(operations, paths, expires_at, not_before, delegable)
    block = {"id": secrets.token_bytes(BLOCK_ID_BYTES), "agent": agent, "caveats": caveats}
    raw = cbor.encode(block)
    return _checked_length(_emit(key_id, (raw,), _chain(root_key, (raw,))))


def attenuate(
    token: str,
    *,
    operations: Iterable[str] | None = None,
    paths: Sequence[str] | None = None,
    expires_at: int | None = None,
    not_before: int | None = None,
    drop_delegation: bool = False,
) -> str:
    """Append an attenuation block offline. Needs no key, only the token.

    The new block can only narrow: authority is the intersection of all blocks,
    so whatever is asked here, the result is never wider than ``token``.

    Args:
        token: The text form of the token to narrow.
        operations: If given, the operations the new token keeps.
        paths: If given, globs the new token is further limited to.
        expires_at: If given, an expiry (unix seconds); the earliest expiry wins.
        not_before: If given, a not-before (unix seconds); the latest wins.
        drop_delegation: Remove the delegation flag.

    Returns:
        The narrower token's text form.

    Raises:
        MalformedDataError: ``token_malformed`` if ``token`` does not parse.
        ValueError: If an argument is outside its domain or nothing is narrowed.
    """
    parsed = parse(token)
    caveats: list[list[Any]] = []
    if operations is not None:
        caveats.append(["ops", _ops_value(operations)])
    if paths is not None:
        caveats.append(["paths", _paths_value(paths)])
    if expires_at is not None:
        caveats.append(["exp", _time_value(expires_at)])
    if not_before is not None:
        caveats.append(["nbf", _time_value(not_before)])
    if drop_delegation:
        caveats.append(["deleg", False])
    if not caveats:
        raise ValueError("nothing to attenuate: give operations, paths, expiry or drop delegation")
    block = cbor.encode({"id": secrets.token_bytes(BLOCK_ID_BYTES), "caveats": caveats})
    if len(parsed.blocks) >= MAX_BLOCKS:
        raise ValueError(f"a token holds at most {MAX_BLOCKS} blocks")
    return _checked_length(
        _emit(parsed.key_id, (*parsed.blocks, block), hmac_sha256(parsed._tag, block))
    )


def delegate(
    parent: str,
    root_key: bytes,
    *,
    agent: str,
    operations: Iterable[str],
    paths: Sequence[str],
    expires_at: int,
    delegable: bool = False,
) -> tuple[str, str]:
    """Append a delegation block naming a new agent. Engine-only: needs the root key.

    The caller must already have verified ``parent`` (and checked that the
    request is contained in it); this only builds the block. The block carries
    ``proof = HMAC-SHA256(HMAC-SHA256(root_key, "chit-token/1 delegation"),
    t_prev || chit-det/1({id, agent, caveats}))`` where ``t_prev`` is the
    parent's tag, so no holder can make or alter one.

    Args:
        parent: The parent token's text form (verified by the caller).
        root_key: The root key for the parent's key id.
        agent: The child agent's name.
        operations: The child's operations.
        paths: The child's path globs.
        expires_at: The child's expiry, unix seconds.
        delegable: Whether the child may delegate further.

    Returns:
        ``(child token text, child token id)``.

    Raises:
        MalformedDataError: ``token_malformed`` if ``parent`` does not parse.
        ValueError: If an argument is outside its domain.
    """
    parsed = parse(parent)
    identities = [b for b in parsed.unverified_blocks() if "agent" in b]
    validate_agent_name(agent, parent=identities[-1]["agent"] if identities else None)
    if len(parsed.blocks) >= MAX_BLOCKS:
        raise ValueError(f"a token holds at most {MAX_BLOCKS} blocks")
    caveats: list[list[Any]] = [
        ["ops", _ops_value(operations)],
        ["paths", _paths_value(paths)],
        ["exp", _time_value(expires_at)],
        ["deleg", bool(delegable)],
    ]
    block_id = secrets.token_bytes(BLOCK_ID_BYTES)
    core = {"id": block_id, "agent": agent, "caveats": caveats}
    delegation_key = hmac_sha256(root_key, _DELEGATION_DOMAIN)
    proof = hmac_sha256(delegation_key, parsed._tag + cbor.encode(core))
    raw = cbor.encode({**core, "proof": proof})
    text = _emit(parsed.key_id, (*parsed.blocks, raw), hmac_sha256(parsed._tag, raw))
    return _checked_length(text), block_id.hex()


# --- internals ---------------------------------------------------------------


def _chain_tags(root_key: bytes, blocks: Sequence[bytes]) -> list[bytes]:
    """Return t_0 ... t_{n-1} (see the module docstring)."""
    tag = hmac_sha256(root_key, _DOMAIN)
    tags = []
    for raw in blocks:
        tag = hmac_sha256(tag, raw)
        tags.append(tag)
    return tags


def _chain(root_key: bytes, blocks: Sequence[bytes]) -> bytes:
    return _chain_tags(root_key, blocks)[-1]


def _emit(key_id: str, blocks: Sequence[bytes], tag: bytes) -> str:
    envelope = {
        "v": FORMAT_VERSION,
        "alg": ALGORITHM,
        "kid": key_id,
        "blocks": list(blocks),
        "tag": tag,
    }
    body = base64.urlsafe_b64encode(cbor.encode(envelope)).rstrip(b"=").decode("ascii")
    return TEXT_PREFIX + body


def _b64url_decode(body: str) -> bytes:
    if not body or not body.isascii():
        raise _malformed("the body must be base64url")
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise _malformed("the body must be unpadded base64url") from None
    # Refuse padding, '+' '/' and non-zero trailing bits: one token, one spelling.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != body:
        raise _malformed("the body is not canonical base64url")
    return raw


def _decode_block(raw: bytes) -> dict[str, Any]:
    try:
        block = cbor.decode(raw, max_size=MAX_TOKEN_CHARS)
    except ProfileError as exc:
        raise _malformed(f"block: {exc.reason}") from None
    if not isinstance(block, dict) or not {"id", "caveats"} <= set(block):
        raise _malformed("a block is a map with at least id and caveats")
    block_id = block["id"]
    if not isinstance(block_id, bytes) or len(block_id) != BLOCK_ID_BYTES:
        raise _malformed(f"a block id is {BLOCK_ID_BYTES} bytes")
    if not isinstance(block["caveats"], list):
        raise _malformed("caveats must be a list")
    return block


@dataclass(frozen=True)
class _Block:
    """A decoded block, immutable: what verification needs of it."""

    id: bytes
    keys: frozenset[str]
    agent: object
    proof: object
    core: bytes


# Decoding is a pure function of the block's bytes, so it is memoised; the MAC,
# the proofs, time and revocation are still checked on every verification.
@functools.lru_cache(maxsize=4096)
def _block(raw: bytes) -> _Block:
    block = _decode_block(raw)
    core = {k: v for k, v in block.items() if k != "proof"}
    return _Block(
        id=block["id"],
        keys=frozenset(block),
        agent=block.get("agent"),
        proof=block.get("proof"),
        core=cbor.encode(core) if "proof" in block else raw,
    )


@functools.lru_cache(maxsize=4096)
def _block_caveats(raw: bytes) -> Caveats:
    return _interpret_caveats(_decode_block(raw)["caveats"])


def _caveat_malformed(kind: str, reason: str) -> CaveatError:
    return CaveatError("caveat_malformed", f"caveat {kind!r} is malformed: {reason}")


def _interpret_caveats(items: list[Any]) -> Caveats:
    ops: frozenset[str] | None = None
    exp: int | None = None
    nbf: int | None = None
    deleg: bool | None = None
    path_lists: list[tuple[str, ...]] = []
    for item in items:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
            raise CaveatError("caveat_malformed", "a caveat is a [type, value] pair")
        kind, value = item
        if kind not in _CAVEAT_TYPES:
            raise CaveatError(
                "caveat_unknown", "the token carries a caveat type this engine does not know"
            )
        if kind == "ops":
            stated = _check_ops(value)
            ops = stated if ops is None else ops & stated
        elif kind == "paths":
            path_lists.append(_check_paths(value))
        elif kind == "exp":
            t = _check_time(kind, value)
            exp = t if exp is None else min(exp, t)
        elif kind == "nbf":
            t = _check_time(kind, value)
            nbf = t if nbf is None else max(nbf, t)
        else:
            if not isinstance(value, bool):
                raise _caveat_malformed(kind, "must be true or false")
            deleg = value if deleg is None else (deleg and value)
    return Caveats(ops, tuple(path_lists), exp, nbf, deleg)


def _check_ops(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _caveat_malformed("ops", "must be a list of operation names")
    if len(set(value)) != len(value) or not set(value) <= OPERATIONS:
        raise _caveat_malformed("ops", f"operations are distinct names from {sorted(OPERATIONS)}")
    return frozenset(value)


def _check_paths(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_GLOBS:
        raise _caveat_malformed("paths", f"must be a list of at most {MAX_GLOBS} globs")
    if not all(isinstance(v, str) and len(v) <= MAX_GLOB_CHARS for v in value):
        raise _caveat_malformed("paths", f"globs are text of at most {MAX_GLOB_CHARS} characters")
    try:
        return tuple(validate_glob(v) for v in value)
    except ValueError:
        raise _caveat_malformed("paths", "a glob is invalid") from None


def _check_time(kind: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < MAX_TIME:
        raise _caveat_malformed(kind, "must be an integer number of seconds since the epoch")
    return value


def _ops_value(operations: Iterable[str]) -> list[str]:
    ops = sorted(set(operations))
    if not set(ops) <= OPERATIONS:
        raise ValueError(f"operations must be among {sorted(OPERATIONS)}")
    return ops


def _paths_value(paths: Sequence[str]) -> list[str]:
    if isinstance(paths, str):
        raise ValueError("paths must be a list of globs, not one string")
    if not 1 <= len(paths) <= MAX_GLOBS:
        raise ValueError(f"give 1 to {MAX_GLOBS} path globs")
    for glob in paths:
        if not isinstance(glob, str) or len(glob) > MAX_GLOB_CHARS:
            raise ValueError(f"globs are text of at most {MAX_GLOB_CHARS} characters")
        if not unicodedata.is_normalized("NFC", glob):
            raise ValueError("globs must be NFC-normalised text")
    return [validate_glob(p) for p in paths]


def _checked_length(text: str) -> str:
    if len(text) > MAX_TOKEN_CHARS:
        raise ValueError(f"the token would exceed {MAX_TOKEN_CHARS} characters")
    return text


def _time_value(t: int) -> int:
    if isinstance(t, bool) or not isinstance(t, int) or not 0 < t < MAX_TIME:
        raise ValueError("times are positive integer unix seconds")
    return t


def _caveat_list(
    operations: Iterable[str],
    paths: Sequence[str],
    expires_at: int,
    not_before: int | None,
    delegable: bool,
) -> list[list[Any]]:
    caveats: list[list[Any]] = [
        ["ops", _ops_value(operations)],
        ["paths", _paths_value(paths)],
        ["exp", _time_value(expires_at)],
    ]
    if not_before is not None:
        caveats.append(["nbf", _time_value(not_before)])
    if delegable:
        caveats.append(["deleg", True])
    return caveats


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
    }
