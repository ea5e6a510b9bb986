"""``[[approval]]`` tables: loading, refusals with locations, and which table a call meets."""

from __future__ import annotations

import pytest

import policy
from policy.approval import MAX_APPROVALS, ApprovalRule, approval_for, approval_match

TABLES = """
[[approval]]
tools = ["commit"]
paths = ["deploy/**"]
approvers = ["alice", "group:release"]
ttl = 3600
reason = "deployments need a release manager"

[[approval]]
agents = ["ci-*"]
operations = ["sub-token:issue"]
approvers = ["bob"]
ttl = 60
"""


def _problems(text: str) -> dict[str, str]:
    with pytest.raises(policy.PolicyError) as info:
        policy.load(text)
    return dict(info.value.problems)


def _request(tool: str, paths: tuple[str, ...] = (), agent: str = "docs-bot") -> policy.Request:
    return policy.Request(
        agent=agent, tool=tool, operation=policy.TOOL_OPERATIONS[tool], paths=paths
    )


def test_tables_load_in_file_order() -> None:
    loaded = policy.load(TABLES)
    assert [t.approvers for t in loaded.approval] == [("alice", "group:release"), ("bob",)]
    first = loaded.approval[0]
    assert first.ttl == 3600 and first.reason.startswith("deployments")
    assert first.operators() == ("alice",) and first.groups() == ("release",)


def test_a_policy_without_tables_keeps_its_dump() -> None:
    """Policies that do not use approvals keep their hash: the field is left out empty."""
    assert "approval" not in policy.load("").model_dump()
    assert "approval" in policy.load(TABLES).model_dump()


def test_the_first_matching_table_decides() -> None:
    loaded = policy.load(TABLES + TABLES.replace('"alice", ', ""))
    found = approval_match(loaded.approval, _request("commit", ("deploy/prod.toml",)))
    assert found is not None and found[0] == 0
    assert approval_for(loaded, _request("commit", ("src/app.py",))) is None
    # A call with no paths does not match a table that has paths.
    assert approval_for(loaded, _request("commit")) is None


def test_paths_match_as_deny_rules_do() -> None:
    """Threat: a commit dodging approval by spelling a protected path another way."""
    loaded = policy.load(TABLES)
    for spelled in ("deploy/prod.toml", "DEPLOY/prod.toml", "deploy/a/b/c", "deploy./x"):
        assert approval_for(loaded, _request("commit", ("src/x.py", spelled))) is not None
    assert approval_for(loaded, _request("commit", ("deployment/x",))) is None


def test_agents_and_operations_select() -> None:
    loaded = policy.load(TABLES)
    rule = approval_for(loaded, _request("issue_sub_token", (), agent="ci-main"))
    assert rule is not None and rule.approvers == ("bob",)
    assert approval_for(loaded, _request("issue_sub_token", (), agent="docs-bot")) is None
    assert approval_for(loaded, _request("write_file", ("deploy/x",), agent="ci-main")) is None


def test_allows_names_and_groups() -> None:
    rule = policy.load(TABLES).approval[0]
    assert rule.allows("alice", frozenset())
    assert rule.allows("carol", frozenset({"release"}))
    assert not rule.allows("carol", frozenset({"ops"}))
    assert not rule.allows("release", frozenset())  # a group's name is not an operator's


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('tools = ["commit"]\nttl = 60', "approval[0].approvers"),
        ('approvers = []\nttl = 60', "approval[0].approvers"),
        ('approvers = ["a", "a"]\nttl = 60', "approval[0].approvers"),
        ('approvers = ["Alice"]\nttl = 60', "approval[0].approvers[0]"),
        ('approvers = ["group:"]\nttl = 60', "approval[0].approvers[0]"),
        ('approvers = ["a"]', "approval[0].ttl"),
        ('approvers = ["a"]\nttl = 59', "approval[0].ttl"),
        ('approvers = ["a"]\nttl = 604801', "approval[0].ttl"),
        ('approvers = ["a"]\nttl = 60\ntools = ["rm_rf"]', "approval[0].tools[0]"),
        ('approvers = ["a"]\nttl = 60\ntools = []', "approval[0].tools"),
        ('approvers = ["a"]\nttl = 60\npaths = ["/abs"]', "approval[0].paths[0]"),
        ('approvers = ["a"]\nttl = 60\nreason = "a\\nb"', "approval[0].reason"),
        ('approvers = ["a"]\nttl = 60\nsurprise = 1', "approval[0].surprise"),
        ('approvers = ["a"]\nttl = 60\ntools = ["commit"]\noperations = ["read"]',
         "approval[0].operations"),
    ],
)
def test_invalid_tables_are_refused_with_their_location(body: str, where: str) -> None:
    assert where in _problems("[[approval]]\n" + body + "\n")


def test_at_most_max_approvals_tables() -> None:
    table = '[[approval]]\napprovers = ["a"]\nttl = 60\n'
    assert len(policy.load(table * MAX_APPROVALS).approval) == MAX_APPROVALS
    assert "approval" in _problems(table * (MAX_APPROVALS + 1))


def test_the_model_is_frozen() -> None:
    rule = ApprovalRule(approvers=("a",), ttl=60)
    with pytest.raises(ValueError, match="frozen"):
        rule.ttl = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("requested", "meets"),
    [
        ("deploy/**", True),
        ("**", True),
        ("*/prod.toml", True),
        ("Deploy/*", True),
        ("deploy/prod.toml", True),
        ("src/**", False),
        ("deployment/**", False),
        ("src/deploy/**", False),
    ],
)
def test_a_requested_scope_meets_a_table_by_overlap(requested: str, meets: bool) -> None:
    """Threat: a delegation asking for ``**`` to dodge a table on ``deploy/**``."""
    loaded = policy.load(TABLES.replace('tools = ["commit"]', 'tools = ["issue_sub_token"]'))
    found = approval_for(loaded, _request("issue_sub_token", (requested,)))
    assert (found is not None and found.approvers[0] == "alice") is meets
