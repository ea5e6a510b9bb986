"""Policy loading: valid documents, and each kind of invalid one, reported with its location."""

from __future__ import annotations

from pathlib import Path

import pytest

import policy
from policy.model import MAX_RATE_CALLS, MAX_RULES

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "docs" / "examples"


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(policy.PolicyError) as info:
        policy.load(text)
    return info.value.problems


def locations(text: str) -> set[str]:
    return {loc for loc, _ in problems(text)}


def test_empty_document_is_the_defaults() -> None:
    assert policy.load("") == policy.Policy()
    assert policy.load("") == policy.load("version = 1\n")


def test_default_policy_loads_to_the_model_defaults() -> None:
    loaded = policy.load(policy.DEFAULT_POLICY_TOML)
    assert loaded.limits == policy.Limits()
    assert loaded.default == "allow" and loaded.rules == () and loaded.rate_limits == ()
    assert loaded.commit == policy.CommitRules()


def test_a_full_policy_loads_into_frozen_models() -> None:
    loaded = policy.load(
        """
version = 1
default = "deny"
[limits]
files_per_commit = 10
[commit]
message_min_length = 10
subject_max_length = 72
message_pattern = "(feat|fix): .{1,72}"
[[rules]]
effect = "allow"
agents = ["docs-bot", "docs-bot.**"]
tools = ["read_file", "write_file"]
operations = ["read", "write"]
paths = ["docs/**"]
reason = "docs agents work on docs"
[[rate_limits]]
agents = ["ci-*"]
tools = ["commit"]
calls = 5
per_seconds = 60
"""
    )
    rule = loaded.rules[0]
    assert rule.agents == ("docs-bot", "docs-bot.**") and rule.paths == ("docs/**",)
    assert loaded.rate_limits[0].calls == 5 and loaded.limits.files_per_commit == 10
    assert loaded.commit.compiled_pattern is not None
    with pytest.raises(ValueError, match="frozen"):
        loaded.default = "allow"  # type: ignore[misc]
    with pytest.raises(ValueError, match="frozen"):
        rule.effect = "deny"  # type: ignore[misc]
    same = policy.load(_REORDERED)
    assert same == loaded and hash(same) == hash(loaded)


_REORDERED = """
# The same document, written differently (key order, comments).
default = "deny"
version = 1
[[rate_limits]]
per_seconds = 60
calls = 5
tools = ["commit"]
agents = ["ci-*"]
[[rules]]
reason = "docs agents work on docs"
paths = ["docs/**"]
operations = ["read", "write"]
tools = ["read_file", "write_file"]
agents = ["docs-bot", "docs-bot.**"]
effect = "allow"
[commit]
message_pattern = "(feat|fix): .{1,72}"
subject_max_length = 72
message_min_length = 10
[limits]
files_per_commit = 10
"""


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ("extra = 1\n", "extra"),
        ("[limits]\nfile_byte = 1\n", "limits.file_byte"),
        ("[paths]\nallowed = []\n", "paths.allowed"),
        ("[commit]\nmessage_regex = 'x'\n", "commit.message_regex"),
        ("[[rules]]\neffect = 'deny'\nagent = ['a']\n", "rules[0].agent"),
        ("[[rate_limits]]\ncalls = 1\nper_seconds = 1\nburst = 2\n", "rate_limits[0].burst"),
        ("[sealing]\n", "sealing"),
    ],
)
def test_an_unknown_key_is_an_error(text: str, location: str) -> None:
    found = problems(text)
    assert (location, "unknown key") in found


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ("version = 2\n", "version"),
        ("default = 'permit'\n", "default"),
        ("[[rules]]\neffect = 'permit'\n", "rules[0].effect"),
        ("[[rules]]\neffect = 'deny'\ntools = ['rad_file']\n", "rules[0].tools[0]"),
        ("[[rules]]\neffect = 'deny'\noperations = ['admin']\n", "rules[0].operations[0]"),
        ("[[rules]]\neffect = 'deny'\nagents = ['Docs-Bot']\n", "rules[0].agents[0]"),
        ("[[rules]]\neffect = 'deny'\nagents = ['a..b']\n", "rules[0].agents[0]"),
        ("[[rules]]\neffect = 'deny'\nagents = ['a**']\n", "rules[0].agents[0]"),
        ("[[rules]]\neffect = 'deny'\npaths = ['../x']\n", "rules[0].paths[0]"),
        ("[[rules]]\neffect = 'deny'\npaths = ['/etc/**']\n", "rules[0].paths[0]"),
        ("[[rules]]\neffect = 'deny'\npaths = ['src/a**']\n", "rules[0].paths[0]"),
        ("[paths]\nforbidden = ['C:/x']\n", "paths.forbidden[0]"),
        ("[paths]\nprotected = ['a//b']\n", "paths.protected[0]"),
        ("[[rules]]\neffect = 'deny'\nreason = \"a\\u202eb\"\n", "rules[0].reason"),
        ("[[rules]]\neffect = 'deny'\nreason = \"a\\nb\"\n", "rules[0].reason"),
        (f"[[rules]]\neffect = 'deny'\nreason = '{'x' * 201}'\n", "rules[0].reason"),
        ("[limits]\nfile_bytes = 0\n", "limits.file_bytes"),
        ("[limits]\nfiles_per_commit = -1\n", "limits.files_per_commit"),
        ("[limits]\ndelegation_depth = 9\n", "limits.delegation_depth"),
        ("[commit]\nmessage_min_length = 0\n", "commit.message_min_length"),
        ("[commit]\nsubject_max_length = 0\n", "commit.subject_max_length"),
        ("[[rate_limits]]\ncalls = 0\nper_seconds = 1\n", "rate_limits[0].calls"),
        (
            f"[[rate_limits]]\ncalls = {MAX_RATE_CALLS + 1}\nper_seconds = 1\n",
            "rate_limits[0].calls",
        ),
        ("[[rate_limits]]\ncalls = 1\nper_seconds = 86401\n", "rate_limits[0].per_seconds"),
        ("[[rate_limits]]\ncalls = 1\n", "rate_limits[0].per_seconds"),
        ("[[rules]]\nreason = 'no effect'\n", "rules[0].effect"),
    ],
)
def test_an_unknown_or_invalid_value_is_an_error(text: str, location: str) -> None:
    assert location in locations(text)


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ("[limits]\nfile_bytes = '10'\n", "limits.file_bytes"),
        ("[limits]\nfile_bytes = 1.5\n", "limits.file_bytes"),
        ("[limits]\nfile_bytes = true\n", "limits.file_bytes"),
        ("default = true\n", "default"),
        ("[paths]\nforbidden = '**/.env'\n", "paths.forbidden"),
        ("[paths]\nforbidden = [1]\n", "paths.forbidden[0]"),
        ("[[rules]]\neffect = 'deny'\nagents = 'ci-*'\n", "rules[0].agents"),
        ("rules = 1\n", "rules"),
        ("limits = 1\n", "limits"),
        ("[commit]\nmessage_pattern = 1\n", "commit.message_pattern"),
    ],
)
def test_a_wrong_type_is_an_error_never_coerced(text: str, location: str) -> None:
    assert location in locations(text)


