"""The tool catalog: one declaration per tool, the offer, and chit-catalog/1."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from engine.auth import cbor
from engine.catalog.declarations import (
    CATALOG_ENCODING,
    TOOLS,
    encode_catalog,
    hash_catalog,
    tool_by_name,
)
from engine.tools.offer import offer_for
from engine.tools.table import handler_for

DESIGN_TOOLS = {
    "effective_scope": set(),
    "status": {"read"},
    "read_file": {"read"},
    "list_files": {"read"},
    "search_text": {"read"},
    "list_conflicts": {"read"},
    "log": {"read"},
    "diff": {"read"},
    "symbol_context": {"read"},
    "symbol_relations": {"read"},
    "search_symbols": {"read"},
    "change_impact": {"read"},
    "project_context": {"read"},
    "provenance_graph": {"read"},
    "write_file": {"write"},
    "delete_file": {"write"},
    "move_file": {"write"},
    "resolve_conflict": {"write"},
    "discard": {"write"},
    "commit": {"commit"},
    "issue_sub_token": {"sub-token:issue", "delegable"},
}
# Tools whose handlers come in later work. Both directions are pinned: a tool
# gaining a handler must be removed from here, and none may silently lose one.
WITHHELD: set[str] = set()
ALL_OPS = frozenset({"read", "write", "commit", "sub-token:issue"})
VECTORS = Path(__file__).parents[2] / "vectors" / "catalog_chit_catalog1.json"


def test_all_design_tools_declared_once_with_their_requirements() -> None:
    names = [t.name for t in TOOLS]
    assert len(names) == len(set(names)) == 21
    assert {t.name: set(t.requires) for t in TOOLS} == DESIGN_TOOLS


def test_withheld_set_is_exact() -> None:
    assert {t.name for t in TOOLS if handler_for(t.name) is None} == WITHHELD
    broadest = offer_for(ALL_OPS, True)
    assert set(broadest.names()) == set(DESIGN_TOOLS) - WITHHELD
    assert broadest.withheld == len(WITHHELD)


def test_effective_scope_always_offered() -> None:
    assert offer_for(frozenset(), False).names() == ["effective_scope"]


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ({"read"}, {"effective_scope", "status", "read_file", "log", "diff", "list_conflicts",
                    "provenance_graph", "symbol_context", "symbol_relations", "search_symbols",
                    "change_impact", "project_context", "list_files", "search_text"}),
        ({"write"}, {"effective_scope", "write_file", "delete_file", "move_file",
                     "resolve_conflict", "discard"}),
        ({"commit"}, {"effective_scope", "commit"}),
    ],
)
def test_offer_is_exactly_what_the_operations_unlock(ops: set[str], expected: set[str]) -> None:
    assert set(offer_for(frozenset(ops), False).names()) == expected


def test_annotations_follow_operations() -> None:
    for tool in TOOLS:
        assert tool.read_only == (not tool.requires & {"write", "commit", "sub-token:issue"})
    assert tool_by_name("delete_file").destructive  # type: ignore[union-attr]
    assert not tool_by_name("read_file").destructive  # type: ignore[union-attr]
    assert tool_by_name("READ_FILE") is None


def test_catalog_encoding_is_canonical_and_versioned() -> None:
    offer = offer_for(frozenset({"read"}), False)
    doc = cbor.decode(offer.catalog_bytes, max_size=len(offer.catalog_bytes))
    assert doc["encoding"] == CATALOG_ENCODING
    assert [t["name"] for t in doc["tools"]] == sorted(offer.names())
    assert cbor.encode(doc) == offer.catalog_bytes
    assert offer.catalog_hash == "sha256:" + hashlib.sha256(offer.catalog_bytes).hexdigest()
    # Order of the input never matters; the set of tools does.
    assert encode_catalog(reversed(offer.tools)) == offer.catalog_bytes
    other = offer_for(frozenset({"read", "write"}), False)
    assert other.catalog_hash != offer.catalog_hash
    for entry in doc["tools"]:
        assert set(entry) == {
            "name",
            "description",
            "input_schema",
            "output_schema",
            "annotations",
            "requires",
        }
        assert entry["input_schema"]["type"] == "object"


def test_catalog_vectors() -> None:
    """The published vectors pin the encoding: a change here is a new version."""
    vectors = json.loads(VECTORS.read_text())
    assert vectors["encoding"] == CATALOG_ENCODING
    for case in vectors["offers"]:
        confirm = frozenset(case.get("confirm", ()))
        offer = offer_for(frozenset(case["operations"]), case["delegable"], confirm=confirm)
        assert offer.names() == case["tools"]
        assert offer.catalog_bytes.hex() == case["hex"], case["name"]
        assert offer.catalog_hash == case["catalog_hash"]
        assert hash_catalog(bytes.fromhex(case["hex"])) == case["catalog_hash"]


def test_worked_example_vector() -> None:
    example = json.loads(VECTORS.read_text())["example"]
    data = cbor.encode(example["document"])
    assert data.hex() == example["hex"]
    assert hashlib.sha256(data).hexdigest() == example["sha256"]
    assert example["sha256"] == "de6f87e2144ca5d44e097c12753e03af8293d6ae07e4a8bbe4c57f50231c4480"


def test_issue_sub_token_needs_the_flag_and_the_operation() -> None:
    assert "issue_sub_token" not in offer_for(frozenset({"sub-token:issue"}), False).names()
    assert "issue_sub_token" not in offer_for(frozenset({"read"}), True).names()
    assert "issue_sub_token" in offer_for(frozenset({"sub-token:issue"}), True).names()


def test_issue_sub_token_says_how_the_helper_is_named() -> None:
    """An agent asking for ``helper`` instead of ``alice.helper`` learns the rule up front."""
    tool = tool_by_name("issue_sub_token")
    assert "<your agent>.<label>" in tool.description
    agent = tool.input_model.model_json_schema()["properties"]["agent"]
    assert "alice.tests" in agent["description"]
