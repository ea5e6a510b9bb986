"""The operator's key commands: list, rotate and retire keys, export the public ones.

Each command answers with ids, kinds and states, never a secret. The key
files and their formats are in keys/README.md and docs/provenance-format.md.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.admin.state import state_store
from engine.auth.rootkeys import Keyring
from engine.auth.rootkeys import retire_key as _retire_key
from engine.auth.rootkeys import rotate_key as _rotate_key
from engine.auth.sealkeys import retire_sealing_key, sealing_keys
from engine.auth.sealkeys import rotate_sealing_key as rotate_sealing_key_
from engine.auth.signkeys import export_public_keys, load_public_keys, signing_keys
from engine.auth.signkeys import rotate_signing_key as rotate_signing_key_
from engine.errors import ConfigurationError, StoreError

__all__ = [
    "export_public",
    "list_keys",
    "load_trusted_keys",
    "retire_key",
    "rotate_key",
    "rotate_sealing_key",
    "rotate_signing_key",
]

logger = logging.getLogger("chit.admin")


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


def rotate_key(home: str | os.PathLike[str], *, state: str | None = None) -> dict[str, Any]:
    """Add a new signing key (older keys keep verifying), and announce it.

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's.
    """
    key = _rotate_key(home)
    return {"kid": key.key_id, "kind": "root", "created": key.created, "status": key.status,
            "signing": True, "announced": _announce_keys(home, state)}


def retire_key(
    home: str | os.PathLike[str], key_id: str, *, state: str | None = None
) -> dict[str, Any]:
    """Retire any key ``chit keys list`` shows, by its id.

    - a root key: its tokens fail with ``token_unknown_key`` from their next
      call; the change is announced on the change feed, so engines tell the
      connections it affects within a second (docs/deployment.md, "The change
      feed");
    - a sealing key other than the one that seals: what it sealed no longer
      opens (``seal_invalid``);
    - a provenance signing key: only the active one could be, and it is not
      (provenance must keep being signed): a rotation retires it, keeping its
      public half for the audit.

    Args:
        home: The chit home.
        key_id: The key's id, as ``chit keys list`` shows it.
        state: A state URL (``--state``); ``None``: the home's.

    Returns:
        ``{"kid", "kind", "created", "status", "signing"}`` (and ``announced``
        for a root key).

    Raises:
        ValueError: The id is in no keyring, the key is already retired, or
            it is the last active root key, the sealing key that seals, or the
            active signing key (each message says what to run instead).
        ConfigurationError: A keyring cannot be loaded.
    """
    root = Path(home) / "keys"
    if (root / "signing").is_dir():
        for signer in signing_keys(home):
            if signer.key_id == key_id:
                if signer.status == "retired":
                    raise ValueError("that signing key is already retired (a rotation did it; "
                                     "it still verifies the provenance it signed)")
                raise ValueError("refusing to retire the signing key that signs provenance; "
                                 "run `chit keys rotate --signing`, which retires it")
    if (root / "sealing").is_dir() and any(k.key_id == key_id for k in sealing_keys(home)):
        sealed = retire_sealing_key(home, key_id)
        return {"kid": sealed.key_id, "kind": "sealing", "created": sealed.created,
                "status": sealed.status, "signing": False}
    retired = _retire_key(home, key_id)
    return {"kid": retired.key_id, "kind": "root", "created": retired.created,
            "status": retired.status, "signing": False, "announced": _announce_keys(home, state)}


def _announce_keys(home: str | os.PathLike[str], state: str | None) -> bool:
    """Announce a keyring change; False if the store failed (engines still see the files)."""
    try:
        with state_store(home, state) as store:
            store.announce("keys", now=int(time.time()))
    except (StoreError, ConfigurationError):
        logger.warning("the key change could not be announced on the change feed; engines "
                       "notice it from the key files within a second")
        return False
    return True


def load_trusted_keys(doc: object) -> dict[str, Ed25519PublicKey]:
    """The verifying keys an auditor trusts, from a ``chit-engine-keys/1`` document.

    Args:
        doc: The decoded JSON document (untrusted): a ``--keys`` file, or
            :func:`export_public` of the home.

    Returns:
        Key id to Ed25519 public key.

    Raises:
        ValueError: If the document is not a well-formed ``chit-engine-keys/1``.
    """
    return load_public_keys(doc)
