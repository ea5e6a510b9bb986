"""The byte form of one file's records and of their outline (untrusted when read).

Workers send records in this form, the persisted index stores it; decoding
checks every field it uses, so bytes anyone could have written are never
trusted (docs/semantic.md, "The records' byte form"). ``file`` encodes and
decodes records, ``outline`` their outline; the checks live in ``_checks``
and the lazily decoded parts in ``_row``.
"""

from engine.semantic.codec._checks import FORMAT, CodecError
from engine.semantic.codec.file import decode, decode_lazily, encode, encode_extracted
from engine.semantic.codec.outline import OUTLINE_FORMAT, decode_stored, encode_outline

__all__ = [
    "FORMAT",
    "OUTLINE_FORMAT",
    "CodecError",
    "decode",
    "decode_lazily",
    "decode_stored",
    "encode",
    "encode_extracted",
    "encode_outline",
]
