"""Tests for engine.paths: path validation, glob validation and per-segment scope matching.

Every refusal names the threat it stops. The reference for the `.git` spellings is
git's own verify_path(), is_ntfs_dotgit() (path.c) and is_hfs_dotgit() (utf8.c).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.errors import AccessDeniedError, InvalidRequestError
from engine.paths import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    glob_matches,
    in_scope,
    validate_glob,
    validate_path,
)

# --------------------------------------------------------------------------- valid paths

VALID_PATHS = [
    "README.md",
    "src/a.py",
    "src/deep/er/file.txt",
    ".gitignore",
    ".gitattributes",
    ".gitmodules",
    ".github/workflows/x.yml",
    ".git-blame-ignore-revs",
    "docs/.gitkeep",
    ".env",
    "..foo",  # starts with dots, is not made only of dots
    "foo..bar",
    "git",
    "git~x",
    "gitk~1",
    "x.git",
    ".gitx",
    "[abc]/{x,y}",  # brackets and braces are ordinary characters
    "caf\u00e9/\u65e5\u672c.txt",
    "with space/file name.txt",
    "con x",  # a device name followed by more than spaces is an ordinary name
    "conx/console.txt",
    "com10",  # only COM1 to COM9 are devices
    "lpt0",
    "nul_/nulls.c",
    "auxiliary.py",
    "a.b.c",
    " leading space",  # Win32 keeps leading spaces
    "x" * MAX_SEGMENT_BYTES,
    "/".join(["y" * 200] * 20),  # 4019 bytes
]


@pytest.mark.parametrize("path", VALID_PATHS)
def test_valid_paths_are_returned_unchanged(path: str) -> None:
    assert validate_path(path) is path


def test_limits_are_inclusive() -> None:
    longest = "/".join(["z" * 240] * 17)
    assert len(longest.encode()) == MAX_PATH_BYTES
    assert validate_path(longest) == longest
    assert validate_path("\u00e9" * (MAX_SEGMENT_BYTES // 2))  # 254 bytes


# --------------------------------------------------------------------------- path_invalid

INVALID_PATHS = [
    # (threat, path)
    ("type confusion: bytes are not a path", b"src/a.py"),
    ("type confusion: None", None),
    ("type confusion: list of segments", ["src", "a.py"]),
    ("type confusion: int", 7),
    ("empty path names the repository root", ""),
    ("length: path longer than 4096 UTF-8 bytes", "a/" * 2048 + "b"),
    ("length: multibyte characters counted in bytes", "\u00e9/" * 1365 + "xx"),
    ("length: segment longer than 255 bytes", "x" * 256),
    ("length: multibyte segment longer than 255 bytes", "\u00e9" * 128),
    ("host path: absolute path", "/etc/passwd"),
    ("host path: absolute path to the repository", "/src/a.py"),
    ("host path: drive prefix", "C:"),
    ("host path: drive-relative path", "C:foo"),
    ("host path: lower-case drive-relative path", "a:b"),
    ("host path: drive path", "c:/Windows/system32"),
    ("host path: UNC-like prefix", "//server/share"),
    ("separator confusion: backslash", "src\\a.py"),
    ("separator confusion: backslash traversal", "..\\etc\\passwd"),
    ("separator confusion: backslash to .git", ".git\\config"),
    ("NUL truncation: C truncates at NUL", "safe.txt\x00../../etc/passwd"),
    ("NUL truncation: trailing NUL", "a\x00"),
    ("control character: newline forges log lines", "a\nb"),
    ("control character: carriage return", "a\rb"),
    ("control character: tab", "a\tb"),
    ("control character: escape sequence", "a\x1b[31m"),
    ("control character: unit separator", "a\x1f"),
    ("control character: DEL", "a\x7fb"),
    ("empty segment: doubled separator", "a//b"),
    ("empty segment: trailing separator", "src/"),
    ("empty segment: lone separator", "/"),
    ("traversal: parent segment", "../etc/passwd"),
    ("traversal: parent segment in the middle", "src/../../x"),
    ("traversal: bare parent", ".."),
    ("traversal: parent at the end", "src/.."),
    ("prefix confusion: current-directory segment", "./src/a.py"),
    ("prefix confusion: inner current-directory segment", "src/./a.py"),
    ("prefix confusion: bare dot", "."),
    ("Windows traversal: '...' normalised to '..'", "a/.../b"),
    ("Windows traversal: '.. ' normalised to '..'", ".. /x"),
    ("Windows traversal: '. ' normalised to '.'", ". /x"),
    ("Windows traversal: blank segment", "a/ /b"),
    ("encoding: lone high surrogate", "a\ud800b"),
    ("encoding: lone low surrogate (surrogateescape byte)", "a\udcffb"),
    ("normalisation: NFD spelling of an NFC name (two paths for one name)", "docs/e\u0301.md"),
    ("normalisation: NFD segment in a folder", "re\u0301sume\u0301/a.py"),
    # Windows checkouts (git's core.protectNTFS, is_valid_win32_path()): a name
    # that opens a device or lands in another file than the one approved.
    ("Windows device: NUL", "nul"),
    ("Windows device: NUL with an extension", "nul.txt"),
    ("Windows device: mixed case with an extension", "src/Con.c"),
    ("Windows device: upper case folder", "AUX/x.py"),
    ("Windows device: PRN", "docs/prn.md"),
    ("Windows device: COM1", "COM1"),
    ("Windows device: COM9 with two extensions", "coM9.tar.gz"),
    ("Windows device: LPT1", "lpt1.log"),
    ("Windows device: superscript one is a digit to Windows", "COM\u00b9"),
    ("Windows device: superscript two", "lpt\u00b2.txt"),
    ("Windows device: superscript three", "a/Com\u00b3"),
    ("Windows device: CONIN$", "CONIN$"),
    ("Windows device: CONOUT$ with an extension", "conout$.x"),
    ("Windows device: spaces before the extension", "con .c"),
    ("Windows device: trailing spaces", "nul  "),
    ("Windows device: trailing dot", "aux."),
    ("Windows trailing dot: 'a.' is 'a'", "a."),
    ("Windows trailing dot: in a folder", "src./a.py"),
    ("Windows trailing space: 'a ' is 'a'", "a /b"),
    ("Windows trailing space: last segment", "src/a.py "),
    ("Windows trailing dots and spaces", "src/a.py. ."),
    ("NTFS stream: ::$DATA writes into the file", "src/a.py::$DATA"),
    ("NTFS stream: named stream", "src/a.py:hidden"),
    ("NTFS stream: on a folder", "src:x/a.py"),
    ("NTFS stream: colon past the second character", "ab:c"),
    ("NTFS stream: digit before the colon", "1:x"),
    ("order: invalid beats forbidden", ".git/../x"),
    ("order: backslash beats forbidden", ".git\\x"),
]


@pytest.mark.parametrize(
    ("threat", "path"), INVALID_PATHS, ids=[threat for threat, _ in INVALID_PATHS]
)
def test_invalid_paths_are_refused(threat: str, path: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        validate_path(path)
    assert caught.value.code == "path_invalid", threat


# --------------------------------------------------------------------------- path_forbidden

FORBIDDEN_PATHS = [
    # (threat, path) - every one would let a checkout write into the .git directory.
    ("overwrite .git: plain", ".git"),
    ("overwrite .git: config", ".git/config"),
    ("overwrite .git: hooks (code execution)", ".git/hooks/post-checkout"),
    ("overwrite .git: nested repository", "vendor/lib/.git/config"),
    ("overwrite .git: last segment", "sub/.git"),
    ("case-insensitive FS: upper case", ".GIT/config"),
    ("case-insensitive FS: mixed case", ".Git/hooks/pre-commit"),
    ("case-insensitive FS: mixed case 2", ".gIT"),
    ("NTFS: trailing dot", ".git."),
    ("NTFS: trailing dots", ".git.../config"),
    ("NTFS: trailing space", ".git "),
    ("NTFS: trailing dots and spaces", ".GiT . ./hooks/x"),
    ("NTFS: alternate data stream of .git", ".git::$INDEX_ALLOCATION/config"),
    ("NTFS: named stream", ".git:stream"),
    ("NTFS: 8.3 short name", "git~1/config"),
    ("NTFS: 8.3 short name, upper case", "GIT~1/hooks/x"),
    ("NTFS: 8.3 short name, trailing dot", "Git~1."),
    ("NTFS: 8.3 short name, other index", "git~2"),
    ("NTFS: 8.3 short name with stream", "git~1::$INDEX_ALLOCATION"),
    ("HFS+: zero width non-joiner", ".git\u200c/config"),
    ("HFS+: zero width joiner", ".git\u200d"),
    ("HFS+: left-to-right mark", ".git\u200e"),
    ("HFS+: right-to-left mark", ".git\u200f"),
    ("HFS+: word joiner", ".git\u2060"),
    ("HFS+: invisible plus", ".git\u2064"),
    ("HFS+: inhibit symmetric swapping", ".git\u206a"),
    ("HFS+: nominal digit shapes", ".git\u206f"),
    ("HFS+: byte order mark", "\ufeff.git/config"),
    ("HFS+: ignorable inside the name", ".g\u200ci\u200dt/hooks/x"),
    ("HFS+: ignorable and upper case", ".\u200cGIT"),
    ("HFS+ and NTFS mixed", ".GIT\u200c. "),
    ("Unicode case folding: dotless i upper-cases to I", ".g\u0131t"),
]


@pytest.mark.parametrize(
    ("threat", "path"), FORBIDDEN_PATHS, ids=[threat for threat, _ in FORBIDDEN_PATHS]
)
def test_dotgit_spellings_are_forbidden(threat: str, path: str) -> None:
    """Threat: overwriting the repository's .git through another spelling."""
    with pytest.raises(AccessDeniedError) as caught:
        validate_path(path)
    assert caught.value.code == "path_forbidden", threat


