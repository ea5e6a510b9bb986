"""The ``chit-seal/1`` format and sealing keys (docs/sealing.md, keys/README.md).

Threat: a sealed blob opened at another path, under another key id, or after
being altered; sealing keys readable from disk, exported, listed or printed with
their secret; a key in the MCP edge. The format is checked against vectors built
from the specification (tests/vectors/make_sealing_vectors.py), not by the
engine's own code.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from engine.admin import operator
from engine.auth import _keyfiles, sealing, sealkeys
from engine.auth.sealing import MAGIC, is_sealed, open_sealed, sealed_key_id
from engine.errors import ConfigurationError, RepositoryError
from engine.service import Engine
from tests.conftest import World

ROOT = Path(__file__).resolve().parents[3]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "sealing.json").read_text("utf-8"))


# -- the chit-seal/1 format ------------------------------------------------------


def _lookup(keys_hex: dict[str, str]) -> Any:
    return lambda kid: bytes.fromhex(keys_hex[kid]) if kid in keys_hex else None


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_seal_vectors_round_trip(vector: dict[str, Any]) -> None:
    """The engine seals exactly the bytes the spec builds, and opens them."""
    key = bytes.fromhex(vector["key_hex"])
    plaintext = bytes.fromhex(vector["plaintext_hex"])
    made = sealing._seal_with_nonce(
        plaintext, vector["path"], vector["kid"], key, bytes.fromhex(vector["nonce_hex"])
    )
    assert made.hex() == vector["sealed_hex"]
    assert is_sealed(made) and sealed_key_id(made) == vector["kid"]
    opened = open_sealed(made, vector["path"], _lookup({vector["kid"]: vector["key_hex"]}))
    assert opened == plaintext
    # A fresh nonce every time: sealing twice never gives the same blob.
    again = [sealing.seal(plaintext, vector["path"], vector["kid"], key) for _ in range(2)]
    assert again[0] != again[1]
    assert all(open_sealed(b, vector["path"], lambda _k: key) == plaintext for b in again)


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["name"])
def test_seal_vectors_that_must_not_open(vector: dict[str, Any]) -> None:
    """Threat: a sealed blob moved to another path, relabelled, or altered, opened anyway."""
    with pytest.raises(RepositoryError) as caught:
        open_sealed(bytes.fromhex(vector["sealed_hex"]), vector["path"], _lookup(vector["keys"]))
    assert caught.value.code == "seal_invalid"
    assert caught.value.message == "".join(caught.value.message.splitlines())  # one opaque text


def test_sealed_blobs_are_binary_to_git() -> None:
    """The header's NUL makes git print "Binary files differ", never ciphertext as text."""
    assert MAGIC.startswith(b"\x00") and VECTORS["magic_hex"] == MAGIC.hex()


def test_the_sealing_doc_quotes_a_real_vector() -> None:
    doc = (ROOT / "docs" / "sealing.md").read_text("utf-8")
    squashed = "".join(doc.split())
    first = VECTORS["valid"][0]
    for field in ("key_hex", "nonce_hex", "aad_hex", "sealed_hex", "plaintext_hex"):
        assert first[field] in squashed, field
    assert first["kid"] in doc and first["path"] in doc


def test_a_repository_without_keys_seals_nothing_and_opens_nothing() -> None:
    none = sealing.NO_SEALING
    assert not none.protects("src/secret/a") and none.open("p", b"plain") == b"plain"
    blob = bytes.fromhex(VECTORS["valid"][0]["sealed_hex"])
    with pytest.raises(RepositoryError, match="seal_invalid"):
        none.open(VECTORS["valid"][0]["path"], blob)


# -- sealing keys ------------------------------------------------------------------


def test_init_creates_one_sealing_key_and_is_idempotent(world: World) -> None:
    """Threat: key theft from disk (modes), or a re-run of init replacing the key."""
    folder = world.home / "keys" / "sealing"
    files = list(folder.glob("*.json"))
    assert len(files) == 1
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    doc = json.loads(files[0].read_text())
    assert doc["alg"] == "aes-256-gcm" and doc["status"] == "active"
    assert doc["kid"] == files[0].stem and doc["kid"].startswith("s")
    assert len(_keyfiles.unb64(doc["secret"])) == 32
    again = operator.init_home(world.home)
    assert again["sealing_key_id"] == doc["kid"] and list(folder.glob("*.json")) == files
    # An older home (no sealing folder yet) gets its key from init, keeping the rest.
    shutil.rmtree(folder)
    root_before = sorted(p.name for p in (world.home / "keys" / "root").glob("*.json"))
    added = operator.init_home(world.home)
    assert len(list(folder.glob("*.json"))) == 1 and added["sealing_key_id"] != doc["kid"]
    assert sorted(p.name for p in (world.home / "keys" / "root").glob("*.json")) == root_before


def test_sealing_keys_never_leave_the_keyring(world: World) -> None:
    """Threat: a sealing key exported, listed or printed with its secret."""
    ring = sealkeys.SealingKeyring(world.home)
    active = ring.active()
    assert active.secret.hex() not in repr(active) and "secret" not in repr(ring)
    exported = json.dumps(operator.export_public(world.home))
    assert active.key_id not in exported
    listed = operator.list_keys(world.home)
    sealing_rows = [k for k in listed if k["kind"] == "sealing"]
    assert [k["kid"] for k in sealing_rows] == [active.key_id] and sealing_rows[0]["signing"]
    assert _keyfiles.b64(active.secret) not in json.dumps(listed)


def test_a_group_readable_sealing_key_is_refused(world: World) -> None:
    path = next((world.home / "keys" / "sealing").glob("*.json"))
    os.chmod(path, 0o640)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        sealkeys.SealingKeyring(world.home)
    with pytest.raises(ConfigurationError):
        Engine(world.home, world.repo)


def test_engine_refuses_to_start_without_a_sealing_key(world: World) -> None:
    shutil.rmtree(world.home / "keys" / "sealing")
    with pytest.raises(ConfigurationError, match="chit init"):
        Engine(world.home, world.repo)



# -- the edge -----------------------------------------------------------------------


def test_the_mcp_edge_holds_no_key() -> None:
    """The edge module reaches the engine only through its interface: it imports no key
    handling and no cryptography (docs/sealing.md, "Who holds the keys")."""
    import ast

    tree = ast.parse((ROOT / "gateway" / "mcp_server.py").read_text("utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    assert not {m for m in imported if m.startswith(("engine.keys", "engine.sealing",
                                                     "cryptography"))}
