"""The engine's typed answers: their JSON form, read-only, and reading them from the wire."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from engine.service import (
    AnswerError,
    Called,
    Offered,
    OfferedTool,
    Refused,
    read_call,
    read_offer,
    read_refusal,
)

TOOL = OfferedTool("read_file", "Read a file.", {"type": "object"}, None, True, False)
OFFER_JSON = {
    "ok": True,
    "tools": [{"name": "read_file", "description": "Read a file.",
               "input_schema": {"type": "object"}, "output_schema": None,
               "annotations": {"readOnlyHint": True, "destructiveHint": False}}],
    "catalog_hash": "sha256:" + "1" * 64,
    "catalog_encoding": "chit-catalog/1",
    "withheld": 17,
}


def test_each_answer_is_exactly_its_json_form() -> None:
    offered = Offered((TOOL,), "sha256:" + "1" * 64, "chit-catalog/1", 17)
    assert offered == OFFER_JSON and offered.ok is True
    assert json.dumps(offered) == json.dumps(OFFER_JSON)
    called = Called({"path": "a", "size": 1})
    assert called == {"ok": True, "result": {"path": "a", "size": 1}} and called.ok is True
    refused = Refused("token_expired", "expired", {"expired_at": 5})
    assert refused == {"ok": False, "error": {"error": "token_expired", "message": "expired",
                                              "expired_at": 5}}
    assert refused.error == refused["error"] and refused.ok is False
    assert json.dumps(refused) == (
        '{"ok": false, "error": {"error": "token_expired", "message": "expired", '
        '"expired_at": 5}}')


def test_answers_are_read_only() -> None:
    called = Called({"x": 1})
    for change in (lambda: called.__setitem__("ok", False), lambda: called.pop("ok"),
                   lambda: called.update(ok=False), called.clear, called.popitem,
                   lambda: called.setdefault("y", 1), lambda: called.__delitem__("ok")):
        with pytest.raises(TypeError):
            change()
    with pytest.raises(AttributeError):
        called.result = {}  # type: ignore[misc]
    assert called == {"ok": True, "result": {"x": 1}}


def test_copies_are_answers_and_results_stay_out_of_repr() -> None:
    refused = Refused("conflict", "moved", {"paths": ["a"]})
    for twin in (copy.copy(refused), copy.deepcopy(refused)):
        assert type(twin) is Refused and twin == refused
    assert "secret" not in repr(Called({"token": "secret"}))


def test_wire_answers_are_read_back() -> None:
    assert read_offer(json.loads(json.dumps(OFFER_JSON))) == OFFER_JSON
    assert read_offer(OFFER_JSON).tools == (TOOL,)
    refusal = {"ok": False, "error": {"error": "new_code", "message": "m", "hint": [1]}}
    for read in (read_offer, read_call, read_refusal):
        got = read(refusal)
        assert isinstance(got, Refused) and got == refusal and got.hints == {"hint": [1]}
    assert read_call({"ok": True, "result": {"a": None}}) == Called({"a": None})
    assert read_offer(dict(OFFER_JSON, extra=1)) == OFFER_JSON  # fields beyond the API: dropped


@pytest.mark.parametrize("doc", [
    None, [], {}, {"ok": True}, {"ok": "yes"},
    {"ok": False, "error": "token_expired"},
    {"ok": False, "error": {"error": 1, "message": "m"}},
    dict(OFFER_JSON, tools="x"),
    dict(OFFER_JSON, tools=[{"name": "x"}]),
    dict(OFFER_JSON, catalog_hash=None),
    dict(OFFER_JSON, catalog_encoding=None),
    dict(OFFER_JSON, withheld=True),
    dict(OFFER_JSON, tools=[dict(OFFER_JSON["tools"][0], annotations={"readOnlyHint": 1,
                                                                      "destructiveHint": False})]),
])
def test_offers_off_the_api_are_refused(doc: Any) -> None:
    with pytest.raises(AnswerError):
        read_offer(doc)


@pytest.mark.parametrize("doc", [
    None, {}, {"ok": True}, {"ok": True, "result": []}, {"ok": True, "result": None},
    {"ok": 1, "result": {}}, {"ok": False, "error": {"message": "m"}},
])
def test_results_off_the_api_are_refused(doc: Any) -> None:
    with pytest.raises(AnswerError):
        read_call(doc)
    with pytest.raises(AnswerError):
        read_refusal(doc)
