"""Redaction of call-log arguments and labels (engine/audit/redact.py): bounded, token-free."""

from __future__ import annotations

import hashlib
import unicodedata

from engine.audit import redact


def test_redaction_bounds_every_argument() -> None:
    long = "a line of text " * 70
    nfd = unicodedata.normalize("NFD", "caf\u00e9")
    out = redact.redact_arguments({
        "long": long, "nfd": nfd, "surrogate": "a\ud800", "big": 2**100, "float": 1.5,
        "deep": [[[[["too deep"]]]]], "many": list(range(100)), 7: "int key",
        "content": {"not": "a string"},
    })
    assert out["long"]["prefix"] == long[:256] and out["long"]["size"] == len(long)
    assert out["long"]["sha256"] == "sha256:" + hashlib.sha256(long.encode()).hexdigest()
    assert out["nfd"]["text"] == "not NFC UTF-8" and "prefix" not in out["nfd"]
    assert out["surrogate"]["text"] == "not NFC UTF-8"
    assert out["big"] == {"int_bits": 101} and out["float"] == {"float": "1.5"}
    assert out["deep"] == [[[{"omitted": "nested too deep"}]]]
    assert len(out["many"]) == 33 and out["many"][-1] == {"omitted_items": 68}
    assert out["~7"] == "int key"
    assert set(out["content"]) == {"size", "sha256"}
    huge = redact.redact_arguments({f"k{i}": ["a few words " * 20] * 8 for i in range(8)})
    assert huge["omitted"] == "arguments too large"
    assert redact.redact_label("\x1b]0;x\x07") == "\x1b]0;x\x07"  # stored; escaped by show
    # A long run of base64url alone may be a token without its prefix: dropped.
    assert redact.redact_arguments({"x": "A" * 96}) == {
        "x": {"redacted": "token-like text", "chars": 96}}
    assert redact.redact_label(5) == "~not-text"
    assert redact.redact_label("t " * 100) == "~too-long"
