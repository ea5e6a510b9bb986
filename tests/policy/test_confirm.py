"""``[confirm]``: which tools must be called with ``"confirm": true`` (docs/policy.md)."""

from __future__ import annotations

import pytest

import policy
from engine.audit import provenance
from policy.tools import CHANGING_OPERATIONS, TOOL_OPERATIONS

CHANGING = sorted(t for t, op in TOOL_OPERATIONS.items() if op in CHANGING_OPERATIONS)


def problems(text: str) -> list[tuple[str, str, int | None]]:
    with pytest.raises(policy.PolicyError) as info:
        policy.load(text)
    return [(loc, msg, line) for (loc, msg), line in
            zip(info.value.problems, info.value.lines, strict=True)]


def test_off_by_default() -> None:
    loaded = policy.load("version = 1\n")
    assert loaded.confirm == policy.Confirm() and loaded.confirm.tools == ()
    assert not any(loaded.confirm.covers(tool) for tool in TOOL_OPERATIONS)


def test_listed_tools_are_covered_and_nothing_else() -> None:
    loaded = policy.load('[confirm]\ntools = ["delete_file", "commit"]\n')
    assert loaded.confirm.tools == ("delete_file", "commit")
    assert {t for t in TOOL_OPERATIONS if loaded.confirm.covers(t)} == {"delete_file", "commit"}
    assert not loaded.confirm.covers("Delete_file")
    assert policy.load(f"[confirm]\ntools = {CHANGING!r}\n").confirm.tools == tuple(CHANGING)


def test_an_absent_or_empty_confirm_keeps_the_policy_hash() -> None:
    """An upgrade changes no deployment: the hash commits record stays the same."""
    base = policy.DEFAULT_POLICY_TOML
    before = provenance.policy_hash(policy.load(base))
    assert provenance.policy_hash(policy.load(base + "\n[confirm]\n")) == before
    assert provenance.policy_hash(policy.load(base + "\n[confirm]\ntools = []\n")) == before
    assert "confirm" not in policy.load(base).model_dump(mode="json")
    listed = policy.load(base + '\n[confirm]\ntools = ["commit"]\n')
    assert provenance.policy_hash(listed) != before
    assert listed.model_dump(mode="json")["confirm"] == {"tools": ["commit"]}


def test_an_unknown_tool_is_an_error_with_its_line() -> None:
    """Threat: a misspelt name silently leaves a destructive tool unconfirmed."""
    text = 'version = 1\n\n[confirm]\ntools = ["commit", "delte_file"]\n'
    [(where, message, line)] = problems(text)
    assert where == "confirm.tools[1]"
    assert message.startswith("unknown tool 'delte_file'; known: ")
    assert line == 4


def test_a_tool_listed_twice_is_an_error() -> None:
    assert problems('[confirm]\ntools = ["commit", "discard", "commit"]\n') == [
        ("confirm.tools", "lists 'commit' more than once", 2)
    ]


@pytest.mark.parametrize("tool", sorted(t for t in TOOL_OPERATIONS if t not in CHANGING))
def test_a_tool_that_changes_nothing_is_an_error(tool: str) -> None:
    [(where, message, _line)] = problems(f'[confirm]\ntools = ["{tool}"]\n')
    assert where == "confirm.tools[0]"
    assert message.startswith(f"{tool!r} changes nothing, so there is nothing to confirm")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[confirm]\ntools = "commit"\n', "confirm.tools"),
        ("[confirm]\ntools = [1]\n", "confirm.tools[0]"),
        ('[confirm]\ntool = ["commit"]\n', "confirm.tool"),
        ('confirm = ["commit"]\n', "confirm"),
    ],
)
def test_a_wrong_shape_is_an_error(text: str, where: str) -> None:
    assert [loc for loc, _msg, _line in problems(text)] == [where]
