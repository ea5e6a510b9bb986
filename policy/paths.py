"""Repository paths and scope globs: validation and per-segment matching (pure, no I/O).

:func:`validate_path` follows git's own ``verify_path()`` and its NTFS and HFS+
``.git`` rules, a little stricter where that costs nothing; globs match one path
segment at a time, never as a string, without backtracking; :func:`deny_matches`
also folds spellings. Results are memoised, decisions never. The rules:
docs/token-format.md, "Paths and globs"; deny-side folding: docs/policy.md.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

from policy.segments import run_automaton, segment_contained, segment_matches

__all__ = [
    "MAX_PATH_BYTES",
    "MAX_SEGMENT_BYTES",
    "PathError",
    "deny_matches",
    "fold_path",
    "glob_contained",
    "glob_matches",
    "glob_may_match_below",
    "in_scope",
    "validate_glob",
    "validate_path",
]

MAX_PATH_BYTES = 4096
"""Longest path or glob accepted, in UTF-8 bytes (git's ``PATH_MAX`` on Linux)."""

MAX_SEGMENT_BYTES = 255
"""Longest single segment accepted, in UTF-8 bytes (``NAME_MAX`` on common filesystems)."""

_SEP = "/"
_DOUBLE_STAR = "**"
_STAR = "*"
_ANY_ONE = "?"

# Code points HFS+ ignores when it compares names, so ".g\u200cit" names the same
# directory as ".git". git's next_hfs_char() skips U+200C-200F, U+202A-202E,
# U+206A-206F and U+FEFF; U+2060-2064 (word joiner and invisible operators) are
# added here as well, because they are just as invisible.
_HFS_IGNORABLE = frozenset(
    chr(code)
    for first, last in (
        (0x200C, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x206A, 0x206F),
        (0xFEFF, 0xFEFF),
    )
    for code in range(first, last + 1)
)

# Bidirectional embedding, override and isolate controls (Unicode TR9): U+202A
# to U+202E and U+2066 to U+2069.
_BIDI_CONTROL = re.compile("[\\u202a-\\u202e\\u2066-\\u2069]")
# C0 controls, DEL and the C1 controls: ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F.
_CONTROL = re.compile("[\\x00-\\x1f\\x7f-\\x9f]")

# Applied to a segment after _fold_for_dotgit(): ".git" or an 8.3 short name
# "git~N", then only dots and spaces (NTFS drops them), then either the end or an
# NTFS alternate data stream (".git::$INDEX_ALLOCATION" is the .git directory).
# This is is_ntfs_dotgit(), which also stops at ':'; it accepts any digits after
# "git~" where git checks only "git~1". The pattern cannot backtrack badly:
# "[. ]*" is followed by ':' or the end, neither of which it can consume.
_DOTGIT = re.compile(r"(?:\.git|git~[0-9]+)[. ]*(?::.*)?", re.DOTALL)

# Applied to one segment: a Windows device name (git's is_valid_win32_path()):
# CON, PRN, AUX, NUL, COM1-9, LPT1-9 (Windows also reads the ISO 8859-1
# superscripts U+00B9, U+00B2 and U+00B3 as digits there), CONIN$ and CONOUT$, in
# any case, then only spaces, then the end, an extension or a stream (``nul.txt``
# and ``Con .c`` open the device too). No bad backtracking: " *" is followed by
# '.', ':' or the end, none of which it can consume.
_WINDOWS_DEVICE = re.compile(
    r"(?:con|prn|aux|nul|(?:com|lpt)[1-9\u00b9\u00b2\u00b3]|conin\$|conout\$) *(?:[.:].*)?",
    re.IGNORECASE | re.DOTALL,
)


def _fold_char(char: str) -> str:
    """Lower-case one character, mapping non-ASCII look-alikes onto ASCII letters.

    git compares ASCII only. Filesystems may fold case with Unicode tables, in which
    U+0131 (dotless i) upper-cases to ``I``, U+017F (long s) to ``S`` and U+212A
    (Kelvin sign) lower-cases to ``k``; those are folded too, so ``.git`` spelt
    with a dotless i is refused.
    """
    if char.isascii():
        return char.lower()
    for variant in (char.upper(), char.lower()):
        if len(variant) == 1 and variant.isascii():
            return variant.lower()
    return char


def _fold_for_dotgit(segment: str) -> str:
    """Drop HFS+ ignorable code points and fold case, as the filesystems would."""
    return "".join(_fold_char(char) for char in segment if char not in _HFS_IGNORABLE)


def _is_dotgit(segment: str) -> bool:
    r"""Whether a checkout of ``segment`` could land in a ``.git`` directory.

    The union of git's ``is_hfs_dotgit()`` (case-insensitive ``.git`` with ignorable
    code points anywhere) and ``is_ntfs_dotgit()`` (``.git`` or ``git~1``, then dots
    and spaces, then the end or ``:``), applied together so mixed spellings such as
    ``.GIT\u200c.`` are caught as well.
    """
    return _DOTGIT.fullmatch(_fold_for_dotgit(segment)) is not None


def _windows_problem(text: str, noun: str) -> str | None:
    """Return why ``text`` names something else on a Windows checkout, or None.

    Checked on a well-formed ``text`` (see :func:`_form_problem`), after the
    ``.git`` spellings (so ``.git.`` stays ``path_forbidden``). As git's
    ``core.protectNTFS`` and ``is_valid_win32_path()``: a colon anywhere (an NTFS
    alternate data stream such as ``a::$DATA`` or ``a:stream``, which writes into
    ``a``), a segment ending in a dot or a space (Win32 drops them, so ``a.``
    and ``a `` are ``a``), a Windows device name with or without an extension
    (``NUL``, ``nul.txt``, ``Con .c``, ``COM\u00b9``).
    """
    if ":" in text:
        return f"{noun} contains a colon (an NTFS stream or drive)"
    for segment in text.split(_SEP):
        if segment[-1:] in (".", " "):
            return f"{noun} has a segment ending in a dot or a space"
        if _WINDOWS_DEVICE.fullmatch(segment) is not None:
            return f"{noun} has a segment that is a Windows device name"
    return None


def _size_problem(text: str, noun: str) -> str | None:
    """Return why ``text`` is empty or too long as a whole, or None.

    Checked before anything that would repeat ``text`` in a message, so an
    oversized value is never echoed back.
    """
    if not text:
        return f"{noun} is empty"
    # len() first: a cheap guard before encoding a huge string (ASCII text is as
    # long in UTF-8). "surrogatepass" only measures here; lone surrogates are
    # refused by _form_problem().
    if len(text) > MAX_PATH_BYTES or (
        not text.isascii() and len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES
    ):
        return f"{noun} is longer than {MAX_PATH_BYTES} bytes"
    return None


def _form_problem(text: str, noun: str) -> str | None:
    """Return why a non-empty, bounded ``text`` is not a well-formed relative name, or None.

    Checks the whole string (encoding, absolute or drive-like prefixes,
    backslashes, control characters), then every segment. ASCII text skips the
    checks it passes by construction: it encodes, holds no separator or
    bidirectional control beyond ASCII, and is NFC.
    """
    ascii_only = text.isascii()
    if not ascii_only:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return f"{noun} is not valid UTF-8 (lone surrogate)"
    if text.startswith(_SEP):
        return f"{noun} is absolute"
    if len(text) >= 2 and text[0].isascii() and text[0].isalpha() and text[1] == ":":
        return f"{noun} has a drive prefix"  # git's has_dos_drive_prefix()
    if "\\" in text:
        return f"{noun} contains a backslash"  # a separator on Windows checkouts
    if _CONTROL.search(text) is not None:
        return f"{noun} contains a control character"  # NUL truncation, log forging
    if not ascii_only:
        if "\u2028" in text or "\u2029" in text:
            return f"{noun} contains a line or paragraph separator"  # log forging
        if _BIDI_CONTROL.search(text) is not None:
            # "Trojan source" (CVE-2021-42574): text that displays in another order.
            return f"{noun} contains a bidirectional control character"
        if not unicodedata.is_normalized("NFC", text):
            # Two spellings of one name (macOS writes NFD); provenance records hold NFC text.
            return f"{noun} is not in Unicode NFC form"
    for segment in text.split(_SEP):
        problem = _segment_problem(segment, noun, ascii_only)
        if problem is not None:
            return problem
    return None


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt) beyond
# category Cf: code points a renderer shows as nothing (combining grapheme
# joiner, Hangul fillers, Khmer inherent vowels, Mongolian variation selectors,
# variation selectors, and the reserved ignorables).
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0"
    "\ufff0-\ufff8\U000e0000-\U000e0fff]"
)


