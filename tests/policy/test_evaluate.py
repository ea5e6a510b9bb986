"""Policy evaluation: the documented order, deny wins, every limit at its boundary."""

from __future__ import annotations

import pytest

import policy
from policy import Request


def req(
    agent: str = "alice",
    tool: str = "read_file",
    operation: str | None = None,
    paths: tuple[str, ...] = ("src/a.py",),
    **kw: object,
) -> Request:
    op = operation if operation is not None else policy.TOOL_OPERATIONS[tool]
    return Request(agent=agent, tool=tool, operation=op, paths=paths, **kw)  # type: ignore[arg-type]


def decide(text: str, request: Request) -> policy.Decision:
    return policy.evaluate(policy.load(text), request)


# --- order -----------------------------------------------------------------------


ORDER = """
default = "deny"
[limits]
file_bytes = 10
[paths]
forbidden = ["secrets/**"]
protected = ["vault/**"]
[commit]
message_pattern = "feat: .+"
[[rules]]
effect = "allow"
paths = ["src/**", "secrets/**", "vault/**", "docs/**"]
[[rules]]
effect = "deny"
paths = ["docs/**"]
reason = "docs are frozen"
"""


@pytest.mark.parametrize(
    ("request_", "code", "rule"),
    [
        # 1. built-in path rules come before everything, the allow rule included.
        (req(paths=(".git/config",)), "path_forbidden", "builtin.paths"),
        (req(paths=("src/.GIT/x",)), "path_forbidden", "builtin.paths"),
        (req(paths=("src/../secrets/a",)), "path_invalid", "builtin.paths"),
        # 2. forbidden before deny rules and limits; protected refuses nothing
        # (sealed at rest, docs/sealing.md): the limits decide.
        (req(paths=("secrets/a",), content_bytes=99), "path_forbidden", "paths.forbidden"),
        (req(paths=("vault/a",), content_bytes=99), "limit_exceeded", "limits.file_bytes"),
        # 3. a deny rule wins over the allow rule listed before it, and over limits.
        (req(paths=("docs/a.md",), content_bytes=99), "policy_denied", "rules[1]"),
        # 4. nothing allows it: the default decides, before limits are looked at.
        (req(paths=("lib/a.py",), content_bytes=99), "policy_denied", "default"),
        # 5. limits, then 6. the commit message.
        (req(tool="write_file", content_bytes=11), "limit_exceeded", "limits.file_bytes"),
        (
            req(tool="commit", paths=("src/a.py",), content_bytes=11, message="x"),
            "limit_exceeded",
            "limits.file_bytes",
        ),
        (
            req(tool="commit", paths=("src/a.py",), message="x"),
            "policy_denied",
            "commit.message_pattern",
        ),
    ],
)
def test_evaluation_follows_the_documented_order(request_: Request, code: str, rule: str) -> None:
    decision = decide(ORDER, request_)
    assert (decision.allowed, decision.code, decision.rule) == (False, code, rule)
    assert decision.reasons and decision.retry_after is None


def test_an_allowed_decision_names_the_rule_that_allowed_it() -> None:
    assert decide(ORDER, req(paths=("src/a.py",))).rule == "rules[0]"
    allowed = decide("", req())
    assert allowed.allowed and allowed.rule == "default" and allowed.code is None


def test_a_deny_wins_whatever_the_file_order() -> None:
    allow_first = """
default = "deny"
[[rules]]
effect = "allow"
agents = ["ci-*"]
[[rules]]
effect = "deny"
agents = ["ci-lint"]
tools = ["commit"]
reason = "linters do not commit"
"""
    deny_first = """
default = "deny"
[[rules]]
effect = "deny"
agents = ["ci-lint"]
tools = ["commit"]
reason = "linters do not commit"
[[rules]]
effect = "allow"
agents = ["ci-*"]
"""
    commit = req(agent="ci-lint", tool="commit", paths=())
    for text, rule in ((allow_first, "rules[1]"), (deny_first, "rules[0]")):
        decision = decide(text, commit)
        assert decision.code == "policy_denied" and decision.rule == rule
        assert decision.reasons == ("linters do not commit",)
        assert decide(text, req(agent="ci-lint", tool="status", paths=())).allowed
        assert decide(text, req(agent="ci-test", tool="commit", paths=())).allowed


def test_the_first_matching_deny_rule_is_the_one_reported() -> None:
    text = """
[[rules]]
effect = "deny"
tools = ["log"]
[[rules]]
effect = "deny"
agents = ["bob"]
[[rules]]
effect = "deny"
agents = ["bob"]
tools = ["log"]
"""
    assert decide(text, req(agent="bob", tool="log", paths=())).rule == "rules[0]"
    assert decide(text, req(agent="bob", tool="status", paths=())).rule == "rules[1]"
    refused = decide(text, req(agent="bob", tool="status", paths=()))
    assert refused.reasons == ("a deny rule of the organisation policy matches this call",)


