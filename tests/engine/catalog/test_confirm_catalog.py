"""The ``confirm`` argument in the catalog: schemas and hashes with and without ``[confirm]``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import policy
from engine.auth import cbor
from engine.catalog import schemas as s
from engine.catalog.confirmation import confirmable, confirmed
from engine.catalog.declarations import TOOLS, tool_by_name
from engine.tools.offer import offer_for
from engine.tools.preview import _BUILDERS

ALL_OPS = frozenset({"read", "write", "commit", "sub-token:issue"})
CHANGING = frozenset(t.name for t in TOOLS if not t.read_only)
VECTORS = Path(__file__).parents[2] / "vectors" / "catalog_chit_catalog1.json"


def _inputs(catalog: bytes) -> dict[str, dict[str, object]]:
    doc = cbor.decode(catalog, max_size=len(catalog))
    return {t["name"]: t["input_schema"] for t in doc["tools"]}


def test_no_confirm_is_the_catalog_without_it() -> None:
    """Off by default: an empty [confirm] gives the very same offer, bytes and hash."""
    for ops, delegable in ((frozenset(), False), (frozenset({"read"}), False), (ALL_OPS, True)):
        plain = offer_for(ops, delegable)
        assert offer_for(ops, delegable, confirm=frozenset()) is plain
        for t in plain.tools:
            assert "confirm" not in t.input_model.model_fields


def test_listed_tools_gain_an_optional_confirm_and_no_other_changes() -> None:
    plain = offer_for(ALL_OPS, True)
    listed = frozenset({"delete_file", "commit", "issue_sub_token"})
    asked = offer_for(ALL_OPS, True, confirm=listed)
    assert asked.names() == plain.names()
    assert asked.catalog_hash != plain.catalog_hash
    before, after = _inputs(plain.catalog_bytes), _inputs(asked.catalog_bytes)
    for name in plain.names():
        if name not in listed:
            assert after[name] == before[name], name
            continue
        schema = dict(after[name])
        props = dict(schema.pop("properties"))  # type: ignore[call-overload]
        assert props.pop("confirm") == {
            "default": False,
            "description": "Set true to carry the call out. Without it nothing changes: the "
            "answer is confirmation_required with a preview of what the call would do.",
            "title": "Confirm",
            "type": "boolean",
        }
        assert "confirm" not in schema.get("required", [])
        expected = dict(before[name])
        assert props == expected.pop("properties")
        assert schema == expected
    # Output schemas, annotations and requirements are untouched.
    plain_doc = cbor.decode(plain.catalog_bytes, max_size=len(plain.catalog_bytes))
    asked_doc = cbor.decode(asked.catalog_bytes, max_size=len(asked.catalog_bytes))
    for a, b in zip(plain_doc["tools"], asked_doc["tools"], strict=True):
        assert {k: v for k, v in a.items() if k != "input_schema"} == {
            k: v for k, v in b.items() if k != "input_schema"
        }


def test_the_hash_depends_on_which_tools_are_listed() -> None:
    ops = frozenset({"read", "write", "commit"})
    hashes = {
        offer_for(ops, False, confirm=frozenset(c)).catalog_hash
        for c in ((), ("commit",), ("delete_file",), ("commit", "delete_file"))
    }
    assert len(hashes) == 4


def test_listed_tools_not_offered_change_nothing() -> None:
    """A read-only token's catalog (and a frozen engine's) is the same whatever [confirm] says."""
    read = frozenset({"read"})
    assert offer_for(read, False, confirm=CHANGING).catalog_hash == offer_for(
        read, False
    ).catalog_hash
    assert offer_for(ALL_OPS, True, True, CHANGING).catalog_hash == offer_for(
        ALL_OPS, True, True
    ).catalog_hash
    writer = offer_for(frozenset({"read", "write"}), False)
    assert offer_for(
        frozenset({"read", "write"}), False, confirm=frozenset({"commit", "issue_sub_token"})
    ).catalog_hash == writer.catalog_hash


def test_the_confirm_vector() -> None:
    """docs/catalog-encoding.md "Confirmation": the published offer with [confirm]."""
    offers = json.loads(VECTORS.read_text())["offers"]
    with_confirm = [case for case in offers if "confirm" in case]
    assert [case["confirm"] for case in with_confirm] == [["commit", "delete_file"]]
    case = with_confirm[0]
    offer = offer_for(
        frozenset(case["operations"]), case["delegable"], confirm=frozenset(case["confirm"])
    )
    assert offer.catalog_bytes.hex() == case["hex"]
    assert offer.catalog_hash == case["catalog_hash"]
    plain = next(c for c in offers if c["operations"] == case["operations"] and "confirm" not in c)
    assert plain["catalog_hash"] != case["catalog_hash"]
    doc = Path(__file__).parents[3] / "docs" / "catalog-encoding.md"
    assert case["catalog_hash"] in doc.read_text()


def test_the_confirm_argument_is_strict_and_only_where_listed() -> None:
    model = confirmable(s.DeleteFileArgs)
    assert confirmable(s.DeleteFileArgs) is model
    assert confirmed(model.model_validate({"path": "a", "confirm": True}))
    assert not confirmed(model.model_validate({"path": "a", "confirm": False}))
    assert not confirmed(model.model_validate({"path": "a"}))
    for wrong in ("true", 1, None):
        with pytest.raises(ValidationError):
            model.model_validate({"path": "a", "confirm": wrong})
    with pytest.raises(ValidationError):
        s.DeleteFileArgs.model_validate({"path": "a", "confirm": True})
    assert isinstance(model.model_validate({"path": "a"}), s.DeleteFileArgs)
    spec = tool_by_name("delete_file")
    assert spec is not None and spec.input_model is s.DeleteFileArgs


def test_every_confirmable_tool_has_a_preview_and_policy_agrees() -> None:
    """The policy accepts exactly the engine's changing tools, and each has a preview."""
    assert set(_BUILDERS) == CHANGING
    assert policy.load(f"[confirm]\ntools = {sorted(CHANGING)!r}\n").confirm.tools == tuple(
        sorted(CHANGING)
    )
    for t in TOOLS:
        if t.read_only:
            with pytest.raises(policy.PolicyError):
                policy.load(f"[confirm]\ntools = [{t.name!r}]\n")