def _invisible_problem(text: str, noun: str) -> str | None:
    """Return why ``text`` holds a character that displays as nothing, or None.

    Refused: Unicode category Cf (zero-width spaces and joiners, soft hyphens,
    word joiners, byte order marks, tag characters) and every other
    Default_Ignorable_Code_Point (combining grapheme joiner, Hangul fillers,
    variation selectors). ``deploy\u200b/x`` reads as ``deploy/x`` to an
    approver or an auditor while being another folder. Checked after the
    ``.git`` spellings (so ``.git\u200c`` stays ``path_forbidden``);
    bidirectional controls, also Cf, are refused earlier with their own reason.
    """
    if text.isascii():
        return None
    for char in text:
        if unicodedata.category(char) == "Cf" or _IGNORABLE.match(char):
            return f"{noun} contains an invisible format character (U+{ord(char):04X})"
    return None


def _segment_problem(segment: str, noun: str, ascii_only: bool = False) -> str | None:
    """Return why one segment is not acceptable, or None if it is.

    ``ascii_only`` says the segment is ASCII (so as long in UTF-8 as in characters).
    """
    if not segment:
        return f"{noun} has an empty segment"
    if segment in (".", ".."):
        return f"{noun} has a '{segment}' segment"
    if not segment.strip(". "):
        # Win32 drops trailing dots and spaces, so "... " or ".. " becomes ".."
        # on a Windows checkout (git for Windows refuses such names too).
        return f"{noun} has a segment made only of dots and spaces"
    size = len(segment) if ascii_only else len(segment.encode("utf-8"))
    if size > MAX_SEGMENT_BYTES:
        return f"{noun} has a segment longer than {MAX_SEGMENT_BYTES} bytes"
    return None


