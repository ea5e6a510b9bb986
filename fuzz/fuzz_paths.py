"""Fuzz path and glob validation and matching (policy/paths.py, docs/policy.md).

The input, as text (bytes that are not UTF-8 become lone surrogates), is split
at newlines into ``inner``, ``outer`` and ``path``. Checks: ``validate_path``
refuses only with ``PathError`` (a stable code), ``validate_glob`` only with
``ValueError`` (mapped to ``caveat_malformed``), and both return
their argument unchanged; for valid ones, the matching functions never raise
and keep their documented promises:

* ``**`` matches every valid path, and ``fold_path`` of one is NFC;
* a deny glob that denies a path denies every valid spelling of it with the
  same folding (upper, lower, swapped and title case): what a case-insensitive
  checkout would write to the same file;
* ``glob_contained(inner, outer)`` is sound: what ``inner`` matches, ``outer``
  matches (it refuses widening delegations);
* what a glob matches, ``deny_matches`` with that glob denies (protected paths);
* ``glob_may_match_below`` is True for every folder above a matched path.
"""

from __future__ import annotations

import unicodedata

import _harness
import atheris

with atheris.instrument_imports(include=_harness.INSTRUMENT):
    from policy import paths
    from policy.paths import PathError

_CODES = frozenset({"path_invalid", "path_forbidden"})


def _valid(check: object, value: str) -> bool:
    """Whether ``check`` accepts ``value``: PathError for paths, ValueError for globs."""
    try:
        result = check(value)  # type: ignore[operator]
    except PathError as exc:
        if exc.code not in _CODES:
            raise RuntimeError(f"PathError with an unknown code {exc.code!r}") from None
        return False
    except ValueError:
        if check is not paths.validate_glob:
            raise
        return False
    if result != value:
        raise RuntimeError("validation changed its argument")
    return True


def _fail(what: str) -> None:
    raise RuntimeError(what)


def TestOneInput(data: bytes) -> None:
    parts = _harness.text_of(data).split("\n", 2)
    inner, outer, path = [*parts, "", ""][:3]
    globs = [g for g in (inner, outer) if _valid(paths.validate_glob, g)]
    if not _valid(paths.validate_path, path):
        for glob in globs:
            if paths.glob_matches(glob, path) or paths.in_scope(path, [glob]):
                _fail("an invalid path was matched")
        return
    if not paths.glob_matches("**", path):
        _fail("** did not match a valid path")
    folded = paths.fold_path(path)
    if not unicodedata.is_normalized("NFC", folded):
        _fail("fold_path of a valid path is not NFC")
    # Spellings a case-insensitive checkout writes to the same file.
    variants = [
        v for v in {path.upper(), path.lower(), path.swapcase(), path.title()}
        if paths.fold_path(v) == folded and _valid(paths.validate_path, v)
    ]
    segments = path.split("/")
    for glob in globs:
        matched = paths.glob_matches(glob, path)
        if matched != paths.in_scope(path, [glob]):
            _fail("in_scope and glob_matches disagree")
        if matched and not paths.deny_matches(path, (glob,)):
            _fail("a path a glob matches is not denied by it")
        if paths.deny_matches(path, (glob,)):
            for variant in variants:
                if not paths.deny_matches(variant, (glob,)):
                    _fail("a spelling of a denied path with the same folding is not denied")
        if matched:
            for end in range(1, len(segments)):
                if not paths.glob_may_match_below(glob, "/".join(segments[:end])):
                    _fail("glob_may_match_below refused a folder above a match")
    if len(globs) == 2 and paths.glob_contained(inner, outer):
        if paths.glob_matches(inner, path) and not paths.glob_matches(outer, path):
            _fail("glob_contained(inner, outer) but inner matches a path outer does not")


if __name__ == "__main__":
    _harness.run(TestOneInput)