NOT_DOTGIT = [
    ".gitignore",
    ".gitmodules",
    ".github",
    ".git-credentials-example",
    ".git_",
    ".git~1",
    "git~",
    "git~1x",
    "git1",
    ".gi",
    ".gut",
    "x.git",
    ".g\u0147t",  # git's fsck test "allows .\\305\\207it" (N with caron is not an i)
]


@pytest.mark.parametrize("path", NOT_DOTGIT)
def test_lookalikes_that_are_not_dotgit_are_allowed(path: str) -> None:
    assert validate_path(path) == path


# --------------------------------------------------------------------------- messages


def test_messages_echo_at_most_the_offending_path() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        validate_path("a\x00b")
    message = caught.value.message
    assert "\x00" not in message  # repr() escapes control characters
    assert "'a\\x00b'" in message
    assert caught.value.to_dict() == {"error": "path_invalid", "message": message}


def test_oversized_path_is_not_echoed() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        validate_path("q" * 10_000)
    assert "q" not in caught.value.message


def test_non_string_is_not_echoed() -> None:
    secret = b"chit_SECRET-TOKEN-BYTES"
    with pytest.raises(InvalidRequestError) as caught:
        validate_path(secret)
    assert "SECRET" not in caught.value.message
    assert "SECRET" not in repr(caught.value)


