"""The shortcuts of policy.paths against the general rules they stand for.

Threat model: path and glob validation and glob matching decide what a token's
scope covers and which paths the policy forbids. ``_match`` answers two common
glob shapes without running the segment automaton, and ``_form_problem`` skips
for ASCII text the checks that ASCII passes by construction and finds control
and bidirectional characters with a regular expression. If a shortcut answered
differently from the general rule, a scope could widen (``src/**`` matching
``srcx/a``) or a refused path or glob could pass (a control character, a
``Trojan source`` bidirectional control, non-NFC text). Each test compares the
shortcut with the general rule on many inputs, hostile ones included, and
fails on any difference.
"""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy import paths
from policy.paths import MAX_PATH_BYTES, MAX_SEGMENT_BYTES, validate_glob, validate_path

# --------------------------------------------------------------- matching


segment_chars = st.sampled_from(["a", "b", "ab", ".", "*", "?", "**", "", "é", " "])
segments = st.lists(segment_chars, min_size=1, max_size=3).map("".join)
globs = st.one_of(
    st.lists(segments, min_size=1, max_size=5).map("/".join),
    st.text(alphabet="ab*?/.", max_size=12),
)
paths_ = st.one_of(
    st.lists(st.sampled_from(["a", "b", "ab", "ba", "", ".", "a.b", "é", "*"]), max_size=6).map(
        "/".join
    ),
    st.text(alphabet="ab/.*", max_size=12),
)


def both(glob: str, path: str) -> bool:
    fast = paths._match.__wrapped__(glob, path)
    general = paths._match_segments(glob, path)
    assert fast == general, (glob, path)
    return fast


@settings(max_examples=3000)
@given(globs, paths_)
def test_match_agrees_with_the_automaton_on_any_strings(glob: str, path: str) -> None:
    both(glob, path)


@settings(max_examples=1500)
@given(st.lists(st.sampled_from(["a", "b", "ab", "src", "api", "x.py"]), max_size=4), paths_)
def test_literal_and_prefix_globs_agree(literals: list[str], path: str) -> None:
    prefix = "/".join(literals)
    for glob in (prefix, f"{prefix}/**" if prefix else "**", f"{prefix}/*", f"{prefix}/**/x"):
        both(glob, path)
        both(glob, prefix)
        both(glob, f"{prefix}/a")
        both(glob, f"{prefix}x/a")


@pytest.mark.parametrize(
    ("glob", "path", "expected"),
    [
        ("src/**", "src/a.py", True),
        ("src/**", "src/x/y.py", True),
        ("src/**", "src", False),
        ("src/**", "srcx/a.py", False),
        ("src/**", "src_old/a.py", False),
        ("src/api/**", "src/api/v1.py", True),
        ("src/api/**", "src/apiv1.py", False),
        ("src/api/**", "src/api", False),
        ("**", "a", True),
        ("**", "a/b/c", True),
        ("README.md", "README.md", True),
        ("README.md", "readme.md", False),
        ("README.md", "docs/README.md", False),
        ("a/b", "a/b/c", False),
        ("a/*", "a/b", True),
        ("a/*/**", "a/b", False),
    ],
)
def test_match_examples(glob: str, path: str, expected: bool) -> None:
    assert both(glob, path) is expected
    assert paths.glob_matches(glob, path) is expected


# --------------------------------------------------------------- validation

# The checks as they were written before the shortcuts, kept here verbatim as
# the general rule the shortcuts must agree with.
_BIDI_CONTROLS = frozenset(
    [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)]
)


def size_problem_reference(text: str, noun: str) -> str | None:
    if not text:
        return f"{noun} is empty"
    if len(text) > MAX_PATH_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"{noun} is longer than {MAX_PATH_BYTES} bytes"
    return None


