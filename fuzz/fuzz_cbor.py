"""Fuzz the ``chit-det/1`` CBOR decoder (engine/auth/cbor.py, docs/cbor-profile.md).

Checks: ``decode`` either refuses with ``ProfileError`` or returns a value that
``encode`` turns back into exactly the input (the strict inverse), at every
depth limit; the fast path and the general decoder agree on every input.
"""

from __future__ import annotations

import _harness
import atheris

with atheris.instrument_imports(include=_harness.INSTRUMENT):
    from engine.auth import cbor
    from engine.errors import ProfileError


def TestOneInput(data: bytes) -> None:
    depth = data[0] % 12 if data else 0
    for max_depth in (cbor.LIMITS.cbor_default_depth_levels, depth):
        try:
            value = cbor.decode(data, max_depth=max_depth)
        except ProfileError:
            general = None
        else:
            if cbor.encode(value, max_depth=max_depth) != data:
                raise RuntimeError("decode accepted bytes that encode does not produce")
            general = value
        # The general decoder alone, as decode uses it when the fast path gives up.
        try:
            decoder = cbor._Decoder(bytes(data), max_depth)
            slow, pos = decoder.item(0, 0)
            if pos != decoder.end:
                raise ProfileError("trailing bytes after item")
        except ProfileError:
            slow = None
        if general is None and slow is not None and data:
            raise RuntimeError("the general decoder accepts what decode refuses")
        if general is not None and (slow is None or slow != general):
            raise RuntimeError("the fast path and the general decoder disagree")


if __name__ == "__main__":
    _harness.run(TestOneInput)