INVISIBLE = [
    ("zero width space, not HFS+-ignorable so not .git", ".git\u200b"),
    ("zero width space: displays as deploy/x", "deploy\u200b/x"),
    ("soft hyphen", "src/ap\u00adp.py"),
    ("word joiner", "src/\u2060app.py"),
    ("zero width non-joiner", "src/.e\u200cnv"),
    ("byte order mark", "\ufeffREADME.md"),
    ("tag characters: text no reader sees", "notes/a\U000e0069\U000e0067\U000e006e.md"),
    ("Arabic letter mark", "docs/x\u061c.md"),
    ("combining grapheme joiner", "src/x\u034fy.py"),
    ("Hangul filler", "src/\u3164/a.py"),
    ("halfwidth Hangul filler", "src/a\uffa0.py"),
    ("variation selector", "src/a\ufe0f.py"),
    ("variation selector supplement", "src/a\U000e0100.py"),
    ("Mongolian free variation selector", "src/a\u180b.py"),
    ("Khmer inherent vowel", "src/a\u17b4.py"),
]


@pytest.mark.parametrize(("threat", "path"), INVISIBLE, ids=[t for t, _ in INVISIBLE])
def test_invisible_format_characters_are_refused(threat: str, path: str) -> None:
    """Threat: a path that displays as another to an approver, an auditor or a policy author."""
    with pytest.raises(InvalidRequestError) as caught:
        validate_path(path)
    assert caught.value.code == "path_invalid", threat
    assert "invisible format character" in caught.value.message
    assert not any(ch in caught.value.message for ch in path if not ch.isascii())
    with pytest.raises(ValueError, match="invisible format character"):
        validate_glob(path)


def test_visible_non_ascii_names_stay_allowed() -> None:
    for path in ("docs/caf\u00e9.md", "src/\u65e5\u672c.py", "x/\U0001f600.txt", "a\u00a0b"):
        assert validate_path(path) == path
        assert validate_glob(path) == path