class PathError(ValueError):
    """A path that is invalid (``path_invalid``) or names ``.git`` (``path_forbidden``).

    Attributes:
        code: ``path_invalid`` or ``path_forbidden``.
        message: Caller-safe reason (the path is shown via ``repr`` at most).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def validate_path(path: object) -> str:
    r"""Check a repository path named by an agent and return it unchanged.

    The rules follow git's ``verify_path()``: a relative, ``/``-separated name with
    no empty, ``.`` or ``..`` segment, and no segment that any filesystem could
    resolve to ``.git``. They are stricter than git where that costs nothing: a
    backslash, a control character, a segment made only of dots and spaces, and
    every ``.git`` spelling of ``is_ntfs_dotgit()`` and ``is_hfs_dotgit()`` are
    refused on every platform, and in every segment, not only the first; so are
    the names a Windows checkout would read as another file or a device
    (git for Windows' ``is_valid_win32_path()``), on every platform.

    ``.gitignore``, ``.gitattributes``, ``.gitmodules`` and ``.github/...`` are
    ordinary paths.

    Args:
        path: The candidate, as received from the caller (any type). A valid path
            is a ``str`` of 1 to :data:`MAX_PATH_BYTES` UTF-8 bytes whose segments
            are 1 to :data:`MAX_SEGMENT_BYTES` bytes each.

    Returns:
        ``path`` itself, unchanged (never normalised).

    Raises:
        PathError: ``path_invalid`` if ``path`` is not a ``str``; is
            empty; is too long (whole or one segment, in UTF-8 bytes); does not
            encode to UTF-8 (lone surrogates); is absolute (leading ``/``); starts
            with a drive prefix (``C:``); contains a backslash, NUL, another C0
            control character or DEL; is not in Unicode NFC form; or has an
            empty (``a//b``, trailing ``/``),
            ``.``, ``..`` or dots-and-spaces-only segment. These are checked
            first, over the whole path. After the ``.git`` spellings, also
            ``path_invalid``: a name that means something else on a Windows
            checkout (``core.protectNTFS``): a colon (``a::$DATA``,
            ``a:stream``), a segment ending in a dot or a space, a device name
            (``CON``, ``PRN``, ``AUX``, ``NUL``, ``COM1``-``COM9``,
            ``LPT1``-``LPT9``, also with a superscript digit, ``CONIN$``,
            ``CONOUT$``; any case, with or without an extension: ``nul.txt``);
            then an invisible format character.
        PathError: ``path_forbidden`` if the path is well formed but one
            of its segments names ``.git`` in any spelling: any letter case, with
            trailing dots or spaces or an NTFS stream suffix (``.git.``,
            ``.git ``, ``.git::$INDEX_ALLOCATION``), as an 8.3 short name
            (``git~1``), or with HFS+ ignorable code points anywhere in it
            (``.git\u200c``).

    """
    if not isinstance(path, str):
        raise PathError("path_invalid", "path must be a string")
    if type(path) is str:  # exactly str: its hash and equality are the built-in ones
        _accepted_path(path)
    else:
        _check_path(path)
    return path


@functools.lru_cache(maxsize=4096)
def _accepted_path(path: str) -> None:
    """:func:`_check_path`, remembered for paths that passed (a refusal is not kept).

    The same few paths come back on almost every call; the check is pure, and
    at most 4,096 of at most :data:`MAX_PATH_BYTES` bytes each are kept.
    """
    _check_path(path)


def _check_path(path: str) -> None:
    problem = _size_problem(path, "path")
    if problem is not None:
        raise PathError("path_invalid", problem)
    problem = _form_problem(path, "path")
    if problem is not None:
        # repr() escapes control characters and lone surrogates.
        raise PathError("path_invalid", f"{problem}: {path!r}")
    if any(_is_dotgit(segment) for segment in path.split(_SEP)):
        raise PathError("path_forbidden", f"path names the .git directory: {path!r}")
    problem = _windows_problem(path, "path")
    if problem is not None:
        raise PathError("path_invalid", f"{problem}: {path!r}")
    problem = _invisible_problem(path, "path")
    if problem is not None:
        # ascii(): repr() leaves printable-but-invisible characters (U+3164) as they are.
        raise PathError("path_invalid", f"{problem}: {path!a}")


def validate_glob(glob: object) -> str:
    """Check a scope glob and return it unchanged.

    A glob obeys the segment rules of :func:`validate_path` (relative,
    ``/``-separated, no empty, ``.``, ``..`` or dots-and-spaces-only segment, no
    backslash, no control character, no colon, no segment ending in a dot or a
    space or naming a Windows device such as ``nul.*``, same size limits). In addition a segment
    containing ``**`` must be exactly ``**`` (``a**``, ``**b`` and ``***`` are
    refused). ``*`` and ``?`` may appear anywhere else; every other character,
    including ``[`` and ``{``, is literal. A glob may name ``.git``; it then
    matches nothing, because no valid path names ``.git``.

    Args:
        glob: The candidate, as found in a token caveat or a policy (any type).

    Returns:
        ``glob`` itself, unchanged.

    Raises:
        ValueError: If ``glob`` is not a valid glob; the message is a short,
            caller-safe reason that does not repeat the glob (the token layer maps
            it to ``caveat_malformed``).

    """
    if not isinstance(glob, str):
        raise ValueError("glob must be a string")
    # An exact str's verdict is memoised (_is_valid_glob, bounded like the globs
    # it keeps); the reason is found again only for a glob that fails.
    if type(glob) is str and len(glob) <= MAX_PATH_BYTES and _is_valid_glob(glob):
        return glob
    problem = _glob_problem(glob)
    if problem is not None:
        raise ValueError(problem)
    return glob


def _glob_problem(glob: str) -> str | None:
    """Return why ``glob`` is not a valid glob (see :func:`validate_glob`), or None."""
    problem = (_size_problem(glob, "glob") or _form_problem(glob, "glob")
               or _windows_problem(glob, "glob") or _invisible_problem(glob, "glob"))
    if problem is not None:
        return problem
    for segment in glob.split(_SEP):
        if _DOUBLE_STAR in segment and segment != _DOUBLE_STAR:
            return "glob uses '**' inside a segment; it must be a whole segment"
    return None


@functools.lru_cache(maxsize=16384)
def _is_valid_path(path: str) -> bool:
    """Whether :func:`validate_path` accepts ``path`` (used to fail closed)."""
    try:
        validate_path(path)
    except PathError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _is_valid_glob(glob: str) -> bool:
    """Whether :func:`validate_glob` accepts ``glob`` (used to fail closed)."""
    return isinstance(glob, str) and _glob_problem(glob) is None


@functools.lru_cache(maxsize=65536)
def _match(glob: str, path: str) -> bool:
    """Match a validated glob against a validated path (see :func:`glob_matches`).

    Two common shapes are answered directly, exactly as the automaton of
    :func:`_match_segments` would answer them for any strings: a glob without
    wildcards matches only itself, and ``lit/eral/**`` (wildcards only in the
    trailing ``**``) matches what starts with ``lit/eral/`` (``**`` alone
    matches everything).
    """
    if _STAR not in glob and _ANY_ONE not in glob:
        return glob == path
    head, sep, last = glob.rpartition(_SEP)
    if last == _DOUBLE_STAR and _STAR not in head and _ANY_ONE not in head:
        return path.startswith(head + _SEP) if sep else True
    return _match_segments(glob, path)


def _match_segments(glob: str, path: str) -> bool:
    """:func:`_match` by the segment automaton, for every glob shape."""
    pattern = glob.split(_SEP)
    if pattern[-1] == _DOUBLE_STAR:
        # A trailing "**" needs at least one segment: "x/**" == "x/*/**".
        pattern.insert(len(pattern) - 1, _STAR)
    segments = path.split(_SEP)

    positions: dict[str, int] = {}
    for index, segment in enumerate(segments):
        positions[segment] = positions.get(segment, 0) | (1 << index)
    masks: dict[str, int] = {}

    def mask_of(element: str) -> int:
        mask = masks.get(element)
        if mask is None:
            if _STAR not in element and _ANY_ONE not in element:
                mask = positions.get(element, 0)
            else:
                # One segment match per distinct (pattern, segment) pair.
                mask = 0
                for segment, where in positions.items():
                    if segment_matches(element, segment):
                        mask |= where
            masks[element] = mask
        return mask

    return run_automaton(pattern, len(segments), _DOUBLE_STAR, mask_of)


def glob_matches(glob: str, path: str) -> bool:
    """Whether a scope glob matches a repository path, one whole segment at a time.

    ``*`` and ``?`` never cross ``/``; ``**`` matches zero or more whole segments,
    and a trailing ``**`` one or more. So ``src/**`` matches ``src/a.py`` and
    ``src/x/y.py`` but neither ``src`` itself (a file named ``src`` is not inside
    the folder), nor ``src_old/a.py``, nor ``srcx``; ``src/*.py`` matches
    ``src/a.py`` but not ``src/x/a.py``; ``a/**/b`` matches ``a/b``; ``**`` alone
    matches every valid path.

    Fails closed: an invalid glob matches nothing and an invalid or forbidden path
    (see :func:`validate_path`) is matched by nothing, so a caller that forgot to
    validate cannot widen a scope with ``src/../x`` or reach ``.git``.

    Args:
        glob: A scope glob (see :func:`validate_glob`).
        path: A repository path (see :func:`validate_path`).

    Returns:
        True if ``glob`` matches all of ``path``.

    """
    return _is_valid_path(path) and _is_valid_glob(glob) and _match(glob, path)


def in_scope(path: str, globs: Sequence[str]) -> bool:
    """Whether ``path`` lies inside a scope given as a list of globs.

    Args:
        path: A repository path (see :func:`validate_path`).
        globs: The scope's globs; an empty sequence is an empty scope.

    Returns:
        True iff at least one glob matches ``path`` (see :func:`glob_matches`;
        an invalid path or glob never matches).

    Raises:
        TypeError: If ``globs`` is a single ``str``: iterating it would test each
            character as a glob (``"src/**"`` would become ``*``, a wider scope).

    """
    if isinstance(globs, str):
        raise TypeError("globs must be a sequence of globs, not a single string")
    if not _is_valid_path(path):
        return False
    return any(_is_valid_glob(glob) and _match(glob, path) for glob in globs)


@functools.lru_cache(maxsize=16384)
def fold_path(path: str) -> str:
    """Map a path to the name a case-insensitive, NTFS or HFS+ checkout would use.

    Per segment: NFKC-normalised and case-folded (Unicode full case folding),
    HFS+ ignorable code points dropped, case folded again (with the
    ASCII look-alikes of :func:`_fold_char`), NFC-normalised (folding can
    decompose), an NTFS stream suffix (``:...``)
    dropped, trailing dots and spaces dropped. A segment that would become empty,
    ``.`` or ``..`` keeps its case-folded spelling. The result is a key to
    compare, not a path to validate: NFKC can make it longer than the size
    limits (U+FDFA is 18 characters), so :func:`deny_matches` matches it without
    checking it again.

    Args:
        path: A valid repository path.

    Returns:
        The folded path.
    """
    out = []
    for segment in path.split(_SEP):
        folded = _fold_for_dotgit(unicodedata.normalize("NFKC", segment).casefold())
        # Case folding can leave text that is not NFC (U+03B0 folds to U+03C5
        # U+0308 U+0301), which no valid path is, so no folded glob would match it.
        folded = unicodedata.normalize("NFC", folded)
        stripped = folded.split(":", 1)[0].rstrip(". ")
        out.append(stripped if stripped not in ("", ".", "..") else folded)
    return _SEP.join(out)


@functools.lru_cache(maxsize=4096)
def _fold_glob(glob: str) -> str:
    folded = "".join(_fold_char(char) for char in unicodedata.normalize("NFKC", glob).casefold())
    return unicodedata.normalize("NFC", folded)  # as fold_path


def deny_matches(path: str, globs: Sequence[str]) -> bool:
    """Match a path against deny-side globs (forbidden, protected), fail-safe.

    A deny rule must hold on every checkout, including case-insensitive (macOS,
    Windows) and NTFS ones where ``src/.ENV``, ``src/.env.`` and
    ``src/.env::$DATA`` all name ``src/.env``. So a path is denied if it, or any
    folder above it, matches as written, or if its :func:`fold_path` matches the
    case-folded glob (NFKC, Unicode case folding).

    Args:
        path: A valid repository path.
        globs: Deny globs.

    Returns:
        True iff some glob matches either spelling.
    """
    if not globs:
        return False
    if isinstance(globs, tuple):
        return _deny_matches_cached(path, globs)
    return _deny_matches(path, tuple(globs))


@functools.lru_cache(maxsize=16384)
def _deny_matches_cached(path: str, globs: tuple[str, ...]) -> bool:
    return _deny_matches(path, globs)


def _deny_matches(path: str, globs: tuple[str, ...]) -> bool:
    folded_globs = [_fold_glob(g) for g in globs]
    segments = path.split(_SEP)
    # A denied folder denies everything beneath it, so its existence cannot be
    # probed by writing "below" it either.
    for end in range(len(segments), 0, -1):
        prefix = _SEP.join(segments[:end])
        if in_scope(prefix, globs):
            return True
        # The folded spelling is matched as it is: checking it as a path again
        # would let a name whose folding is too long escape every deny glob.
        folded = fold_path(prefix)
        if any(_is_valid_glob(glob) and _match(glob, folded) for glob in folded_globs):
            return True
    return False


def glob_may_match_below(glob: str, folder: str) -> bool:
    """Whether ``glob`` could match some path strictly below ``folder``.

    Used to accept a folder as a filter (``log``, ``diff``) when part of what is
    under it is in scope. Each of the folder's segments must match the glob's
    segment at the same position (``**`` accepts everything from there on), and
    the glob must go deeper than the folder.

    Args:
        glob: A valid glob.
        folder: A valid path.

    Returns:
        True iff some path ``folder/...`` may match ``glob``.
    """
    parts = glob.split(_SEP)
    segments = folder.split(_SEP)
    for i, segment in enumerate(segments):
        if i >= len(parts):
            return False
        if parts[i] == _DOUBLE_STAR:
            return True
        if not glob_matches(parts[i], segment):
            return False
    return len(parts) > len(segments)


@functools.lru_cache(maxsize=4096)
def glob_contained(inner: str, outer: str) -> bool:
    """Whether ``inner`` provably matches no path that ``outer`` does not.

    A sound check used to refuse widening delegations: True only when
    containment is certain; an uncertain answer is False. ``outer``'s ``**``
    absorbs any run of ``inner``'s segments (at least one when it is trailing,
    matching its one-or-more meaning); ``inner``'s ``**`` can only be absorbed
    by ``outer``'s ``**``; other segments by :func:`~policy.segments.segment_contained`. So
    ``src/api/**`` is within ``src/**``, while ``src/**/*.py`` is not within
    ``src/*.py`` and ``src/api/../**`` is not a glob at all.

    Args:
        inner: A glob (invalid globs are never contained).
        outer: A glob (invalid globs contain nothing).

    Returns:
        True iff containment is proven.
    """
    if not (_is_valid_glob(inner) and _is_valid_glob(outer)):
        return False
    a, b = inner.split(_SEP), outer.split(_SEP)
    m, n = len(a), len(b)
    # reach[i][j]: inner segments a[:i] are absorbed by outer segments b[:j].
    reach = [[False] * (n + 1) for _ in range(m + 1)]
    reach[0][0] = True
    for j in range(1, n + 1):
        trailing = j == n
        reach[0][j] = reach[0][j - 1] and b[j - 1] == _DOUBLE_STAR and not trailing
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            seg_in, seg_out = a[i - 1], b[j - 1]
            if seg_out == _DOUBLE_STAR:
                trailing = j == n
                # absorb nothing (only if it may match zero segments), or one more.
                skip = reach[i][j - 1] and not trailing
                reach[i][j] = skip or reach[i - 1][j] or reach[i - 1][j - 1]
            elif seg_in == _DOUBLE_STAR:
                reach[i][j] = False
            else:
                reach[i][j] = reach[i - 1][j - 1] and segment_contained(seg_in, seg_out)
    return reach[m][n]
