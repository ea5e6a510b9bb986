"""The ``chit-det/1`` deterministic CBOR profile: :func:`encode` and a strict :func:`decode`.

Everything chit hashes, MACs or signs is encoded under it. :func:`decode` is the
security boundary: it accepts exactly the bytes :func:`encode` produces and
refuses everything else with :class:`~engine.errors.ProfileError`. Pure. The
rules and vectors: docs/cbor-profile.md.
"""

from __future__ import annotations

import unicodedata
from typing import TypeAlias

import cbor2

from engine.errors import ProfileError
from engine.limits import LIMITS

__all__ = ["PROFILE", "decode", "encode"]

PROFILE = "chit-det/1"
"""Name of this profile; part of every hashed structure that uses it."""

Value: TypeAlias = "bool | int | str | bytes | list[Value] | dict[str, Value] | None"
"""A value of the profile's data model, as :func:`decode` returns it."""

_UINT_MAX = 2**64 - 1
_NINT_MIN = -(2**64)

# Major types (RFC 8949 §3.1).
_MT_UINT = 0
_MT_NINT = 1
_MT_BYTES = 2
_MT_TEXT = 3
_MT_ARRAY = 4
_MT_MAP = 5
_MT_TAG = 6
_MT_SIMPLE = 7

# Additional information 24..27 carry a 1, 2, 4 or 8 byte argument; each is the
# shortest form only for values at or above this minimum (RFC 8949 §4.2.1).
_ARG_MINIMUM = {24: 24, 25: 0x100, 26: 0x1_0000, 27: 0x1_0000_0000}
_ARG_SIZE = {24: 1, 25: 2, 26: 4, 27: 8}

_SIMPLE_VALUES: dict[int, Value] = {0xF4: False, 0xF5: True, 0xF6: None}


def _check_limit(name: str, limit: int, ceiling: int | None) -> None:
    """Refuse a nonsensical limit argument (a programming error, not bad data)."""
    if type(limit) is not int or limit < 0 or (ceiling is not None and limit > ceiling):
        bound = f"0..{ceiling}" if ceiling is not None else ">= 0"
        raise ValueError(f"{name} must be an int in {bound}")


# --------------------------------------------------------------------------- encode


