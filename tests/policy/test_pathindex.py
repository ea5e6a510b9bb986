"""The deny-glob index answers exactly as deny_matches does (hypothesis, differential)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policy._pathindex import DenyIndex, _anchor
from policy.paths import deny_matches, validate_glob, validate_path

# Letters that fold (case, the Kelvin sign, dotless i, long s, fullwidth forms),
# characters filesystems drop (trailing dots and spaces, HFS+ ignorables, NTFS
# streams) and the glob metacharacters.
CHARS = ["a", "A", "b", "e", "E", "n", "v", ".", " ", ":", "\u200c", "\u212a", "k", "K",
         "\u0131", "i", "I", "\u017f", "s", "S", "\uff45", "x", "-"]
GLOB_CHARS = [*CHARS, "*", "*", "?"]


def _valid(validate, text: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        validate(text)
    except ValueError:
        return False
    return True


segments = st.lists(st.sampled_from(CHARS), min_size=1, max_size=5).map("".join)
paths = st.lists(segments, min_size=1, max_size=4).map("/".join).filter(
    lambda p: _valid(validate_path, p)
)
glob_segments = st.one_of(
    st.just("**"), st.lists(st.sampled_from(GLOB_CHARS), min_size=1, max_size=5).map("".join)
)
globs = st.lists(glob_segments, min_size=1, max_size=4).map("/".join).filter(
    lambda g: _valid(validate_glob, g)
)


@settings(max_examples=1500)
@given(st.lists(st.lists(globs, min_size=1, max_size=3), min_size=1, max_size=4),
       st.lists(paths, min_size=1, max_size=4))
def test_the_index_agrees_with_deny_matches(groups: list[list[str]], probes: list[str]) -> None:
    index = DenyIndex(dict(enumerate(groups)))
    for path in probes + probes:  # the second round is answered from memory
        expected = {key for key, group in enumerate(groups) if deny_matches(path, group)}
        assert index.hits(path) == expected, path


def test_known_spellings_are_found_through_the_index() -> None:
    index = DenyIndex({"env": ["**/.env"], "pem": ["**/*.pem"], "ci": [".github/**"], "all": []})
    assert index.hits("src/.ENV") == {"env"}
    assert index.hits("src/.env./x") == {"env"}
    assert index.hits("keys/a.PEM") == {"pem"}
    assert index.hits(".GitHub/workflows/a.yml") == {"ci"}
    assert index.hits("src/a.py") == frozenset()


def test_anchors() -> None:
    assert _anchor("src/**/main.py") == ("seg", "main.py")
    assert _anchor("**/*.pem") == ("tail", ".pem")
    assert _anchor("**/id_*") == ("head", "id_")
    assert _anchor("**") is None and _anchor("*/*") is None
