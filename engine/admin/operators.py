"""``chit operators add|list|remove``: the people who may approve calls (docs/approvals.md).

An operator is a name, groups and an Ed25519 public key registered in the
state store; the private key is written once to a new 0600 file (PKCS#8 PEM)
that the person keeps. The engine never holds an operator's private key: it
reads the file only when ``chit approve`` or ``chit deny`` signs with it.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from engine.admin.state import state_store
from engine.auth.discharge import key_id
from engine.limits import LIMITS
from engine.state.approvals import OPERATOR_NAME, Operator, check_operator

__all__ = [
    "add_operator",
    "default_key_file",
    "list_operators",
    "load_operator_key",
    "remove_operator",
]

_KEY_FILE_BYTES = 4096


def default_key_file(home: str | os.PathLike[str], name: str) -> Path:
    """Where ``chit operators add NAME`` writes the key without ``--key-out``."""
    return Path(home) / "operators" / f"{name}.key"


def add_operator(
    home: str | os.PathLike[str],
    name: str,
    *,
    groups: tuple[str, ...] = (),
    key_out: str | os.PathLike[str] | None = None,
    state: str | None = None,
) -> dict[str, Any]:
    """Make an operator's key pair, write the private key, register the public key.

    Args:
        home: The chit home.
        name: The operator's name (``[a-z0-9][a-z0-9._-]*``, at most
            ``LIMITS.operator_name_chars``).
        groups: Groups the operator belongs to (same form, at most
            ``LIMITS.operator_groups``).
        key_out: Where to write the private key (a new file); default
            ``<home>/operators/NAME.key``.
        state: A state URL (``--state``); ``None``: the home's.

    Returns:
        ``{"name", "key_id", "groups", "key_file", "added_at"}``.

    Raises:
        ValueError: If the name or a group is malformed, the operator is
            already registered, or the store is full; no key file is left.
        FileExistsError: If the key file already exists (never overwritten).
        StoreError: If the store fails; no key file is left.
    """
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    now = int(time.time())
    operator = Operator(name, key_id(public), public, tuple(sorted(set(groups))), now)
    check_operator(operator)  # before any file is written
    path = Path(key_out) if key_out is not None else default_key_file(home, name)
    if key_out is None:
        path.parent.mkdir(mode=0o700, exist_ok=True)
    pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        with state_store(home, state) as store:
            added = store.add_operator(operator)
        if not added:
            raise ValueError(f"an operator named {name} is already registered")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return {
        "name": name,
        "key_id": operator.key_id,
        "groups": list(operator.groups),
        "key_file": str(path),
        "added_at": now,
    }


def list_operators(
    home: str | os.PathLike[str], *, removed: bool = False, state: str | None = None
) -> list[dict[str, Any]]:
    """The registered operators, by name.

    Args:
        home: The chit home.
        removed: Include removed operators.
        state: A state URL; ``None``: the home's.

    Returns:
        ``[{"name", "key_id", "groups", "added_at", "removed_at"}]``
        (``removed_at`` 0 while the operator may approve).
    """
    with state_store(home, state) as store:
        found = store.operators(removed=removed)
    return [
        {"name": o.name, "key_id": o.key_id, "groups": list(o.groups), "added_at": o.added_at,
         "removed_at": o.removed_at}
        for o in found
    ]


def remove_operator(
    home: str | os.PathLike[str], name: str, *, state: str | None = None
) -> dict[str, Any]:
    """Remove an operator: it can no longer approve; what it signed still verifies.

    Returns:
        ``{"name", "removed_at"}``.

    Raises:
        ValueError: If no operator of that name is registered.
    """
    if not (isinstance(name, str) and len(name) <= LIMITS.operator_name_chars
            and OPERATOR_NAME.fullmatch(name)):
        # Never echoed: it may hold control characters meant for the terminal.
        raise ValueError("no such operator: an operator name is a-z 0-9 . _ - (starting "
                         f"with a letter or digit), at most {LIMITS.operator_name_chars} "
                         "characters")
    now = int(time.time())
    with state_store(home, state) as store:
        removed = store.remove_operator(name, now=now)
    if not removed:
        raise ValueError(f"no operator named {name} is registered")
    return {"name": name, "removed_at": now}


def load_operator_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Read an operator's private key file (PKCS#8 PEM, Ed25519).

    Raises:
        ValueError: If the file is missing, not a regular file, readable or
            writable by group or others, too large, or not an Ed25519 key.
    """
    try:
        # O_NONBLOCK: opening a FIFO named by mistake must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"cannot read the key file {path} ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"the key file {path} is not a regular file")
        if info.st_mode & 0o077:
            raise ValueError(f"the key file {path} is readable by others; chmod 600 it")
        raw = os.read(fd, _KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > _KEY_FILE_BYTES:
        raise ValueError(f"the key file {path} is not an operator key")
    try:
        key = load_pem_private_key(raw, password=None)
    except (ValueError, TypeError):
        raise ValueError(f"the key file {path} is not an operator key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"the key file {path} is not an operator key")
    return key
