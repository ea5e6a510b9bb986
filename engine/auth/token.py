"""chit tokens (``chit-token/1``): the text form, parsing, minting, attenuation, delegation.

:func:`parse` gives an :class:`UnverifiedToken`, which may be inspected but
grants nothing (:func:`engine.auth.verify.verify_at_time` checks it); :func:`mint`,
:func:`attenuate` and :func:`delegate` make tokens, chained with the MACs of
engine/auth/_mac.py. Pure: bytes and keys in, a value or an error out. The
format: docs/token-format.md.
"""

from __future__ import annotations

import base64
import binascii
import functools
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.auth import cbor
from engine.auth._mac import TAG_BYTES, chain_tags, delegation_key, hmac_sha256, tags_equal
from engine.auth.agents import validate_agent_name
from engine.auth.caveats import encode_ops, encode_paths, encode_repos, encode_time, root_caveats
from engine.errors import MalformedDataError, ProfileError
from engine.limits import LIMITS

__all__ = [
    "ALGORITHM",
    "BLOCK_ID_BYTES",
    "FORMAT_VERSION",
    "TEXT_PREFIX",
    "UnverifiedToken",
    "attenuate",
    "decode_block",
    "delegate",
    "malformed",
    "mint",
    "parse",
]

TEXT_PREFIX = "chit_"
FORMAT_VERSION = 1
ALGORITHM = "hmac-sha256"
BLOCK_ID_BYTES = 16
_ENVELOPE_KEYS = frozenset({"v", "alg", "kid", "blocks", "tag"})


def malformed(reason: str) -> MalformedDataError:
    """The ``token_malformed`` error, saying ``reason``."""
    return MalformedDataError("token_malformed", f"token is malformed: {reason}")


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

    def tag_matches(self, expected: bytes) -> bool:
        """Whether the token's tag is ``expected`` (32 bytes), compared in constant time."""
        return tags_equal(expected, self._tag)

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
            block = decode_block(raw)
            item: dict[str, Any] = {"id": block["id"].hex(), "caveats": block["caveats"]}
            if "agent" in block:
                item["agent"] = block["agent"]
            out.append(item)
        return out


def parse(text: object) -> UnverifiedToken:
    """Parse the text form strictly, without verifying the chain.

    Args:
        text: ``chit_`` followed by unpadded base64url (RFC 4648 §5) of the
            envelope, at most ``LIMITS.token_chars`` characters.

    Returns:
        The :class:`UnverifiedToken`.

    Raises:
        MalformedDataError: ``token_malformed`` for a wrong prefix, bad or
            non-canonical base64url, bytes outside ``chit-det/1`` or an envelope
            of the wrong shape.
    """
    if not isinstance(text, str):
        raise malformed("not a string")
    return _parse(text)


