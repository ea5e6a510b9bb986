"""Regenerate tests/vectors/sealing.json (deterministic: fixed keys and nonces).

Run from the repository root:
``PYTHONPATH=. python tests/vectors/make_sealing_vectors.py``.

Sealed blobs are built here from the specification (docs/sealing.md) with
``cryptography``'s AES-256-GCM directly, not with ``engine.auth.sealing``, so the
vectors check the engine against the written format. AES-GCM is deterministic
for a given key, nonce, plaintext and associated data. The keys and nonces are
fixed byte patterns for these vectors only: a real nonce is random and a real
key is 32 random bytes.

Regenerate only with a deliberate format change (every byte changes with it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"\x00chit-seal"
VERSION = 1
KEY = bytes(range(32))  # 000102...1f
OTHER_KEY = bytes(range(32, 64))
NONCE = bytes(range(0xA0, 0xAC))  # a0a1...ab
KID = "s20261130-00000001"
OTHER_KID = "s20261201-00000002"


def header(kid: str, version: int = VERSION) -> bytes:
    raw = kid.encode("ascii")
    return MAGIC + bytes([version, len(raw)]) + raw


def seal(plaintext: bytes, path: str, kid: str, key: bytes, nonce: bytes) -> tuple[bytes, bytes]:
    head = header(kid)
    aad = head + path.encode("utf-8")
    return head + nonce + AESGCM(key).encrypt(nonce, plaintext, aad), aad


def valid(name: str, plaintext: bytes, path: str, nonce: bytes = NONCE) -> dict[str, Any]:
    sealed, aad = seal(plaintext, path, KID, KEY, nonce)
    return {
        "name": name,
        "key_hex": KEY.hex(),
        "kid": KID,
        "nonce_hex": nonce.hex(),
        "path": path,
        "plaintext_hex": plaintext.hex(),
        "aad_hex": aad.hex(),
        "sealed_hex": sealed.hex(),
    }


def flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


def main() -> None:
    text = b'api_token = "s3cret-7f2e"\n'
    path = "config/secrets.toml"
    first = valid("a text file", text, path)
    sealed = bytes.fromhex(first["sealed_hex"])
    head = header(KID)
    known = {KID: KEY.hex()}
    relabelled = header(OTHER_KID) + sealed[len(head) :]
    invalid = [
        ("moved to another path", sealed, "config/other.toml", known),
        ("moved to a case variant of its path", sealed, "config/Secrets.toml", known),
        # Both key ids name the same key: only the header in the AAD catches it.
        ("key id relabelled", relabelled, path, {KID: KEY.hex(), OTHER_KID: KEY.hex()}),
        ("unknown key id", sealed, path, {OTHER_KID: KEY.hex()}),
        ("wrong key under the right id", sealed, path, {KID: OTHER_KEY.hex()}),
        ("version byte changed", sealed[:10] + b"\x02" + sealed[11:], path, known),
        ("magic changed", flip(sealed, 1), path, known),
        ("nonce bit flipped", flip(sealed, len(head)), path, known),
        ("ciphertext bit flipped", flip(sealed, len(head) + 12), path, known),
        ("tag bit flipped", flip(sealed, len(sealed) - 1), path, known),
        ("tag truncated", sealed[:-1], path, known),
        ("header only", head + NONCE, path, known),
        ("key id length past the end", MAGIC + bytes([VERSION, 64]) + b"s2026", path, known),
    ]
    doc = {
        "format": "chit-seal/1",
        "magic_hex": MAGIC.hex(),
        "valid": [
            first,
            valid("an empty file", b"", "a/b"),
            valid(
                "binary content at a non-ASCII (NFC) path",
                b"\x00\x01\xfe\xff" + "clé".encode(),
                "docs/café/clé.bin",
                nonce=bytes(12),
            ),
            valid("plaintext that itself begins with the magic", MAGIC + b"\x01 not a seal", "x"),
        ],
        "invalid": [
            {"name": name, "sealed_hex": blob.hex(), "path": where, "keys": keys}
            for name, blob, where, keys in invalid
        ],
    }
    out = Path(__file__).resolve().parent / "sealing.json"
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
