"""The pieces of the MCP answer to a waiting call: ids, state, messages, waits, the page."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.request_state import InvalidRequestState
from mcp.shared.exceptions import MCPError

from engine.service import Called, Refused
from gateway import approvals
from gateway.approvals.answers import META_KEY
from gateway.http_edge.approval_page import ApprovalBook, render

APPROVAL_ID = "apr_" + "a" * 26
OTHER_ID = "apr_" + "b" * 26


def _hints(**extra: Any) -> dict[str, Any]:
    return {"id": APPROVAL_ID, "tool": "commit", "paths": ["src/a.py", "src/b.py"],
            "summary": {"message": "Fix"}, "approvers": ["ops", "group:leads"],
            "reason": "protected paths", "expires_at": 2_000_000_000, **extra}


def _waiting(**extra: Any) -> Refused:
    return Refused("approval_required", "this call waits for an approval",
                   {"approval": _hints(**extra), "waits": f"chit approve {APPROVAL_ID}"})


@pytest.mark.parametrize(("value", "ok"), [
    (APPROVAL_ID, True),
    ("apr_" + "a" * 25, False),
    ("apr_" + "A" * 26, False),
    ("apr_" + "1" * 26, False),  # 0, 1, 8, 9 are not base32
    ("xpr_" + "a" * 26, False),
    (APPROVAL_ID + "\n", False),
    (None, False),
    (5, False),
])
def test_approval_ids_have_one_form(value: object, ok: bool) -> None:
    assert approvals.valid_approval_id(value) is ok


def test_only_an_approval_required_refusal_with_a_good_id_is_a_wait() -> None:
    assert approvals.approval_of(_waiting()) == _hints()
    assert approvals.approval_of(Refused("approval_denied", "no", {"approval": _hints()})) is None
    assert approvals.approval_of(Called({"approval": _hints()})) is None
    bad = Refused("approval_required", "m", {"approval": {"id": "apr_x"}})
    assert approvals.approval_of(bad) is None
    assert approvals.approval_of(Refused("approval_required", "m")) is None


def test_the_input_required_result_carries_the_id_in_its_state_and_the_refusal() -> None:
    answer = _waiting()
    result = approvals.input_required(answer, _hints())
    assert result.result_type == "input_required" and not result.input_requests
    assert result.request_state is not None
    assert json.loads(result.request_state) == {"v": 1, "approval": APPROVAL_ID}
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire["_meta"][META_KEY] == answer.error
    params = types.CallToolRequestParams(name="commit", request_state=result.request_state)
    assert approvals.approval_from_state(params) == APPROVAL_ID
    assert approvals.approval_from_state(types.CallToolRequestParams(name="commit")) is None


@pytest.mark.parametrize("state", ["", "not json", json.dumps({"v": 2, "approval": APPROVAL_ID}),
                                   '{"v": 1, "approval": "apr_x"}', "[1]"])
def test_a_state_this_edge_does_not_mint_is_refused(state: str) -> None:
    # Threat: a client-made state reaching the engine as an approval id.
    with pytest.raises(MCPError) as err:
        approvals.approval_from_state(types.CallToolRequestParams(name="t", request_state=state))
    assert err.value.error.code == types.INVALID_PARAMS


def test_a_state_sealed_under_another_key_does_not_open() -> None:
    # Threat: state minted by another home (another key) accepted here.
    ours = approvals.state_security([b"k" * 32], lambda _ctx: None)
    theirs = approvals.state_security([b"x" * 32], lambda _ctx: None)
    sealed = theirs.codec.seal(b"payload")
    with pytest.raises(InvalidRequestState):
        ours.codec.unseal(sealed)
    assert ours.codec.unseal(ours.codec.seal(b"payload")) == b"payload"
    # An edge without the home's keys seals under a key of its own process.
    own = approvals.state_security(None, lambda _ctx: None)
    with pytest.raises(InvalidRequestState):
        own.codec.unseal(ours.codec.seal(b"payload"))
    assert ours.ttl == approvals.REQUEST_STATE_SECONDS and ours.audience == approvals.AUDIENCE


def test_the_elicitation_says_what_waits_and_who_approves() -> None:
    text = approvals.elicitation_message(_hints())
    assert "commit" in text and "src/a.py, src/b.py" in text
    assert "ops, group:leads" in text and "protected paths" in text
    assert f"chit approve {APPROVAL_ID} --as NAME" in text
    many = approvals.elicitation_message(_hints(paths=[f"p{i}" for i in range(9)],
                                                approvers=[], reason=None))
    assert "and 4 more" in many and "p5" not in many and "an operator the policy names" in many
    error = approvals.url_elicitation(_hints(), "https://a.example/x")
    assert error.error.code == approvals.URL_ELICITATION_REQUIRED == -32042
    [elicitation] = error.error.data["elicitations"]
    assert elicitation == {"mode": "url", "elicitationId": APPROVAL_ID,
                           "url": "https://a.example/x", "message": text}


def test_waits_settle_on_a_decision_or_on_the_clock() -> None:
    waits = approvals.Waits(limit=2)
    waits.add(_hints())
    waits.add(_hints(id=OTHER_ID, expires_at=100))
    assert len(waits) == 2
    assert waits.settle({APPROVAL_ID, OTHER_ID}, now=50) == []
    assert waits.settle(None, now=100) == [OTHER_ID]  # past its time
    assert waits.settle({OTHER_ID}, now=0) == [APPROVAL_ID]  # no longer pending: decided
    assert len(waits) == 0
    for i in range(3):
        waits.add(_hints(id="apr_" + "abc"[i] * 26))
    assert waits.settle(set(), now=0) == ["apr_" + "b" * 26, "apr_" + "c" * 26]


def test_pending_ids_are_read_from_the_status_result() -> None:
    listed = Called({"session": "s", "approvals": [{"id": APPROVAL_ID, "tool": "commit"},
                                                   {"id": "bad"}, "x"]})
    assert approvals.pending_in_status(listed) == {APPROVAL_ID}
    assert approvals.pending_in_status(Called({"session": "s"})) is None
    assert approvals.pending_in_status(Refused("token_revoked", "m")) is None


def test_a_check_tells_the_client_of_each_settled_approval() -> None:
    waits = approvals.Waits()
    waits.add(_hints())
    waits.add(_hints(id=OTHER_ID))
    told: list[str] = []

    async def status() -> Called:
        return Called({"approvals": [{"id": OTHER_ID}]})

    async def notify(approval_id: str) -> None:
        told.append(approval_id)

    async def go() -> tuple[list[str], list[str]]:
        clock = await waits.check(status, notify, ask=False)
        asked = await waits.check(status, notify)
        return clock, asked

    assert anyio.run(go) == ([], [APPROVAL_ID]) and told == [APPROVAL_ID]


def test_the_page_escapes_what_the_hints_hold() -> None:
    # Threat: an agent-chosen path or message turning the operator's page into a script.
    page = render(APPROVAL_ID, _hints(paths=["src/<script>alert(1)</script>.py"],
                                      summary={"message": "<img src=x onerror=alert(1)>"}))
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;" in page and f"chit approve {APPROVAL_ID} --as NAME" in page
    assert "<form" not in page and "<button" not in page  # read-only
    unknown = render(OTHER_ID, None)
    assert "no details" in unknown and f"chit approvals show {OTHER_ID}" in unknown


def test_the_book_forgets_the_oldest() -> None:
    book = ApprovalBook(size=1)
    book.note(_hints())
    book.note(_hints(id=OTHER_ID))
    assert book.get(APPROVAL_ID) is None and book.get(OTHER_ID) is not None


class _Moving:
    """A change feed that has moved each time it is asked."""

    def wait_change(self, after: int, timeout: float) -> int:
        return after + 1


def test_a_retry_is_held_only_for_its_own_pending_approval_and_within_bounds() -> None:
    asked: list[str] = []

    async def ask() -> Called:
        asked.append("again")
        return Called({"commit": "c"})

    async def go() -> list[Any]:
        hold, full = approvals.Hold(_Moving()), approvals.Hold(_Moving(), limit=0)
        return [
            await hold.again(_waiting(), None, ask),  # not a retry
            await hold.again(_waiting(), OTHER_ID, ask),  # a retry of another approval
            await hold.again(Refused("approval_denied", "no"), APPROVAL_ID, ask),
            await full.again(_waiting(), APPROVAL_ID, ask),  # no hold free
            await hold.again(_waiting(), APPROVAL_ID, ask),  # held, then asked again
        ]

    answers = anyio.run(go)
    assert [a.code for a in answers[:4]] == [
        "approval_required", "approval_required", "approval_denied", "approval_required"]
    assert answers[4] == Called({"commit": "c"}) and asked == ["again"]
