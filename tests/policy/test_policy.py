"""Policy: loading, and deny rules that hold on every kind of checkout."""

from __future__ import annotations

import unicodedata

import pytest

import policy
from policy.paths import deny_matches, fold_path

DENY = ["**/.env", "**/*.pem", "**/id_rsa", "secrets/**"]


@pytest.mark.parametrize(
    "path",
    [
        "src/.env",
        "src/.ENV",
        "src/.Env",
        "src/.env.",
        "src/.env ",
        "src/.env::$DATA",
        "src/key.PEM",
        "src/ID_RSA",
        "src/.e\u200cnv",
        "SECRETS/a",
        "Secrets./a",
        ".env",
    ],
)
def test_deny_rules_catch_other_spellings_of_the_same_file(path: str) -> None:
    """Threat: reading `.env` as `.ENV` or `.env.` and landing it in `.env` on a
    case-insensitive or NTFS checkout."""
    assert deny_matches(path, DENY)
    decision = policy.evaluate(
        policy.load(
            'version = 1\n[paths]\nforbidden = ["**/.env", "**/*.pem", "**/id_rsa", "secrets/**"]\n'
        ),
        policy.Request(agent="a", tool="read_file", operation="read", paths=(path,)),
    )
    windows_only = ":" in path or any(seg[-1] in ". " for seg in path.split("/"))
    if windows_only or any(unicodedata.category(char) == "Cf" for char in path):
        # An invisible character, a trailing dot or space and an NTFS stream are
        # refused before any rule (path_invalid); the rules still fold them,
        # should a path ever reach them another way.
        assert not decision.allowed and decision.code == "path_invalid"
        return
    assert not decision.allowed and decision.code == "path_forbidden"
    assert decision.rule == "paths.forbidden"


@pytest.mark.parametrize("path", ["src/.envrc", "src/env", "src/a.py", "secretsx/a", "pem"])
def test_deny_rules_do_not_overreach(path: str) -> None:
    assert not deny_matches(path, DENY)


def test_fold_path_keeps_paths_valid() -> None:
    assert fold_path("a/..:x/B") == "a/..:x/b"
    assert fold_path("Src/Key.PEM.") == "src/key.pem"
    # U+03B0 and U+0390 case-fold to three code points that are not NFC.
    for path in ("a/\u03b0", "\u0390.txt", "SECRETS/x\u03b0y"):
        assert policy.paths.validate_path(fold_path(path)) == fold_path(path)


def test_deny_rules_fold_names_whose_folding_is_too_long() -> None:
    """Threat: a protected folder reached on a case-insensitive checkout by a
    name that NFKC lengthens past the segment limit (U+FDFA is 18 characters):
    its folded spelling was not a valid path, so no deny glob matched it (found
    by fuzz/fuzz_paths.py)."""
    path = "SECRETS/" + "\ufdfa" * 80  # 240 bytes as written, 2,640 folded
    assert policy.paths.validate_path(path) == path
    assert deny_matches(path, DENY)
    decision = policy.evaluate(
        policy.load('version = 1\n[paths]\nforbidden = ["secrets/**"]\n'),
        policy.Request(agent="a", tool="write_file", operation="write", paths=(path,)),
    )
    assert not decision.allowed and decision.code == "path_forbidden"


@pytest.mark.parametrize("path", ["SECRETS/\u03b0", "Secrets/a/\u0390.txt", "src/\u03b0/KEY.PEM"])
def test_deny_rules_fold_paths_whose_case_folding_is_not_nfc(path: str) -> None:
    """Threat: a protected or forbidden folder reached on a case-insensitive checkout
    by a path holding a character whose case folding is not NFC (U+03B0): its
    folded spelling was not a valid path, so no deny glob matched it (found by
    fuzz/fuzz_paths.py)."""
    assert deny_matches(path, DENY)
    decision = policy.evaluate(
        policy.load('version = 1\n[paths]\nforbidden = ["**/*.pem", "secrets/**"]\n'),
        policy.Request(agent="a", tool="write_file", operation="write", paths=(path,)),
    )
    assert not decision.allowed and decision.code == "path_forbidden"


def test_deny_globs_fold_to_nfc_like_paths() -> None:
    upper = unicodedata.normalize("NFC", "\u03b0".upper())  # capital upsilon, dialytika, tonos
    assert deny_matches(f"{upper}/x", ["\u03b0/**"])
    assert deny_matches("\u03b0/x", [f"{upper}/**"])


def test_unknown_keys_and_bad_values_are_errors_with_locations() -> None:
    with pytest.raises(policy.PolicyError) as info:
        policy.load(
            "version = 1\nextra = 1\n[limits]\nfile_bytes = -1\n[paths]\nforbidden = ['../x']\n"
        )
    locations = {loc for loc, _ in info.value.problems}
    assert {"extra", "limits.file_bytes", "paths.forbidden[0]"} <= locations
    with pytest.raises(policy.PolicyError):
        policy.load("version = 2\n")
    with pytest.raises(policy.PolicyError):
        policy.load("not toml = = 1")


def test_default_policy_loads_and_limits_apply() -> None:
    pol = policy.load(policy.DEFAULT_POLICY_TOML)
    ok = policy.Request(
        agent="a",
        tool="write_file",
        operation="write",
        paths=("src/a.py",),
        content_bytes=10,
        staged_bytes=10,
        staged_files=1,
    )
    assert policy.evaluate(pol, ok).allowed
    big = ok.model_copy(update={"content_bytes": pol.limits.file_bytes + 1})
    decision = policy.evaluate(pol, big)
    assert decision.code == "limit_exceeded" and decision.rule == "limits.file_bytes"
    with pytest.raises(policy.PolicyDeniedError) as info:
        policy.enforce(pol, big)
    assert info.value.decision == decision


def test_documented_example_policies_load() -> None:
    from pathlib import Path

    examples = Path(__file__).resolve().parent.parent.parent / "docs" / "examples"
    files = sorted(examples.glob("*.toml"))
    assert files
    for path in files:
        policy.load(path.read_text())


@pytest.mark.parametrize(
    ("glob", "folder", "expected"),
    [
        ("src/**", "src", True),
        ("src/api/**", "src", True),
        ("src/*.py", "src", True),
        ("src/**", "src_old", False),
        ("src/api/**", "src/web", False),
        ("**", "x/y", True),
        ("src/a.py", "src/a.py", False),
        ("*/x", "docs", True),
    ],
)
def test_glob_may_match_below(glob: str, folder: str, expected: bool) -> None:
    from policy.paths import glob_may_match_below

    assert glob_may_match_below(glob, folder) is expected


@pytest.mark.parametrize(
    "path", ["src/CAF\u00c9.txt", "src/cafe\u0301.txt", "SRC/.Env./y", "src/.env/x"]
)
def test_deny_rules_fold_unicode_and_cover_what_is_below(path: str) -> None:
    assert deny_matches(path, ["**/caf\u00e9.txt", "**/.env"])