def segment_problem_reference(segment: str, noun: str) -> str | None:
    if not segment:
        return f"{noun} has an empty segment"
    if segment in (".", ".."):
        return f"{noun} has a '{segment}' segment"
    if not segment.strip(". "):
        return f"{noun} has a segment made only of dots and spaces"
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        return f"{noun} has a segment longer than {MAX_SEGMENT_BYTES} bytes"
    return None


def form_problem_reference(text: str, noun: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{noun} is not valid UTF-8 (lone surrogate)"
    if text.startswith("/"):
        return f"{noun} is absolute"
    if len(text) >= 2 and text[0].isascii() and text[0].isalpha() and text[1] == ":":
        return f"{noun} has a drive prefix"
    if "\\" in text:
        return f"{noun} contains a backslash"
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text):
        return f"{noun} contains a control character"
    if "\u2028" in text or "\u2029" in text:
        return f"{noun} contains a line or paragraph separator"
    if any(char in _BIDI_CONTROLS for char in text):
        return f"{noun} contains a bidirectional control character"
    if not unicodedata.is_normalized("NFC", text):
        return f"{noun} is not in Unicode NFC form"
    for segment in text.split("/"):
        problem = segment_problem_reference(segment, noun)
        if problem is not None:
            return problem
    return None


# Default_Ignorable_Code_Point outside category Cf, from DerivedCoreProperties.txt.
IGNORABLE = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0]
    + list(range(0x180B, 0x1810)) + list(range(0xFE00, 0xFE10)) + list(range(0xFFF0, 0xFFF9))
    + list(range(0xE0000, 0xE1000))
)


def invisible_reference(text: str, noun: str) -> str | None:
    invisible = [char for char in text
                 if unicodedata.category(char) == "Cf" or ord(char) in IGNORABLE]
    if invisible:
        return f"{noun} contains an invisible format character (U+{ord(invisible[0]):04X})"
    return None


_DEVICES = frozenset(
    ["con", "prn", "aux", "nul", "conin$", "conout$"]
    + [f"{stem}{digit}" for stem in ("com", "lpt") for digit in "123456789\u00b9\u00b2\u00b3"]
)


def is_device_reference(segment: str) -> bool:
    """git's is_valid_win32_path() reading: the name, then spaces, then end, '.' or ':'."""
    stem = segment
    for stop in (".", ":"):
        stem = stem.split(stop, 1)[0]
    stem = stem.rstrip(" ")
    # Case-insensitive, and stricter than Windows where it costs nothing: the
    # dotted and dotless i (U+0130, U+0131) count as "i", as re.IGNORECASE has it.
    folded = "".join(
        char.lower() if char.isascii() else "i" if char in "\u0130\u0131" else char
        for char in stem
    )
    return folded in _DEVICES


def windows_reference(text: str, noun: str) -> str | None:
    if ":" in text:
        return f"{noun} contains a colon (an NTFS stream or drive)"
    for segment in text.split("/"):
        if segment.endswith(".") or segment.endswith(" "):
            return f"{noun} has a segment ending in a dot or a space"
        if is_device_reference(segment):
            return f"{noun} has a segment that is a Windows device name"
    return None


def glob_problem_reference(glob: str) -> str | None:
    problem = size_problem_reference(glob, "glob") or form_problem_reference(glob, "glob")
    if problem is not None:
        return problem
    problem = windows_reference(glob, "glob")
    if problem is not None:
        return problem
    problem = invisible_reference(glob, "glob")
    if problem is not None:
        return problem
    for segment in glob.split("/"):
        if "**" in segment and segment != "**":
            return "glob uses '**' inside a segment; it must be a whole segment"
    return None


def agree_on(text: str) -> None:
    for noun in ("path", "glob"):
        fast = paths._size_problem(text, noun) or paths._form_problem(text, noun)
        general = size_problem_reference(text, noun) or form_problem_reference(text, noun)
        assert fast == general, text
    expected = glob_problem_reference(text)
    assert paths._glob_problem(text) == expected
    assert paths._is_valid_glob.__wrapped__(text) is (expected is None)
    for _ in range(2):  # once to fill the memo, once from it
        if expected is None:
            assert validate_glob(text) is text
        else:
            with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
                validate_glob(text)


