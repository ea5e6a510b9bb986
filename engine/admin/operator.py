"""Operator functions behind the CLI: set up a home, mint and inspect tokens.

The CLI never handles keys itself; it calls these. In the embedded deployment
they share the CLI's process; ``docs/threat-model.md`` says what that means.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import policy
from engine.auth import token as tokens
from engine.auth.rootkeys import Keyring, create_keyring
from engine.auth.rootkeys import retire_key as _retire_key
from engine.auth.rootkeys import rotate_key as _rotate_key
from engine.auth.sealkeys import create_sealing_key, sealing_keys
from engine.auth.sealkeys import rotate_sealing_key as rotate_sealing_key_
from engine.auth.signkeys import create_signing_key, export_public_keys, signing_keys
from engine.auth.signkeys import rotate_signing_key as rotate_signing_key_
from engine.errors import ChitError, ConfigurationError
from engine.paths import validate_path
from engine.service.policyfile import load_policy
from engine.state.sqlite import open_store

__all__ = [
    "attenuate_token",
    "export_public",
    "init_home",
    "inspect_token",
    "list_keys",
    "mint_token",
    "parse_duration",
    "resolve_home",
    "retire_key",
    "revoke",
    "rotate_key",
    "rotate_sealing_key",
    "rotate_signing_key",
]

_DURATION = re.compile(r"^([0-9]{1,9})([smhd]?)$", re.ASCII)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    """Return ``home``, else ``$CHIT_HOME``, else ``~/.chit`` (docs/architecture.md)."""
    if home:
        return Path(home)
    env = os.environ.get("CHIT_HOME")
    return Path(env) if env else Path.home() / ".chit"


def init_home(home: str | os.PathLike[str]) -> dict[str, Any]:
    """Create the keyring (root, signing and sealing keys, 0700/0600) and the default policy.

    Keeps whatever exists, and adds only what is missing (an older home gets
    its Ed25519 signing key and its sealing key this way).

    Args:
        home: The chit home directory.

    Returns:
        ``{"home", "key_id", "signing_key_id", "sealing_key_id", "policy",
        "created_policy"}``.

    Raises:
        ConfigurationError: If an existing keyring or policy is unusable.
    """
    key = create_keyring(home)
    signing = create_signing_key(home)
    sealing = create_sealing_key(home)
    policy_path = Path(home) / "policy.toml"
    created = False
    if not policy_path.exists():
        fd = os.open(policy_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(policy.DEFAULT_POLICY_TOML)
        created = True
    load_policy(home)
    return {
        "home": str(home),
        "key_id": key.key_id,
        "signing_key_id": signing.key_id,
        "sealing_key_id": sealing.key_id,
        "policy": str(policy_path),
        "created_policy": created,
    }


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
        token's id: its last identity block), "agent", "chain", "blocks":
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
        "blocks": blocks,
    }


def ensure_home(home: Path) -> None:
    """Raise :class:`ConfigurationError` unless ``home`` holds a keyring."""
    if not (home / "keys" / "root").is_dir():
        raise ConfigurationError(f"no chit home at {home}; run `chit init --home {home}`")


def attenuate_token(
    text: str,
    *,
    operations: list[str] | None = None,
    paths: list[str] | None = None,
    ttl_seconds: int | None = None,
    drop_delegation: bool = False,
    now: int | None = None,
) -> dict[str, Any]:
    """Narrow a token offline (no key, no engine): see :func:`engine.token.attenuate`.

    Args:
        text: The token to narrow.
        operations: Operations to keep.
        paths: Globs to limit to.
        ttl_seconds: Expire this many seconds from ``now`` (never later than the parent).
        drop_delegation: Remove the delegation flag.
        now: Unix seconds (default: the clock).

    Returns:
        ``{"token", "id" (the token's unchanged id), "blocks"}``.

    Raises:
        MalformedDataError: ``token_malformed`` if the token does not parse.
        ValueError: If nothing is narrowed or an argument is invalid.
    """
    issued = int(time.time()) if now is None else now
    narrowed = tokens.attenuate(
        text,
        operations=operations,
        paths=paths,
        expires_at=None if ttl_seconds is None else issued + ttl_seconds,
        drop_delegation=drop_delegation,
    )
    info = inspect_token(narrowed)
    return {"token": narrowed, "id": info["id"], "blocks": len(info["blocks"])}


def revoke(home: str | os.PathLike[str], block_id: str, *, reason: str = "") -> dict[str, Any]:
    """Revoke a token or block id; every token derived from it fails from its next call.

    Raises:
        ValueError: If the id is not 32 lowercase hex digits.
    """
    now = int(time.time())
    added = open_store(home).revoke(block_id.strip().lower(), now=now, reason=reason)
    return {"id": block_id.strip().lower(), "revoked_at": now, "new": added}


def list_keys(home: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The keyring's keys, newest first: root, then provenance signing, then sealing keys.

    Returns:
        ``[{"kid", "kind": "root"|"signing"|"sealing", "created", "status",
        "signing"}]`` where ``signing`` marks the root key that mints, the
        Ed25519 key that signs provenance and the sealing key that seals new
        protected content; never a secret.
    """
    ring = Keyring(home)
    signer = ring.signing_key().key_id
    rows = [
        {"kid": k.key_id, "kind": "root", "created": k.created, "status": k.status,
         "signing": k.key_id == signer}
        for k in ring.keys()
    ]
    found = signing_keys(home) if (Path(home) / "keys" / "signing").is_dir() else []
    active = [k.key_id for k in found if k.status == "active"][:1]
    rows += [
        {"kid": k.key_id, "kind": "signing", "created": k.created, "status": k.status,
         "signing": k.key_id in active}
        for k in found
    ]
    sealed = sealing_keys(home) if (Path(home) / "keys" / "sealing").is_dir() else []
    sealer = [k.key_id for k in sealed if k.status == "active"][:1]
    rows += [
        {"kid": k.key_id, "kind": "sealing", "created": k.created, "status": k.status,
         "signing": k.key_id in sealer}
        for k in sealed
    ]
    return rows


def rotate_signing_key(home: str | os.PathLike[str]) -> dict[str, Any]:
    """Add a new provenance signing key; older ones retire but stay exported."""
    key = rotate_signing_key_(home)
    return {"kid": key.key_id, "kind": "signing", "created": key.created,
            "status": key.status, "signing": True}


def rotate_sealing_key(home: str | os.PathLike[str]) -> dict[str, Any]:
    """Add a new sealing key: it seals from now on; older keys keep opening (never exported)."""
    key = rotate_sealing_key_(home)
    return {"kid": key.key_id, "kind": "sealing", "created": key.created,
            "status": key.status, "signing": True}


def export_public(home: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``chit-engine-keys/1`` document an auditor verifies provenance with."""
    return dict(export_public_keys(home))


def rotate_key(home: str | os.PathLike[str]) -> dict[str, Any]:
    """Add a new signing key (older keys keep verifying)."""
    key = _rotate_key(home)
    return {"kid": key.key_id, "kind": "root", "created": key.created, "status": key.status,
            "signing": True}


def retire_key(home: str | os.PathLike[str], key_id: str) -> dict[str, Any]:
    """Retire a key; its tokens fail with ``token_unknown_key`` from their next call."""
    key = _retire_key(home, key_id)
    return {"kid": key.key_id, "kind": "root", "created": key.created, "status": key.status,
            "signing": False}