# --- matching ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "agent", "matches"),
    [
        ("ci-*", "ci-lint", True),
        ("ci-*", "ci-", True),
        ("ci-*", "ci-lint.helper", False),
        ("ci-*", "xci-lint", False),
        ("ci-?", "ci-a", True),
        ("ci-?", "ci-ab", False),
        ("docs-bot", "docs-bot", True),
        ("docs-bot", "docs-bot.gzip", False),
        ("docs-bot.*", "docs-bot.gzip", True),
        ("docs-bot.*", "docs-bot.gzip.deep", False),
        ("docs-bot.**", "docs-bot", False),
        ("docs-bot.**", "docs-bot.gzip.deep", True),
        ("**", "anyone", True),
        ("**", "lead.helper", True),
        ("*", "lead", True),
        ("*", "lead.helper", False),
        ("*.helper", "lead.helper", True),
        ("**.helper", "a.b.helper", True),
    ],
)
def test_agent_patterns_match_label_by_label(pattern: str, agent: str, matches: bool) -> None:
    text = f"[[rules]]\neffect = 'deny'\nagents = ['{pattern}']\n"
    assert decide(text, req(agent=agent)).allowed is not matches


def test_tools_and_operations_select_by_name() -> None:
    text = "[[rules]]\neffect = 'deny'\noperations = ['write']\n"
    for tool in ("write_file", "delete_file", "move_file", "resolve_conflict"):
        assert not decide(text, req(tool=tool)).allowed
    for tool in ("read_file", "log", "commit"):
        assert decide(text, req(tool=tool)).allowed
    text = (
        "[[rules]]\neffect = 'deny'\ntools = ['read_file', 'write_file']\noperations = ['write']\n"
    )
    assert not decide(text, req(tool="write_file")).allowed
    assert decide(text, req(tool="read_file")).allowed  # read_file needs read, not write
    assert decide(text, req(tool="delete_file")).allowed


def test_a_deny_rule_matches_if_any_path_matches() -> None:
    text = "[[rules]]\neffect = 'deny'\npaths = ['ci/**']\n"
    move = req(tool="move_file", paths=("src/a.py", "ci/a.yml"))
    assert decide(text, move).rule == "rules[0]"
    assert decide(text, req(paths=("src/a.py", "docs/b.md"))).allowed


def test_a_deny_rule_folds_spellings_and_covers_what_is_below() -> None:
    """Threat: escaping a deny rule with `CI/x`, `ci./x` or a file below a denied folder."""
    text = "[[rules]]\neffect = 'deny'\npaths = ['ci', 'keys/*.pem']\n"
    for path in ("ci", "CI/a.yml", "ci./a.yml", "ci/deep/a.yml", "keys/A.PEM", "keys/a.pem/x"):
        assert not decide(text, req(paths=(path,))).allowed, path
    assert decide(text, req(paths=("cix/a.yml",))).allowed


def test_a_deny_rule_with_paths_never_matches_a_call_without_paths() -> None:
    text = "[[rules]]\neffect = 'deny'\npaths = ['**']\n"
    assert decide(text, req(tool="status", paths=())).allowed
    assert not decide(text, req(tool="read_file", paths=("a",))).allowed


def test_an_allow_rule_matches_only_if_every_path_matches() -> None:
    text = "default = 'deny'\n[[rules]]\neffect = 'allow'\npaths = ['docs/**']\n"
    assert decide(text, req(tool="move_file", paths=("docs/a.md", "docs/b.md"))).allowed
    refused = decide(text, req(tool="move_file", paths=("docs/a.md", "src/b.py")))
    assert refused.rule == "default"
    # Exact and case-sensitive, like token scopes: an allow rule only narrows.
    assert decide(text, req(paths=("DOCS/a.md",))).rule == "default"
    assert decide(text, req(paths=("docs",))).rule == "default"
    # A call without paths (status, effective_scope) is allowed by a path rule.
    assert decide(text, req(tool="status", paths=())).allowed


def test_default_deny_refuses_what_no_rule_allows() -> None:
    text = """
default = "deny"
[[rules]]
effect = "allow"
agents = ["docs-bot", "docs-bot.**"]
paths = ["docs/**"]
"""
    assert decide(text, req(agent="docs-bot", paths=("docs/a.md",))).allowed
    assert decide(text, req(agent="docs-bot.gzip", paths=("docs/a.md",))).allowed
    refused = decide(text, req(agent="eve", paths=("docs/a.md",)))
    assert refused.code == "policy_denied" and refused.rule == "default"
    assert "read_file" in refused.reasons[0]
    assert decide("default = 'deny'\n", req(tool="effective_scope", paths=())).rule == "default"


# --- limits at their boundaries -----------------------------------------------------


