"""Repository names and ``repos`` globs (engine/auth/reponames.py, docs/token-format.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.auth.caveats import interpret
from engine.auth.reponames import (
    repo_glob_contained,
    repo_identity,
    repo_in_scopes,
    repo_matches,
    validate_repo_glob,
    validate_repo_name,
)
from engine.errors import CaveatError

NAMES = st.text(alphabet="ab.-_1", min_size=1, max_size=8).filter(
    lambda n: n[0] not in ".-_")
GLOBS = st.text(alphabet="ab.-_1*?", min_size=1, max_size=8).filter(
    lambda g: "**" not in g and g not in (".", ".."))


@pytest.mark.parametrize("name", ["app", "App", "a", "lib.git", "x_1-2.3", "9", "a" * 64])
def test_valid_names(name: str) -> None:
    assert validate_repo_name(name) == name


@pytest.mark.parametrize("name", [
    "", ".", "..", ".hidden", "-x", "_x", "a/b", "a\\b", "a\x00", "a b", "a*", "a?", "[a]",
    "a\n", "\u00e4", "a" * 65, "app/", "/app", None, 1, b"app",
])
def test_invalid_names(name: object) -> None:
    """Threat: traversal, NUL truncation, glob or path characters in a repository name."""
    with pytest.raises(ValueError):
        validate_repo_name(name)


@pytest.mark.parametrize("glob", ["", ".", "..", "a**", "**", "a/b", "[a]", "a b", "a\x00",
                                  "\u00e4*", "a" * 65, None])
def test_invalid_globs(glob: object) -> None:
    with pytest.raises(ValueError):
        validate_repo_glob(glob)


@pytest.mark.parametrize(("glob", "name", "matches"), [
    ("app", "app", True), ("app", "App", False), ("app", "apps", False), ("app", "ap", False),
    ("app-*", "app-", True), ("app-*", "app-web", True), ("app-*", "app", False),
    ("*", "anything.git", True), ("?", "a", True), ("?", "ab", False), ("a?c", "abc", True),
    ("*b*", "abc", True), ("*.git", "x.git", True), ("*.git", "xgit", False),
    ("a*a*a*a*b", "a" * 60, False),
    ("*", "..", False), ("*", "a/b", False), ("*", "a\x00", False), ("[ab]", "a", False),
])
def test_matching(glob: str, name: str, matches: bool) -> None:
    assert repo_matches(glob, name) is matches


def test_an_intersection_needs_every_scope() -> None:
    assert repo_in_scopes("app", [["app", "lib"], ["a*"]])
    assert not repo_in_scopes("lib", [["app", "lib"], ["a*"]])
    assert not repo_in_scopes("app", [[]])  # an empty caveat grants nothing
    assert repo_in_scopes("app", [])  # no caveat: the caller's rule decides
    assert not repo_in_scopes("..", [])  # an invalid name never passes


@pytest.mark.parametrize(("inner", "outer", "contained"), [
    ("app", "app", True), ("app", "*", True), ("app-*", "*", True), ("app-?", "app-*", True),
    ("*", "app-*", False), ("App", "app", False), ("app-*", "app-?", False), ("?", "*", True),
    ("a*", "a*", True), ("a*b", "a*", True), ("a", "a*", True), ("*a", "a*", False),
])
def test_containment(inner: str, outer: str, contained: bool) -> None:
    assert repo_glob_contained(inner, outer) is contained


@settings(max_examples=400)
@given(inner=GLOBS, outer=GLOBS, name=NAMES)
def test_containment_is_sound(inner: str, outer: str, name: str) -> None:
    """Property: a glob proven within another never matches a name the other does not."""
    if repo_glob_contained(inner, outer) and repo_matches(inner, name):
        assert repo_matches(outer, name)


@settings(max_examples=300)
@given(glob=GLOBS, name=NAMES)
def test_matching_agrees_with_a_plain_reading(glob: str, name: str) -> None:
    """Property: the matcher reads ``*`` and ``?`` as a regular expression would."""
    import re

    pattern = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    assert repo_matches(glob, name) is (re.fullmatch(pattern, name, re.DOTALL) is not None)


@pytest.mark.parametrize("value", [["a/b"], [".."], "app", [1], ["a**"], ["x" * 65]])
def test_a_malformed_repos_caveat_fails_the_token(value: object) -> None:
    with pytest.raises(CaveatError) as info:
        interpret([["repos", value]])
    assert info.value.code == "caveat_malformed"


def test_repeated_repos_caveats_are_all_kept() -> None:
    caveats = interpret([["repos", ["a*"]], ["repos", ["ab"]]])
    assert caveats.repo_lists == (("a*",), ("ab",))


def test_repo_identity_folds_case_and_dash() -> None:
    assert repo_identity("My-Repo") == repo_identity("my_repo") == "my_repo"
    assert repo_identity("App.v2") == "app.v2"
    assert repo_identity("app") != repo_identity("apps")