hostile_chars = st.sampled_from(
    [
        "a", "/", ".", " ", "*", "?", "\\", ":", "C", "\x00", "\x1f", "\x7f", "\x80", "\x9f",
        "\xa0", "\u2028", "\u2029", "\u202a", "\u202e", "\u202f", "\u2066", "\u2069", "\u206a",
        "\u200c", "\u200b", "\u00ad", "\u2060", "\U000e0041", "\ufeff", "e\u0301", "\u00e9",
        "\u034f", "\u3164", "\ufe0f", "\U000e0100", "\u180b", "\u17b4",
        "\u212b", "\ud800", "\udfff", "\U0001f600", "nul", "NuL", "con", "COM", "lpt", "1",
        "9", "0", "\u00b9", "\u00b3", "\u2074", "$", "conin$", "aux", "prn", "co\u0130n", "x",
    ]
)  # fmt: skip
hostile_text = st.lists(hostile_chars, max_size=12).map("".join)


@settings(max_examples=3000)
@given(st.one_of(hostile_text, st.text(max_size=20), globs))
def test_validation_agrees_with_the_general_rules(text: str) -> None:
    agree_on(text)


@pytest.mark.parametrize(
    "text",
    [
        "src/**",
        "a" * MAX_SEGMENT_BYTES,
        "a" * (MAX_SEGMENT_BYTES + 1),
        "é" * 128,
        "é" * 127 + "a",
        "/".join(["a" * 255] * 16),
        "a/" * 2048,
        "a" * MAX_PATH_BYTES,
        "a" * (MAX_PATH_BYTES + 1),
        "é" * (MAX_PATH_BYTES // 2 + 1),
        "C:/x",
        "src/\x1b[31m",
        "src/\u202eevil",
        "src/e\u0301",
        "src/\ud800",
        "a/**b",
        "a/***",
        "",
        "nul",
        "src/Nul.txt",
        "COM\u00b9.c",
        "com\u2074",
        "con x",
        "conin$ .x",
        "CON\u0130N$",
        "con\u0131n$.txt",
        "\u212aux",
        "a.",
        "a /b",
        "a::$DATA",
        "src/a:b",
        "nul.*",
        "con*",
    ],
)
def test_validation_examples(text: str) -> None:
    agree_on(text)


def test_a_str_subclass_is_checked_without_the_memo() -> None:
    class Sneaky(str):
        __hash__ = str.__hash__

    assert validate_glob(Sneaky("src/**")) == "src/**"
    with pytest.raises(ValueError, match="backslash"):
        validate_glob(Sneaky("src\\x"))
    with pytest.raises(ValueError, match="must be a string"):
        validate_glob(3)
    assert paths._is_valid_glob.__wrapped__(3) is False  # type: ignore[arg-type]


@settings(max_examples=1000)
@given(st.one_of(hostile_text, st.text(max_size=20)))
def test_path_validation_agrees(text: str) -> None:
    """validate_path reuses the same checks; its messages must not change."""
    expected = size_problem_reference(text, "path") or form_problem_reference(text, "path")
    try:
        validate_path(text)
    except paths.PathError as exc:
        if expected is not None:
            assert exc.code == "path_invalid"
            assert exc.message in (expected, f"{expected}: {text!r}")
        elif exc.code == "path_invalid":  # checked after the .git spellings
            windows = windows_reference(text, "path")
            invisible = invisible_reference(text, "path")
            if windows is not None:
                assert exc.message == f"{windows}: {text!r}"
            else:
                assert invisible is not None and exc.message == f"{invisible}: {ascii(text)}"
        else:
            assert exc.code == "path_forbidden"
    else:
        assert expected is None