@pytest.mark.parametrize(
    ("field", "limit_key", "rule"),
    [
        ("content_bytes", "file_bytes", "limits.file_bytes"),
        ("staged_bytes", "staged_bytes", "limits.staged_bytes"),
        ("staged_files", "staged_files", "limits.staged_files"),
        ("commit_files", "files_per_commit", "limits.files_per_commit"),
    ],
)
def test_each_limit_allows_its_value_and_refuses_one_more(
    field: str, limit_key: str, rule: str
) -> None:
    text = f"[limits]\n{limit_key} = 7\n"
    at = decide(text, req(tool="write_file", **{field: 7}))
    assert at.allowed
    over = decide(text, req(tool="write_file", **{field: 8}))
    assert (over.allowed, over.code, over.rule) == (False, "limit_exceeded", rule)
    assert "8" in over.reasons[0] and "7" in over.reasons[0]


def test_a_refusing_limit_is_the_first_in_documented_order() -> None:
    text = "[limits]\nfile_bytes = 1\nstaged_bytes = 1\nstaged_files = 1\nfiles_per_commit = 1\n"
    over = req(content_bytes=2, staged_bytes=2, staged_files=2, commit_files=2)
    assert decide(text, over).rule == "limits.file_bytes"
    over = req(staged_bytes=2, staged_files=2, commit_files=2)
    assert decide(text, over).rule == "limits.staged_bytes"
    assert decide(text, req(staged_files=2, commit_files=2)).rule == "limits.staged_files"


# --- commit message requirements ------------------------------------------------------


def commit(message: str) -> Request:
    return req(tool="commit", paths=("src/a.py",), message=message, commit_files=1)


def test_message_min_length_at_its_boundary() -> None:
    text = "[commit]\nmessage_min_length = 5\n"
    assert decide(text, commit("12345")).allowed
    refused = decide(text, commit("1234"))
    assert (refused.code, refused.rule) == ("policy_denied", "commit.message_min_length")


def test_subject_max_length_counts_the_first_line_only() -> None:
    text = "[commit]\nsubject_max_length = 10\n"
    assert decide(text, commit("0123456789\n\n" + "body " * 100)).allowed
    refused = decide(text, commit("0123456789x\n\nbody"))
    assert (refused.code, refused.rule) == ("policy_denied", "commit.subject_max_length")


def test_message_pattern_is_a_full_match_of_the_subject() -> None:
    text = "[commit]\nmessage_pattern = '(feat|fix)(\\([a-z]+\\))?: .{1,50}'\n"
    for ok in ("feat: add x", "fix(api): y", "feat: add x\n\nany body at all"):
        assert decide(text, commit(ok)).allowed, ok
    for bad in ("feature: x", "feat: ", "xfeat: y", "feat(API): y", "body\nfeat: x"):
        refused = decide(text, commit(bad))
        assert (refused.code, refused.rule) == ("policy_denied", "commit.message_pattern"), bad
        assert "(feat|fix)" in refused.reasons[0]


def test_message_pattern_refuses_a_subject_too_long_to_match_safely() -> None:
    """Threat: a crafted subject long enough to make the pattern backtrack for seconds."""
    text = "[commit]\nmessage_pattern = '.*a.*a.*b'\n"
    assert decide(text, commit("a" * 200 + "b")).allowed
    refused = decide(text, commit("a" * 257))
    assert refused.rule == "commit.message_pattern" and "256" in refused.reasons[0]


def test_message_rules_apply_only_to_commit_requests() -> None:
    text = "[commit]\nmessage_min_length = 50\nmessage_pattern = 'feat: .+'\n"
    assert decide(text, req(tool="commit", paths=())).allowed  # no message: nothing to check


# --- rate limits: selection only (counting is the engine's) ------------------------------


def test_rate_limits_for_selects_by_agent_and_tool_in_file_order() -> None:
    pol = policy.load(
        """
[[rate_limits]]
agents = ["ci-*"]
tools = ["commit"]
calls = 1
per_seconds = 60
[[rate_limits]]
calls = 100
per_seconds = 1
[[rate_limits]]
tools = ["write_file", "commit"]
calls = 10
per_seconds = 60
"""
    )
    assert [i for i, _ in policy.rate_limits_for(pol, "ci-a", "commit")] == [0, 1, 2]
    assert [i for i, _ in policy.rate_limits_for(pol, "bob", "commit")] == [1, 2]
    assert [i for i, _ in policy.rate_limits_for(pol, "ci-a.x", "log")] == [1]
    assert policy.rate_limits_for(policy.load(""), "a", "log") == ()


# --- enforce ------------------------------------------------------------------------------


def test_enforce_raises_with_the_decision_and_returns_an_allowing_one() -> None:
    pol = policy.load("[[rules]]\neffect = 'deny'\ntools = ['log']\n")
    assert policy.enforce(pol, req(tool="status", paths=())).allowed
    with pytest.raises(policy.PolicyDeniedError) as info:
        policy.enforce(pol, req(tool="log", paths=()))
    assert info.value.decision.rule == "rules[0]"


def test_evaluate_never_raises_on_garbage_requests() -> None:
    pol = policy.load(ORDER)
    for paths in ((), ("",), ("/abs",), ("a\x00b",), ("\udcff",), ("a" * 5000,)):
        decision = policy.evaluate(pol, Request(agent="", tool="", operation="", paths=paths))
        assert not decision.allowed or paths == ()
