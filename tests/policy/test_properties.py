"""Property tests (hypothesis) for policy evaluation.

Random policies and requests, checked against a plain reference reading of
docs/policy.md ("Evaluation"), and for the properties the order promises: a deny
wins whatever the file order, adding a deny never allows more, adding an allow
never refuses more, and evaluation never raises.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import policy
from policy import Decision, Policy, Request
from policy._pattern import MAX_SUBJECT_CHARS, compile_message_pattern
from policy.paths import deny_matches, glob_matches, in_scope, validate_path

AGENTS = ["alice", "bob", "ci-a", "ci-bb", "docs-bot", "docs-bot.gz", "docs-bot.gz.x", "lead.x"]
AGENT_PATTERNS = ["*", "**", "ci-*", "ci-?", "docs-bot", "docs-bot.**", "*.x", "**.x", "alice"]
TOOLS = sorted(policy.TOOL_OPERATIONS)
SEGMENTS = ["src", "docs", "a.py", "B.md", ".env", "x", "API", "ci"]
GLOBS = ["src/**", "docs/**", "**/*.py", "**/.env", "*", "src", "x/**", "**", "ci/*", "**/api"]

paths_st = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4).map("/".join)


@st.composite
def rules_st(draw: st.DrawFn, effect: str | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"effect": effect or draw(st.sampled_from(["allow", "deny"]))}
    if draw(st.booleans()):
        rule["agents"] = draw(
            st.lists(st.sampled_from(AGENT_PATTERNS), min_size=1, max_size=3, unique=True)
        )
    if draw(st.booleans()):
        rule["tools"] = draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4, unique=True))
    elif draw(st.booleans()):
        rule["operations"] = draw(
            st.lists(
                st.sampled_from(sorted(policy.OPERATIONS)), min_size=1, max_size=2, unique=True
            )
        )
    if draw(st.booleans()):
        rule["paths"] = draw(st.lists(st.sampled_from(GLOBS), min_size=1, max_size=3, unique=True))
    return rule


@st.composite
def policies_st(draw: st.DrawFn) -> dict[str, Any]:
    default = draw(st.sampled_from(["allow", "deny"]))
    effects = st.sampled_from(["deny"] if default == "allow" else ["allow", "deny"])
    rules = draw(st.lists(effects.flatmap(lambda e: rules_st(e)), max_size=8))
    doc: dict[str, Any] = {"default": default, "rules": rules}
    doc["limits"] = {
        "file_bytes": draw(st.integers(1, 20)),
        "staged_files": draw(st.integers(1, 5)),
        "files_per_commit": draw(st.integers(1, 5)),
    }
    doc["paths"] = {
        "forbidden": draw(st.lists(st.sampled_from(GLOBS[:5]), max_size=2, unique=True))
    }
    return doc


@st.composite
def requests_st(draw: st.DrawFn) -> Request:
    tool = draw(st.sampled_from(TOOLS))
    return Request(
        agent=draw(st.sampled_from(AGENTS)),
        tool=tool,
        operation=policy.TOOL_OPERATIONS[tool],
        paths=tuple(draw(st.lists(paths_st, max_size=3))),
        content_bytes=draw(st.integers(0, 25)),
        staged_files=draw(st.integers(0, 6)),
        commit_files=draw(st.integers(0, 6)),
    )


def _agent_ok(patterns: tuple[str, ...] | None, agent: str) -> bool:
    if patterns is None:
        return True
    return any(glob_matches(p.replace(".", "/"), agent.replace(".", "/")) for p in patterns)


def reference(pol: Policy, r: Request) -> tuple[bool, str | None, str | None]:
    """docs/policy.md "Evaluation", read literally, with no index and no caches."""
    for path in r.paths:
        try:
            validate_path(path)
        except ValueError as exc:
            return False, getattr(exc, "code", "path_invalid"), "builtin.paths"
    for path in r.paths:
        if deny_matches(path, list(pol.paths.forbidden)):
            return False, "path_forbidden", "paths.forbidden"
        # paths.protected refuses nothing: sealed at rest (docs/sealing.md).

    def applies(rule: policy.Rule) -> bool:
        return (
            _agent_ok(rule.agents, r.agent)
            and (rule.tools is None or r.tool in rule.tools)
            and (rule.operations is None or r.operation in rule.operations)
        )

    for i, rule in enumerate(pol.rules):
        if rule.effect == "deny" and applies(rule):
            if rule.paths is None or any(deny_matches(p, list(rule.paths)) for p in r.paths):
                return False, "policy_denied", f"rules[{i}]"
    allowed_by = "default"
    if pol.default == "deny":
        for i, rule in enumerate(pol.rules):
            if rule.effect == "allow" and applies(rule):
                if rule.paths is None or all(in_scope(p, list(rule.paths)) for p in r.paths):
                    allowed_by = f"rules[{i}]"
                    break
        else:
            return False, "policy_denied", "default"
    limits = pol.limits
    for rule, value, limit in (
        ("limits.file_bytes", r.content_bytes, limits.file_bytes),
        ("limits.staged_bytes", r.staged_bytes, limits.staged_bytes),
        ("limits.staged_files", r.staged_files, limits.staged_files),
        ("limits.files_per_commit", r.commit_files, limits.files_per_commit),
    ):
        if value > limit:
            return False, "limit_exceeded", rule
    return True, None, allowed_by


def outcome(d: Decision) -> tuple[bool, str | None, str | None]:
    return d.allowed, d.code, d.rule


@settings(max_examples=400)
@given(policies_st(), st.lists(requests_st(), min_size=1, max_size=5))
def test_evaluate_agrees_with_the_documented_order(
    doc: dict[str, Any], requests: list[Request]
) -> None:
    pol = Policy.model_validate(doc)
    for r in requests:  # several requests per policy: the memoised selections are exercised
        assert outcome(policy.evaluate(pol, r)) == reference(pol, r)


@settings(max_examples=300)
@given(policies_st(), requests_st(), st.randoms(use_true_random=False))
def test_the_decision_does_not_depend_on_rule_order(
    doc: dict[str, Any], r: Request, rnd: Any
) -> None:
    """Deny wins wherever it is listed; only which rule is named may change."""
    pol = Policy.model_validate(doc)
    shuffled = dict(doc, rules=rnd.sample(doc["rules"], len(doc["rules"])))
    first, second = policy.evaluate(pol, r), policy.evaluate(Policy.model_validate(shuffled), r)
    assert first.allowed == second.allowed and first.code == second.code


@settings(max_examples=300)
@given(policies_st(), requests_st(), rules_st("deny"), st.integers(0, 8))
def test_adding_a_deny_rule_never_allows_more(
    doc: dict[str, Any], r: Request, extra: dict[str, Any], at: int
) -> None:
    before = policy.evaluate(Policy.model_validate(doc), r)
    rules = list(doc["rules"])
    rules.insert(min(at, len(rules)), extra)
    after = policy.evaluate(Policy.model_validate(dict(doc, rules=rules)), r)
    assert before.allowed or not after.allowed


@settings(max_examples=300)
@given(policies_st(), requests_st(), rules_st("allow"), st.integers(0, 8))
def test_adding_an_allow_rule_never_refuses_more(
    doc: dict[str, Any], r: Request, extra: dict[str, Any], at: int
) -> None:
    doc = dict(doc, default="deny")
    before = policy.evaluate(Policy.model_validate(doc), r)
    rules = list(doc["rules"])
    rules.insert(min(at, len(rules)), extra)
    after = policy.evaluate(Policy.model_validate(dict(doc, rules=rules)), r)
    assert after.allowed or not before.allowed


@settings(max_examples=300)
@given(
    policies_st(),
    st.text(max_size=20),
    st.text(max_size=20),
    st.text(max_size=20),
    st.lists(st.text(max_size=30), max_size=3),
    st.none() | st.text(max_size=300),
)
def test_evaluate_never_raises(
    doc: dict[str, Any], agent: str, tool: str, op: str, paths: list[str], message: str | None
) -> None:
    pol = Policy.model_validate(doc)
    r = Request(agent=agent, tool=tool, operation=op, paths=tuple(paths), message=message)
    decision = policy.evaluate(pol, r)
    assert decision.allowed == (decision.code is None)
    assert decision.rule is not None
    if not decision.allowed:
        assert decision.reasons


PIECES = ["a", "b", ".", "[a-z]", "\\d", "\\w", "\\.", " ", "(a|b)", "(?:ab)", "(x|yz|w)"]
QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?"]


@st.composite
def patterns_st(draw: st.DrawFn) -> str:
    parts = draw(
        st.lists(
            st.tuples(st.sampled_from(PIECES), st.sampled_from(QUANTIFIERS)),
            min_size=1,
            max_size=10,
        )
    )
    pattern = "".join(p + q for p, q in parts)
    if draw(st.booleans()):
        pattern = f"({pattern})+"
    return pattern


@settings(max_examples=200)
@given(
    patterns_st(), st.lists(st.text(alphabet="ab xyzw1.", max_size=MAX_SUBJECT_CHARS), max_size=3)
)
def test_accepted_message_patterns_are_plain_regular_expressions(
    pattern: str, subjects: list[str]
) -> None:
    """What the subset accepts is plain ``re``, and matching it against long, repetitive
    subjects finishes (a pattern that backtracks badly would stall this test)."""
    try:
        compiled = compile_message_pattern(pattern)
    except ValueError:
        return
    reference_ = re.compile(pattern)
    for subject in [*subjects, "a" * MAX_SUBJECT_CHARS, "ab " * (MAX_SUBJECT_CHARS // 3)]:
        assert (compiled.fullmatch(subject) is None) == (reference_.fullmatch(subject) is None)


@settings(max_examples=200)
@given(patterns_st())
def test_nested_repetition_is_always_refused(pattern: str) -> None:
    inner_quantified = any(q in pattern for q in ("*", "+", "{", "|"))
    wrapped = f"(?:{pattern})*"
    if inner_quantified:
        try:
            compile_message_pattern(wrapped)
        except ValueError:
            return
        raise AssertionError(f"accepted {wrapped!r}")