def test_forbidden_message_escapes_invisible_characters() -> None:
    with pytest.raises(AccessDeniedError) as caught:
        validate_path(".git\u200d")
    assert "\u200d" not in caught.value.message


# --------------------------------------------------------------------------- globs

VALID_GLOBS = [
    "**",
    "src/**",
    "**/*.py",
    "a/**/b",
    "**/**",
    "src/*.py",
    "src/?.py",
    "*",
    "?",
    "*a*a*a*b",
    "[abc]",  # literal brackets
    "{a,b}/x",  # literal braces
    "!x",  # literal bang
    ".github/workflows/*.yml",
    ".git/**",  # valid, but it matches nothing: no valid path names .git
    "con*",  # matches "console", not only a device name
    "**/nul_*",
]


@pytest.mark.parametrize("glob", VALID_GLOBS)
def test_valid_globs_are_returned_unchanged(glob: str) -> None:
    assert validate_glob(glob) is glob


INVALID_GLOBS = [
    ("type confusion: bytes", b"src/**"),
    ("type confusion: None", None),
    ("empty glob", ""),
    ("length: longer than 4096 bytes", "a/" * 2048 + "b"),
    ("length: segment longer than 255 bytes", "*" + "x" * 255),
    ("host path: absolute", "/src/**"),
    ("host path: drive prefix", "C:/**"),
    ("separator confusion: backslash", "src\\**"),
    ("NUL truncation", "src/\x00"),
    ("control character", "src/\n"),
    ("DEL", "src/\x7f"),
    ("empty segment", "src//x"),
    ("trailing separator", "src/"),
    ("traversal: parent segment", "src/../**"),
    ("traversal: leading parent", "../**"),
    ("prefix confusion: dot segment", "./src/**"),
    ("Windows traversal: dots and spaces", ".../**"),
    ("double star inside a segment: suffix", "a**"),
    ("double star inside a segment: prefix", "**b"),
    ("double star inside a segment: triple", "***"),
    ("double star inside a segment: middle", "src/a**b/c"),
    ("encoding: lone surrogate", "\ud800/**"),
    ("Windows device: matches only device names", "src/nul.*"),
    ("Windows device: upper case", "**/CON"),
    ("Windows trailing dot", "src/*."),
    ("Windows trailing space", "src /**"),
    ("NTFS stream", "**/*::$DATA"),
    ("NTFS stream: named", "src/*:x"),
]


@pytest.mark.parametrize(
    ("threat", "glob"), INVALID_GLOBS, ids=[threat for threat, _ in INVALID_GLOBS]
)
def test_invalid_globs_raise_value_error(threat: str, glob: object) -> None:
    with pytest.raises(ValueError, match=r".") as caught:
        validate_glob(glob)
    # The reason is short and does not repeat the (possibly attacker-built) glob.
    assert len(str(caught.value)) < 100, threat
    if isinstance(glob, str) and len(glob) > 3:
        assert glob not in str(caught.value), threat


# --------------------------------------------------------------------------- matching table

