"""Fuzz the token text form (engine/auth/token.py, docs/token-format.md) and its verification.

The first byte picks how the rest is used:

* 0: the rest is the token's text (``chit_...``, any characters);
* 1: the rest is the envelope's bytes, sent as ``chit_`` + base64url;
* 2: as 1, then re-tagged with the published vectors' key its ``kid`` names,
  so verification gets past the MAC to the blocks, caveats and proofs.

Checks: :func:`token.parse`, ``unverified_blocks`` and :func:`verify_at_time`
(with the vectors' keyring, tests/vectors/tokens.json) refuse only with
:class:`ChitError`; a token that parses is the one spelling of its envelope.
"""

from __future__ import annotations

import base64
import json

import _harness
import atheris

with atheris.instrument_imports(include=_harness.INSTRUMENT):
    from engine.auth import cbor, token
    from engine.auth._mac import chain_tags
    from engine.auth.verify import verify_at_time
    from engine.errors import ChitError

_VECTORS = json.loads((_harness.ROOT / "tests" / "vectors" / "tokens.json").read_text())
_KEYS = {
    kid: bytes.fromhex(key["secret"])
    for kid, key in _VECTORS["keys"].items()
    if key["status"] == "active"
}
_NOW = int(_VECTORS["now"])


def _text(envelope: bytes) -> str:
    return token.TEXT_PREFIX + base64.urlsafe_b64encode(envelope).rstrip(b"=").decode("ascii")


def _spelling(parsed: token.UnverifiedToken, tag: bytes | None = None) -> str:
    """The one text form of ``parsed``'s envelope (with ``tag`` instead of its own)."""
    envelope = {
        "v": parsed.version,
        "alg": parsed.algorithm,
        "kid": parsed.key_id,
        "blocks": list(parsed.blocks),
        "tag": parsed._tag if tag is None else tag,
    }
    return _text(cbor.encode(envelope))


def _check(text: str) -> None:
    try:
        parsed = token.parse(text)
    except ChitError:
        return
    if _spelling(parsed) != text.strip():
        raise RuntimeError("a token parsed from a spelling that is not its own")
    try:
        parsed.unverified_blocks()
    except ChitError:
        pass
    try:
        verify_at_time(parsed, _KEYS.get, _NOW)
    except ChitError:
        pass


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    mode, rest = data[0] % 3, data[1:]
    if mode == 0:
        _check(_harness.text_of(rest))
        return
    text = _text(rest)
    if mode == 2:
        try:
            parsed = token.parse(text)
        except ChitError:
            return
        key = _KEYS.get(parsed.key_id)
        if key is not None:
            text = _spelling(parsed, chain_tags(key, parsed.blocks)[-1])
    _check(text)


if __name__ == "__main__":
    _harness.run(TestOneInput)