def _check_text(text: str) -> None:
    """Refuse text that is not NFC or not encodable as UTF-8 (lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ProfileError("text contains a surrogate code point") from None
    if not unicodedata.is_normalized("NFC", text):
        raise ProfileError("text is not NFC")


def _check_value(value: object, depth: int, max_depth: int) -> None:
    """Walk ``value`` and refuse anything outside the profile's data model.

    Only the exact built-in types are accepted (no subclasses: ``IntEnum``,
    ``OrderedDict``, ``str`` subclasses...), so that what is checked here is
    exactly what ``cbor2`` will write.
    """
    if value is None or type(value) is bool or type(value) is bytes:
        return
    if type(value) is int:
        if not _NINT_MIN <= value <= _UINT_MAX:
            raise ProfileError("integer outside [-2**64, 2**64-1]")
        return
    if type(value) is str:
        _check_text(value)
        return
    if type(value) is list or type(value) is tuple or type(value) is dict:
        if depth >= max_depth:
            raise ProfileError("nesting too deep")
        if type(value) is dict:
            for key, item in value.items():
                if type(key) is not str:
                    raise ProfileError("map key is not a text string")
                _check_text(key)
                _check_value(item, depth + 1, max_depth)
        else:
            for item in value:
                _check_value(item, depth + 1, max_depth)
        return
    if isinstance(value, float):
        raise ProfileError("float not allowed")
    raise ProfileError(f"type not allowed: {type(value).__name__}")


def encode(value: object, *, max_depth: int = LIMITS.cbor_default_depth_levels) -> bytes:
    """Encode ``value`` under ``chit-det/1``.

    The value is first checked against the profile; the bytes are then written
    by ``cbor2.dumps(value, canonical=True)``, which gives RFC 8949 §4.2.1 core
    deterministic encoding: shortest-form arguments (§4.2.1, §3), definite
    lengths only, and map keys sorted. cbor2 sorts keys length-first (the
    RFC 7049 §3.9 order); because every key here is a text string, that is the
    same as §4.2.1's bytewise order of the encoded keys.

    There is no size limit on the output: a caller that will later
    :func:`decode` the bytes with a ``max_size`` must make sure they fit.

    Args:
        value: ``None``, ``bool``, ``int`` in ``[-2**64, 2**64 - 1]``, ``str``
            (NFC), ``bytes``, ``list`` or ``tuple`` of values, or ``dict`` with
            ``str`` keys (NFC) and values. Exact types only, no subclasses.
            Tuples encode as arrays and so decode as lists.
        max_depth: Deepest nesting of arrays and maps allowed, in levels
            (a bare scalar is depth 0, ``[[1]]`` is depth 2); 0 to 256.

    Returns:
        The deterministic encoding of ``value``.

    Raises:
        ProfileError: If ``value`` contains a float, an integer out of range, a
            non-``str`` map key, non-NFC text, text with a lone surrogate, any
            other type (set, datetime, tag, subclass...), or nests deeper than
            ``max_depth`` (which also stops reference cycles).
        ValueError: If ``max_depth`` is not an int in 0..256.

    """
    _check_limit("max_depth", max_depth, LIMITS.cbor_depth_ceiling_levels)
    _check_value(value, 0, max_depth)
    return cbor2.dumps(value, canonical=True)


# --------------------------------------------------------------------------- decode


class _Decoder:
    """One strict pass over a byte string; positions are offsets into ``data``."""

    __slots__ = ("data", "end", "max_depth")

    def __init__(self, data: bytes, max_depth: int) -> None:
        self.data = data
        self.end = len(data)
        self.max_depth = max_depth

    def head(self, pos: int) -> tuple[int, int, int]:
        """Read one initial byte and its argument (RFC 8949 §3).

        Returns:
            ``(major type, argument, position after the head)``. For major
            type 7 the argument is the whole initial byte.

        """
        if pos >= self.end:
            raise ProfileError("truncated input")
        initial = self.data[pos]
        major = initial >> 5
        info = initial & 0x1F
        pos += 1
        if major == _MT_SIMPLE:
            if initial in _SIMPLE_VALUES:
                return major, initial, pos
            if info in (25, 26, 27):
                raise ProfileError("float not allowed")
            if info == 23:
                raise ProfileError("undefined not allowed")
            if info == 31:
                raise ProfileError("unexpected break")
            if info >= 28:
                raise ProfileError("reserved additional information")
            raise ProfileError("simple value not allowed")
        if info >= 28:
            if info == 31:
                raise ProfileError("indefinite length not allowed")
            raise ProfileError("reserved additional information")
        if major == _MT_TAG:
            raise ProfileError("tag not allowed")
        if info < 24:
            return major, info, pos
        size = _ARG_SIZE[info]
        stop = pos + size
        if stop > self.end:
            raise ProfileError("truncated input")
        arg = int.from_bytes(self.data[pos:stop], "big")
        if arg < _ARG_MINIMUM[info]:
            raise ProfileError("argument not in shortest form")
        return major, arg, stop

    def text(self, pos: int, length: int) -> tuple[str, int]:
        """Decode ``length`` bytes at ``pos`` (already bounds-checked) as NFC text.

        Returns:
            ``(text, position after the text)``.

        """
        stop = pos + length
        try:
            text = self.data[pos:stop].decode("utf-8")
        except UnicodeDecodeError:
            raise ProfileError("invalid UTF-8") from None
        if not unicodedata.is_normalized("NFC", text):
            raise ProfileError("text is not NFC")
        return text, stop

    def item(self, pos: int, depth: int) -> tuple[Value, int]:
        """Decode the data item at ``pos`` found at nesting ``depth``.

        Returns:
            ``(value, position after the item)``.

        """
        major, arg, pos = self.head(pos)
        if major == _MT_UINT:
            return arg, pos
        if major == _MT_NINT:
            return -1 - arg, pos
        if major == _MT_SIMPLE:
            return _SIMPLE_VALUES[arg], pos
        if major == _MT_BYTES or major == _MT_TEXT:
            # Refuse before slicing: never allocate for a length we do not have.
            if arg > self.end - pos:
                raise ProfileError("length exceeds input")
            if major == _MT_BYTES:
                return self.data[pos : pos + arg], pos + arg
            return self.text(pos, arg)
        # Arrays and maps.
        if depth >= self.max_depth:
            raise ProfileError("nesting too deep")
        if major == _MT_ARRAY:
            # Every item takes at least one byte.
            if arg > self.end - pos:
                raise ProfileError("length exceeds input")
            items: list[Value] = []
            for _ in range(arg):
                element, pos = self.item(pos, depth + 1)
                items.append(element)
            return items, pos
        # major == _MT_MAP. Every key/value pair takes at least two bytes.
        if arg > (self.end - pos) // 2:
            raise ProfileError("length exceeds input")
        mapping: dict[str, Value] = {}
        previous = b""
        for index in range(arg):
            key_major, key_length, key_pos = self.head(pos)
            if key_major != _MT_TEXT:
                raise ProfileError("map key is not a text string")
            if key_length > self.end - key_pos:
                raise ProfileError("length exceeds input")
            key, stop = self.text(key_pos, key_length)
            encoded_key = self.data[pos:stop]
            # RFC 8949 §4.2.1: keys sorted bytewise by their encodings. Strictly
            # increasing, so an equal key (a duplicate) is refused as well.
            if index and encoded_key <= previous:
                if encoded_key == previous:
                    raise ProfileError("duplicate map key")
                raise ProfileError("map keys out of order")
            previous = encoded_key
            mapping[key], pos = self.item(stop, depth + 1)
        return mapping, pos


# The fast path. It accepts only what _Decoder accepts, and returns the same
# value; it never refuses. Whenever it meets anything _Decoder would refuse (or
# that it does not handle itself), it gives up and the input is read again by
# _Decoder, which then accepts or refuses it with its own reason. Each check
# below is one of _Decoder's, in the same terms, so the refusals, their order
# and the reasons are unchanged (tests/engine/auth/test_cbor_fast.py compares
# the two paths on valid and hostile inputs).


class _GiveUp(Exception):
    """Raised inside the fast path; never leaves this module."""


def _fast_text(data: bytes, pos: int, stop: int) -> str:
    """The text at ``data[pos:stop]``, as :meth:`_Decoder.text` would accept it."""
    if stop > len(data):
        raise _GiveUp  # length exceeds input
    text = data[pos:stop].decode("utf-8")  # UnicodeDecodeError: invalid UTF-8
    # ASCII text is always NFC; anything else is checked as _Decoder does.
    if not text.isascii() and not unicodedata.is_normalized("NFC", text):
        raise _GiveUp
    return text


def _fast_item(data: bytes, pos: int, depth: int, max_depth: int) -> tuple[Value, int]:
    """:meth:`_Decoder.item`, for input it accepts; raises :class:`_GiveUp` otherwise.

    Short text, small integers and short byte strings inside arrays and maps
    are read in the loop itself (their heads need no further check), the rest
    by a recursive call.
    """
    initial = data[pos]  # IndexError: truncated input
    pos += 1
    info = initial & 0x1F
    if info < 24:
        arg = info
    elif info == 24:
        arg = data[pos]  # IndexError: truncated argument
        if arg < 24:
            raise _GiveUp  # not in shortest form
        pos += 1
    elif info < 28:
        stop = pos + _ARG_SIZE[info]
        if stop > len(data):
            raise _GiveUp  # truncated argument
        arg = int.from_bytes(data[pos:stop], "big")
        if arg < _ARG_MINIMUM[info]:
            raise _GiveUp  # not in shortest form
        pos = stop
    else:
        raise _GiveUp  # reserved, indefinite length or break
    major = initial >> 5
    if major == _MT_ARRAY:
        if depth >= max_depth or arg > len(data) - pos:
            raise _GiveUp  # nesting too deep, length exceeds input
        depth += 1
        items: list[Value] = []
        for _ in range(arg):
            initial = data[pos]
            if initial < 0x18:  # unsigned integer 0..23
                items.append(initial)
                pos += 1
            elif 0x60 <= initial < 0x78:  # text of 0..23 bytes
                stop = pos + 1 + (initial - 0x60)
                items.append(_fast_text(data, pos + 1, stop))
                pos = stop
            else:
                item, pos = _fast_item(data, pos, depth, max_depth)
                items.append(item)
        return items, pos
    if major == _MT_MAP:
        if depth >= max_depth or arg > (len(data) - pos) // 2:
            raise _GiveUp  # nesting too deep, length exceeds input
        depth += 1
        mapping: dict[str, Value] = {}
        previous = b""
        for _ in range(arg):
            initial = data[pos]
            if 0x60 <= initial < 0x78:  # a key of 0..23 bytes
                stop = pos + 1 + (initial - 0x60)
                key = _fast_text(data, pos + 1, stop)
            elif initial >> 5 == _MT_TEXT:
                found, stop = _fast_item(data, pos, depth, max_depth)
                if type(found) is not str:
                    raise _GiveUp  # pragma: no cover (a text head reads as text)
                key = found
            else:
                raise _GiveUp  # map key is not a text string
            encoded_key = data[pos:stop]
            # Strictly increasing encodings (the first key is above b"").
            if encoded_key <= previous:
                raise _GiveUp  # duplicate map key, map keys out of order
            previous = encoded_key
            initial = data[stop]
            if initial < 0x18:
                mapping[key] = initial
                pos = stop + 1
            elif 0x40 <= initial < 0x58:  # bytes of 0..23 bytes
                pos = stop + 1 + (initial - 0x40)
                if pos > len(data):
                    raise _GiveUp  # length exceeds input
                mapping[key] = data[stop + 1 : pos]
            else:
                mapping[key], pos = _fast_item(data, stop, depth, max_depth)
        return mapping, pos
    if major == _MT_TEXT:
        stop = pos + arg
        return _fast_text(data, pos, stop), stop
    if major == _MT_BYTES:
        stop = pos + arg
        if stop > len(data):
            raise _GiveUp  # length exceeds input
        return data[pos:stop], stop
    if major == _MT_UINT:
        return arg, pos
    if major == _MT_NINT:
        return -1 - arg, pos
    if major == _MT_SIMPLE and initial in _SIMPLE_VALUES:
        return _SIMPLE_VALUES[initial], pos
    raise _GiveUp  # a tag, a float or another simple value


def _fast_decode(data: bytes, max_depth: int) -> tuple[Value] | None:
    """``(value,)`` if the fast path vouches for ``data``, else ``None`` (ask _Decoder)."""
    try:
        value, pos = _fast_item(data, 0, 0, max_depth)
    except (_GiveUp, IndexError, UnicodeDecodeError):
        return None
    if pos != len(data):
        return None  # trailing bytes after item
    return (value,)


def decode(
    data: bytes | bytearray,
    *,
    max_size: int = LIMITS.cbor_default_size_bytes,
    max_depth: int = LIMITS.cbor_default_depth_levels,
) -> Value:
    """Decode one ``chit-det/1`` data item, refusing anything non-canonical.

    This is the strict inverse of :func:`encode`: it accepts a byte string only
    if ``encode`` would produce exactly those bytes for the result (RFC 8949
    §4.2.1 core deterministic encoding within the profile's data model; heads
    and arguments per RFC 8949 §3). Work and memory are linear in
    ``len(data)``: no length announced in a header is trusted before it is
    checked against the bytes that remain.

    Args:
        data: The encoded item, at most ``max_size`` bytes (``bytes`` or
            ``bytearray``).
        max_size: Largest input accepted, in bytes.
        max_depth: Deepest nesting of arrays and maps allowed, in levels
            (a bare scalar is depth 0, ``[[1]]`` is depth 2); 0 to 256.

    Returns:
        The value: ``int``, ``bool``, ``None``, ``str``, ``bytes``, ``list`` or
        ``dict`` with ``str`` keys.

    Raises:
        ProfileError: If ``data`` is longer than ``max_size``; is empty or
            truncated; has bytes after the top-level item; uses a tag (major
            type 6), a float, ``undefined``, a simple value or a break (major
            type 7 other than ``false``/``true``/``null``); uses reserved
            additional information 28-30 or an indefinite length (31); encodes
            an argument in a longer form than needed; announces a length or
            count larger than the remaining input; holds invalid UTF-8 or
            non-NFC text; has a map key that is not a text string, a duplicate
            key, or keys not in strictly increasing bytewise order; or nests
            deeper than ``max_depth``.
        TypeError: If ``data`` is not ``bytes`` or ``bytearray``.
        ValueError: If ``max_size`` is negative or ``max_depth`` is not an int
            in 0..256.

    """
    if not isinstance(data, bytes | bytearray):
        raise TypeError("data must be bytes")
    _check_limit("max_size", max_size, None)
    _check_limit("max_depth", max_depth, LIMITS.cbor_depth_ceiling_levels)
    if len(data) > max_size:
        raise ProfileError("input larger than max_size")
    data = bytes(data)
    fast = _fast_decode(data, max_depth)
    if fast is not None:
        return fast[0]
    decoder = _Decoder(data, max_depth)
    value, pos = decoder.item(0, 0)
    if pos != decoder.end:
        raise ProfileError("trailing bytes after item")
    return value