MATCH_TABLE = [
    # (glob, path, expected)
    ("src/**", "src/a.py", True),
    ("src/**", "src/x/y.py", True),
    ("src/**", "src", False),  # decision: the folder's contents, not the name itself
    ("src/**", "src_old/a.py", False),  # prefix confusion
    ("src/**", "srcx", False),  # prefix confusion
    ("src/**", "srcx/a.py", False),  # prefix confusion
    ("src/**", "x/src/a.py", False),  # anchored at the root
    ("src/**", "SRC/a.py", False),  # matching is case-sensitive (git object space)
    ("**", "a", True),
    ("**", "a/b/c/d", True),
    ("**", ".github/workflows/x.yml", True),
    ("**/**", "a", True),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/x/a.py", False),  # * never crosses /
    ("src/*.py", "src/.py", True),  # * matches zero characters
    ("src/*.py", "src/a.pyc", False),
    ("src/*", "src/.env", True),  # * matches a leading dot
    ("src/*", "src/x/y", False),
    ("src/*", "src", False),
    ("src/?.py", "src/a.py", True),
    ("src/?.py", "src/ab.py", False),
    ("src/?.py", "src/.py", False),  # ? is exactly one character
    ("src/?.py", "src/\u00e9.py", True),  # one code point, not one byte
    ("src/?", "src/a/b", False),  # ? never matches /
    ("?", "a", True),
    ("**/*.py", "a.py", True),  # leading ** matches zero segments
    ("**/*.py", "a/b/c.py", True),
    ("**/*.py", "a/b/c.pyx", False),
    ("a/**/b", "a/b", True),  # inner ** matches zero segments
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/x/y/bb", False),
    ("a/**/b", "ab", False),
    ("a/**/b/**", "a/b", False),  # trailing ** needs at least one segment
    ("a/**/b/**", "a/x/b/c", True),
    ("a/**/**", "a/x", True),
    ("a/**/**", "a", False),
    ("*/b", "a/b", True),
    ("*/b", "a/x/b", False),
    ("[ab]/x", "[ab]/x", True),  # [ is literal
    ("[ab]/x", "a/x", False),
    ("{a,b}", "a", False),  # { is literal
    ("{a,b}", "{a,b}", True),
    ("a*", "a", True),
    ("*a*b*", "xaybz", True),
    ("*a*b*", "xbyaz", False),
    ("docs/README.md", "docs/README.md", True),
    ("docs/README.md", "docs/README.mdx", False),
    ("docs/README.md", "docs", False),
    (".github/workflows/*.yml", ".github/workflows/ci.yml", True),
    # fail closed: invalid paths and globs never match, whatever the glob
    ("**", ".git/config", False),
    ("**", "src/../x", False),
    ("src/**", "src/../etc/passwd", False),
    ("**", "/etc/passwd", False),
    ("**", "", False),
    ("a**", "ab", False),
    ("src/../**", "x", False),
]


@pytest.mark.parametrize(("glob", "path", "expected"), MATCH_TABLE)
def test_glob_semantics(glob: str, path: str, expected: bool) -> None:
    assert glob_matches(glob, path) is expected


def test_in_scope_is_any_glob() -> None:
    assert in_scope("src/a.py", ["docs/**", "src/**"])
    assert in_scope("docs/x.md", ("docs/**",))
    assert not in_scope("src_old/a.py", ["src/**", "docs/**"])
    assert not in_scope("src/a.py", [])  # an empty scope grants nothing
    assert not in_scope(".git/config", ["**"])
    assert not in_scope("a/../b", ["**"])
    assert in_scope("src/a.py", ["a**", "src/**"])  # a malformed glob is skipped


def test_in_scope_refuses_a_single_string_as_the_glob_list() -> None:
    # Iterating "src/**" would try "*" as a glob and widen the scope.
    with pytest.raises(TypeError):
        in_scope("top.py", "src/**")


# --------------------------------------------------------------------------- properties

SEGMENT_ALPHABET = "ab.-_ \u00e9\u65e5"
segment_strategy = st.text(alphabet=SEGMENT_ALPHABET, min_size=1, max_size=6)


def _is_valid(path: str) -> bool:
    try:
        validate_path(path)
    except (InvalidRequestError, AccessDeniedError):
        return False
    return True


path_strategy = st.lists(segment_strategy, min_size=1, max_size=6).map("/".join).filter(_is_valid)
small_path_strategy = (
    st.lists(st.text(alphabet="ab", min_size=1, max_size=2), min_size=1, max_size=5)
    .map("/".join)
    .filter(_is_valid)
)
glob_segment_strategy = st.one_of(
    st.just("**"),
    st.text(alphabet="ab*?", min_size=1, max_size=4).filter(lambda s: "**" not in s),
)
glob_strategy = st.lists(glob_segment_strategy, min_size=1, max_size=5).map("/".join)


def _reference_matches(glob: str, path: str) -> bool:
    """An independent oracle: translate the glob to a regex (fine for tiny inputs)."""
    segments = glob.split("/")
    parts = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".+" if last else "(?:[^/]+/)*")
            continue
        body = "".join(
            "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
            for char in segment
        )
        parts.append(body if last else body + "/")
    return re.fullmatch("".join(parts), path) is not None


@given(path_strategy)
def test_double_star_matches_every_valid_path(path: str) -> None:
    assert glob_matches("**", path)
    assert in_scope(path, ["**"])


@given(path_strategy, path_strategy)
def test_glob_without_wildcards_matches_exactly_itself(glob: str, path: str) -> None:
    assume("*" not in glob and "?" not in glob)
    assert validate_glob(glob) == glob
    assert glob_matches(glob, glob)
    assert glob_matches(glob, path) is (glob == path)


