"""The ``chit-seal/1`` format (docs/sealing.md), and no key in the MCP edge.

Threat: a sealed blob opened at another path, under another key id, or after
being altered; a key in the MCP edge. The format is checked against vectors built
from the specification (tests/vectors/make_sealing_vectors.py), not by the
engine's own code. The sealing keys are tested in test_sealkeys.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.auth import sealing
from engine.auth.sealing import MAGIC, is_sealed, open_sealed, sealed_key_id
from engine.errors import RepositoryError

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
    assert not {m for m in imported if m.startswith(("engine.auth", "cryptography"))}