# Parsing is a pure function of the text and its result immutable: memoised.
@functools.lru_cache(maxsize=LIMITS.token_parse_cache_entries)
def _parse(text: str) -> UnverifiedToken:
    """:func:`parse` for a ``str`` (memoised; exceptions are never cached)."""
    text = text.strip()
    if len(text) > LIMITS.token_chars:
        raise malformed("too long")
    if not text.startswith(TEXT_PREFIX):
        raise malformed(f"missing the {TEXT_PREFIX!r} prefix")
    body = text[len(TEXT_PREFIX) :]
    raw = _b64url_decode(body)
    try:
        envelope = cbor.decode(raw, max_size=LIMITS.token_chars)
    except ProfileError as exc:
        raise malformed(exc.reason) from None
    if not isinstance(envelope, dict) or set(envelope) != _ENVELOPE_KEYS:
        raise malformed("envelope must be a map of v, alg, kid, blocks, tag")
    version, algorithm, key_id = envelope["v"], envelope["alg"], envelope["kid"]
    blocks, tag = envelope["blocks"], envelope["tag"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise malformed("v must be an integer")
    if not isinstance(algorithm, str) or not isinstance(key_id, str) or not key_id:
        raise malformed("alg and kid must be text")
    if not isinstance(tag, bytes) or len(tag) != TAG_BYTES:
        raise malformed("tag must be 32 bytes")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= LIMITS.token_blocks:
        raise malformed(f"blocks must be a list of 1 to {LIMITS.token_blocks} byte strings")
    raw_blocks = tuple(b for b in blocks if isinstance(b, bytes))
    if len(raw_blocks) != len(blocks):
        raise malformed("blocks must be byte strings")
    return UnverifiedToken(version, algorithm, key_id, raw_blocks, tag)


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
    repos: Sequence[str] | None = None,
) -> str:
    """Mint a root token. Engine-only: it needs the root key.

    Args:
        root_key: The root key (32 random bytes) for ``key_id``.
        key_id: The key id recorded in the token.
        agent: Agent name (see :func:`engine.auth.agents.validate_agent_name`).
        operations: Subset of :data:`engine.auth.caveats.OPERATIONS`.
        paths: Path globs (``engine.paths.validate_glob``).
        expires_at: Expiry, unix seconds (required).
        not_before: Optional not-before, unix seconds.
        delegable: Grant the delegation flag.
        repos: Repository globs (:mod:`engine.auth.reponames`); ``None``: no
            ``repos`` caveat, a token good only where the engine serves exactly
            one repository.

    Returns:
        The text form, ``chit_...``.

    Raises:
        ValueError: If any argument is outside its domain.
    """
    validate_agent_name(agent)
    caveats = root_caveats(operations, paths, expires_at, not_before, delegable, repos)
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
    repos: Sequence[str] | None = None,
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
        repos: If given, repository globs the new token is further limited to
            (a token minted without ``repos`` stays good only where the engine
            serves exactly one repository: this cannot lift that).

    Returns:
        The narrower token's text form.

    Raises:
        MalformedDataError: ``token_malformed`` if ``token`` does not parse.
        ValueError: If an argument is outside its domain or nothing is narrowed.
    """
    parsed = parse(token)
    caveats: list[list[Any]] = []
    if operations is not None:
        caveats.append(["ops", encode_ops(operations)])
    if paths is not None:
        caveats.append(["paths", encode_paths(paths)])
    if repos is not None:
        caveats.append(["repos", encode_repos(repos)])
    if expires_at is not None:
        caveats.append(["exp", encode_time(expires_at)])
    if not_before is not None:
        caveats.append(["nbf", encode_time(not_before)])
    if drop_delegation:
        caveats.append(["deleg", False])
    if not caveats:
        raise ValueError(
            "nothing to attenuate: give operations, paths, repositories, expiry or drop delegation"
        )
    block = cbor.encode({"id": secrets.token_bytes(BLOCK_ID_BYTES), "caveats": caveats})
    if len(parsed.blocks) >= LIMITS.token_blocks:
        raise ValueError(f"a token holds at most {LIMITS.token_blocks} blocks")
    return _checked_length(
        _emit(parsed.key_id, (*parsed.blocks, block), hmac_sha256(parsed._tag, block))
    )


def delegate(
    parent: UnverifiedToken,
    root_key: bytes,
    *,
    agent: str,
    operations: Iterable[str],
    paths: Sequence[str],
    expires_at: int,
    delegable: bool = False,
    repos: Sequence[str] | None = None,
) -> tuple[str, str]:
    """Append a delegation block naming a new agent. Engine-only: needs the root key.

    The caller must already have verified ``parent`` (and checked that the
    request is contained in it): it passes the parsed form its
    ``VerifiedToken`` holds (``VerifiedToken.parsed``), so the block is chained
    onto exactly the bytes that verified. This only builds the block. The block carries
    ``proof = HMAC-SHA256(HMAC-SHA256(root_key, "chit-token/1 delegation"),
    t_prev || chit-det/1({id, agent, caveats}))`` where ``t_prev`` is the
    parent's tag, so no holder can make or alter one.

    Args:
        parent: The parent token's parsed form, as verified by the caller.
        root_key: The root key for the parent's key id.
        agent: The child agent's name.
        operations: The child's operations.
        paths: The child's path globs.
        expires_at: The child's expiry, unix seconds.
        delegable: Whether the child may delegate further.
        repos: The child's repository globs, or ``None`` (no ``repos`` caveat
            in the block: the child keeps the parent's repositories).

    Returns:
        ``(child token text, child token id)``.

    Raises:
        MalformedDataError: ``token_malformed`` if a block of ``parent`` does
            not decode.
        ValueError: If an argument is outside its domain.
    """
    identities = [b for b in parent.unverified_blocks() if "agent" in b]
    validate_agent_name(agent, parent=identities[-1]["agent"] if identities else None)
    if len(parent.blocks) >= LIMITS.token_blocks:
        raise ValueError(f"a token holds at most {LIMITS.token_blocks} blocks")
    caveats: list[list[Any]] = [
        ["ops", encode_ops(operations)],
        ["paths", encode_paths(paths)],
        *([["repos", encode_repos(repos)]] if repos is not None else []),
        ["exp", encode_time(expires_at)],
        ["deleg", bool(delegable)],
    ]
    block_id = secrets.token_bytes(BLOCK_ID_BYTES)
    core = {"id": block_id, "agent": agent, "caveats": caveats}
    proof = hmac_sha256(delegation_key(root_key), parent._tag + cbor.encode(core))
    raw = cbor.encode({**core, "proof": proof})
    text = _emit(parent.key_id, (*parent.blocks, raw), hmac_sha256(parent._tag, raw))
    return _checked_length(text), block_id.hex()


def decode_block(raw: bytes) -> dict[str, Any]:
    """Decode one block's bytes under ``chit-det/1`` and check its envelope shape.

    Args:
        raw: The block's bytes as received (untrusted).

    Returns:
        The block map: at least ``id`` (:data:`BLOCK_ID_BYTES` bytes) and
        ``caveats`` (a list); its other keys are the caller's to check.

    Raises:
        MalformedDataError: ``token_malformed`` if it is not such a block.
    """
    try:
        block = cbor.decode(raw, max_size=LIMITS.token_chars)
    except ProfileError as exc:
        raise malformed(f"block: {exc.reason}") from None
    if not isinstance(block, dict) or not {"id", "caveats"} <= set(block):
        raise malformed("a block is a map with at least id and caveats")
    block_id = block["id"]
    if not isinstance(block_id, bytes) or len(block_id) != BLOCK_ID_BYTES:
        raise malformed(f"a block id is {BLOCK_ID_BYTES} bytes")
    if not isinstance(block["caveats"], list):
        raise malformed("caveats must be a list")
    return block


# --- internals ---------------------------------------------------------------


def _chain(root_key: bytes, blocks: Sequence[bytes]) -> bytes:
    return chain_tags(root_key, blocks)[-1]


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


# bytes.translate tables between the base64url and the standard alphabet.
_URL_TO_STD = bytes.maketrans(b"-_", b"+/")
_STD_TO_URL = bytes.maketrans(b"+/", b"-_")


def _b64url_decode(body: str) -> bytes:
    if not body or not body.isascii():
        raise malformed("the body must be base64url")
    # Fast path: a body that is exactly the canonical unpadded base64url of
    # what it decodes to is what the checks below accept, with the same bytes;
    # anything else goes through them for its refusal.
    data = body.encode("ascii")
    try:
        raw = binascii.a2b_base64(data.translate(_URL_TO_STD) + b"=" * (-len(data) % 4))
    except binascii.Error:
        pass
    else:
        if binascii.b2a_base64(raw, newline=False).translate(_STD_TO_URL).rstrip(b"=") == data:
            return raw
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise malformed("the body must be unpadded base64url") from None
    # Refuse padding, '+' '/' and non-zero trailing bits: one token, one spelling.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != body:
        raise malformed("the body is not canonical base64url")
    return raw


def _checked_length(text: str) -> str:
    if len(text) > LIMITS.token_chars:
        raise ValueError(f"the token would exceed {LIMITS.token_chars} characters")
    return text