@given(small_path_strategy, small_path_strategy)
def test_literal_glob_on_colliding_paths(glob: str, path: str) -> None:
    # A tiny alphabet makes equal and prefix-related pairs frequent.
    assert glob_matches(glob, path) is (glob == path)


@given(path_strategy)
def test_a_double_star_never_leaves_the_first_segment(path: str) -> None:
    first, _, rest = path.partition("/")
    assert glob_matches("a/**", path) is (first == "a" and rest != "")


@given(glob_strategy, small_path_strategy)
@settings(max_examples=500)
def test_matcher_agrees_with_a_regex_oracle(glob: str, path: str) -> None:
    assert glob_matches(glob, path) is _reference_matches(glob, path)


@given(path_strategy, path_strategy)
def test_matching_respects_segment_boundaries(prefix: str, path: str) -> None:
    # prefix/** matches exactly the paths strictly below prefix/.
    expected = path.startswith(prefix + "/")
    assert glob_matches(prefix + "/**", path) is expected


# --------------------------------------------------------------------------- complexity
# No timing asserts: these inputs make a backtracking glob matcher (recursive, or a
# naive glob-to-regex translation) run for hours or more, so the suite would hang
# rather than pass if the matcher were not polynomial.


def _checked_match(glob: str, path: str) -> bool:
    # glob_matches fails closed, so a "no match" on an invalid input would prove nothing.
    assert validate_glob(glob) == glob
    assert validate_path(path) == path
    return glob_matches(glob, path)


def test_pathological_star_segment_is_polynomial() -> None:
    pattern = "*a" * 120 + "*b"  # 241 bytes, one segment
    subject = "a" * MAX_SEGMENT_BYTES
    assert not _checked_match(pattern, subject)
    assert _checked_match(pattern, subject[:-1] + "b")


def test_pathological_star_segments_over_many_segments_are_polynomial() -> None:
    pattern = "*a" * 60 + "*b"
    glob = "/".join(["**", pattern] * 16)[:MAX_PATH_BYTES].rsplit("/", 1)[0]
    path = "/".join(["a" * 240] * 16)
    assert not _checked_match(glob, path)


def test_many_double_stars_are_polynomial() -> None:
    glob = "**/a/" * 600 + "b"  # 3001 bytes, 600 double stars
    path = "/".join(["a"] * 2000)  # 3999 bytes
    assert not _checked_match(glob, path)
    assert _checked_match(glob, "/".join(["a"] * 1999 + ["b"]))


def test_long_literal_run_after_double_star_is_polynomial() -> None:
    glob = "**/" + "a/" * 1000 + "b"
    path = "/".join(["a"] * 2040)
    assert not _checked_match(glob, path)
    assert _checked_match(glob, "/".join(["a"] * 2039 + ["b"]))


def test_many_distinct_wildcard_segments_are_polynomial() -> None:
    names = [f"{chr(0x4E00 + index)}?" for index in range(300)]
    glob = "**/" + "/**/".join(names)
    path = "/".join(f"{chr(0x4E00 + index % 301)}x" for index in range(700))  # 3499 bytes
    assert not _checked_match(glob, path)


@pytest.mark.parametrize("path", [".git\u202a", ".git\u202e", "src/\u2066x", "a\u202eb.py"])
def test_bidi_controls_are_invalid_everywhere(path: str) -> None:
    """Threat: "Trojan source" names that display differently from what they are,
    including HFS+-ignorable bidi spellings of .git."""
    with pytest.raises(InvalidRequestError) as caught:
        validate_path(path)
    assert caught.value.code == "path_invalid"


class _SneakyStr(str):
    """A str subclass whose equality says it is any other string."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("src/ok.py")


def test_remembered_paths_never_change_an_answer() -> None:
    """Accepted paths are remembered; a refusal is refused again, a str subclass rechecked."""
    assert validate_path("src/ok.py") == "src/ok.py"
    assert validate_path("src/ok.py") == "src/ok.py"
    for _ in range(2):
        with pytest.raises(AccessDeniedError):
            validate_path("src/.git/config")
        with pytest.raises(InvalidRequestError):
            validate_path("src/../etc")
    # Equal and same hash as a remembered path, but checked on its own content.
    with pytest.raises(AccessDeniedError):
        validate_path(_SneakyStr(".git/hooks/pre-commit"))
