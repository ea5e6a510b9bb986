"""The indexer's helpers (engine/semantic/indexer.py): blob ids and the scope test."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.semantic.indexer import git_blob_id


def test_git_blob_id_is_gits() -> None:
    assert git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


_SEGMENTS = st.sampled_from(["a", "b", "src", "x.py", "y.ts", "A"])
_GLOB_SEGMENTS = st.sampled_from(["a", "b", "src", "*", "**", "?", "*.py", "x.py", "s*"])


@given(
    paths=st.lists(st.lists(_SEGMENTS, min_size=1, max_size=4).map("/".join), max_size=20),
    scope=st.lists(
        st.lists(st.lists(_GLOB_SEGMENTS, min_size=1, max_size=4).map("/".join),
                 min_size=1, max_size=3),
        max_size=3,
    ),
)
def test_the_scope_test_of_a_large_view_agrees_with_the_token(
    paths: list[str], scope: list[list[str]]
) -> None:
    """The view's folder-remembering scope test says what ``allows_path`` says, path by path."""
    from engine.paths import in_scope, validate_glob
    from engine.semantic.indexer import _InScope

    for globs in scope:
        for glob in globs:
            try:
                validate_glob(glob)
            except ValueError:
                return  # a token never holds it
    test = _InScope(scope)
    for path in paths:
        assert test(path) == (bool(scope) and all(in_scope(path, g) for g in scope)), path