@pytest.mark.parametrize("key", ["agents", "tools", "operations", "paths"])
def test_an_empty_selector_is_an_error_not_a_wildcard(key: str) -> None:
    """Threat: `agents = []` read as "every agent" (or as "no agent") silently."""
    found = problems(f"[[rules]]\neffect = 'deny'\n{key} = []\n")
    assert found == [
        (f"rules[0].{key}", "must not be empty; leave the key out to match everything")
    ]


def test_a_repeated_entry_is_an_error() -> None:
    assert "rules[0].tools" in locations("[[rules]]\neffect='deny'\ntools=['log','log']\n")


def test_an_allow_rule_under_default_allow_is_an_error() -> None:
    """Threat: an operator who writes allow rules believing everything else is denied."""
    found = problems(
        "[[rules]]\neffect = 'deny'\ntools = ['commit']\n[[rules]]\neffect = 'allow'\n"
    )
    assert found[0][0] == "rules[1].effect" and 'default = "deny"' in found[0][1]
    policy.load("default = 'deny'\n[[rules]]\neffect = 'allow'\n")


def test_a_rule_that_can_never_match_is_an_error() -> None:
    text = "[[rules]]\neffect='deny'\ntools=['read_file','log']\noperations=['write']\n"
    assert locations(text) == {"rules[0].operations"}
    policy.load(
        "[[rules]]\neffect='deny'\ntools=['read_file','write_file']\noperations=['write']\n"
    )


@pytest.mark.parametrize(
    "pattern",
    [
        "(a+)+b",  # nested quantifier: exponential backtracking
        "(a|a)*b",  # repeated alternation
        "(?:(ab)c)+",  # repeated group holding a group
        ".*a.*a.*a.*b",  # polynomial: 187 million ways to split 256 characters
        "(a|aa)" * 13,  # 8,192 alternatives
        "(a)\\1",  # backreference
        "(?=a)a",  # lookahead
        "(?<!a)b",  # lookbehind
        "(?P<x>a)",  # named group
        "(?i)feat",  # inline flag
        "(?(1)a|b)",  # conditional
        "\\x41",  # character code escape
        "a{x}",  # ambiguous literal brace
        "[[:alpha:]]",  # a FutureWarning in re: refused, not ignored
        "(",  # does not compile
        "",
        "x" * 257,
        # A count past re's MAXREPEAT: OverflowError from re.compile, which
        # escaped policy.load instead of a PolicyError (found by fuzz/fuzz_policy.py).
        ".{1,4294967296}",
        "a{99999999999}",
    ],
)
def test_an_unsafe_or_invalid_message_pattern_is_an_error(pattern: str) -> None:
    text = f"[commit]\nmessage_pattern = '''{pattern}'''\n"
    assert locations(text) == {"commit.message_pattern"}


@pytest.mark.parametrize(
    "pattern",
    [
        "(feat|fix|docs|style|refactor|perf|test|build|ci|chore|revert)"
        "(\\([a-z0-9-]+\\))?!?: .{1,72}",
        "[A-Z]+-[0-9]+: .+",
        "\\[[A-Z]{2,10}-\\d{1,6}\\] .+",
        "(?:ab)+c",
        "\\{[a-z]+\\} .*",
        ".*a.*a.*b",
    ],
)
def test_safe_message_patterns_load(pattern: str) -> None:
    loaded = policy.load(f"[commit]\nmessage_pattern = '''{pattern}'''\n")
    assert loaded.commit.compiled_pattern is not None


def test_every_problem_is_reported_with_its_line() -> None:
    text = """version = 1
default = "deny"
extra = 1
[limits]
file_bytes = -1
[[rules]]
effect = "allow"
[[rules]]
effect = "allow"
agents = ["Docs-bot"]
tools = ["rad_file"]
[[rate_limits]]
calls = 0
per_seconds = 10
"""
    with pytest.raises(policy.PolicyError) as info:
        policy.load(text)
    found = list(zip(info.value.lines, (loc for loc, _ in info.value.problems), strict=True))
    assert found == [
        (3, "extra"),
        (5, "limits.file_bytes"),
        (10, "rules[1].agents[0]"),
        (11, "rules[1].tools[0]"),
        (13, "rate_limits[0].calls"),
    ]


def test_a_toml_syntax_error_has_its_line() -> None:
    with pytest.raises(policy.PolicyError) as info:
        policy.load("version = 1\n[limits]\nfile_bytes = = 2\n")
    assert info.value.problems[0][0] == "toml" and info.value.lines == [3]
    with pytest.raises(policy.PolicyError):
        policy.load("[limits]\nfile_bytes = 1\n[limits]\nfile_bytes = 2\n")  # duplicate table


def test_locate_falls_back_to_the_header_or_nothing() -> None:
    text = "[limits]\nfile_bytes = 1\n\n[[rules]]\neffect = 'deny'\n"
    assert policy.locate(text, "limits.file_bytes") == 2
    assert policy.locate(text, "limits.staged_bytes") == 1
    assert policy.locate(text, "rules[0]") == 4
    assert policy.locate(text, "rules[1].effect") is None
    assert policy.locate(text, "policy") is None


def test_rule_counts_are_bounded() -> None:
    many = "default = 'deny'\n" + "[[rules]]\neffect = 'allow'\n" * (MAX_RULES + 1)
    assert "rules" in locations(many)


def test_policy_tools_and_operations_match_the_engine_catalog() -> None:
    """The policy names tools without importing the engine; the copies must agree."""
    from engine.catalog.declarations import TOOLS

    assert policy.TOOL_OPERATIONS == {tool.name: tool.operation for tool in TOOLS}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_each_example_policy_loads(path: Path) -> None:
    policy.load(path.read_text(encoding="utf-8"))


def test_the_examples_include_the_documented_ones() -> None:
    names = {p.name for p in EXAMPLES.glob("*.toml")}
    assert {"strict.toml", "ci-bots.toml", "docs-only.toml"} <= names


ISSUER = """
[[issuers]]
issuer = "https://ci.example.com"
audience = "chit://acme"
algorithms = ["RS256"]
jwks_file = "issuers/ci.jwks"
"""


def test_require_jti_defaults_on_and_is_a_boolean() -> None:
    assert policy.load(ISSUER).issuers[0].require_jti is True
    assert policy.load(ISSUER + "require_jti = false\n").issuers[0].require_jti is False
    for bad in ('"yes"', "1", '"false"', "[]"):
        assert problems(ISSUER + f"require_jti = {bad}\n") == [
            ("issuers[0].require_jti", "Input should be a valid boolean")
        ]


def test_require_jti_at_its_default_leaves_the_dump_as_it_was() -> None:
    """The policy hash is of the dump: a file that does not mention it keeps its hash."""
    unset = policy.load(ISSUER).model_dump(mode="json")
    assert "require_jti" not in unset["issuers"][0]
    assert policy.load(ISSUER + "require_jti = true\n").model_dump(mode="json") == unset
    off = policy.load(ISSUER + "require_jti = false\n").model_dump(mode="json")
    assert off["issuers"][0]["require_jti"] is False
