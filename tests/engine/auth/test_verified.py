"""What the engine builds on a verified token uses the bytes that verified, not text parsed again.

Threat: a handler that re-parses the token's text could build a delegation or a
provenance record from bytes other than those whose MAC was checked (a second
parse of different text, or of text an edge altered between calls), and a
handler holding the raw text could leak it. Delegation and provenance take the
``VerifiedToken`` alone; the call context carries no token text.
"""

from __future__ import annotations

import dataclasses
import secrets

from engine.audit.provenance import delegation_chain
from engine.auth import token as t
from engine.auth.verify import verify_at_time
from engine.tools.context import CallContext

KEY = secrets.token_bytes(32)
KID = "r20261201-test"
NOW = 1_800_000_000


def keys(kid: str) -> bytes | None:
    return KEY if kid == KID else None


def lead() -> str:
    root = t.mint(KEY, KID, agent="lead", operations=["read", "write", "sub-token:issue"],
                  paths=["src/**"], expires_at=NOW + 3600, delegable=True)
    return t.attenuate(root, paths=["src/api/**"])


def test_a_verified_token_holds_exactly_the_blocks_that_verified() -> None:
    text = lead()
    verified = verify_at_time(text, keys, NOW)
    assert verified.blocks == t.parse(text).blocks
    assert len(verified.blocks) == len(verified.block_ids) == 2
    # The tag never shows: not in repr, not in comparisons.
    assert "parsed" not in repr(verified) and verified.parsed._tag.hex() not in repr(verified)


def test_a_delegation_chains_onto_the_verified_token() -> None:
    verified = verify_at_time(lead(), keys, NOW)
    child, child_id = t.delegate(verified.parsed, KEY, agent="lead.helper",
                                 operations=["read"], paths=["src/api/v1/**"],
                                 expires_at=NOW + 600)
    grown = verify_at_time(child, keys, NOW)
    assert grown.agent == "lead.helper" and grown.token_id == child_id
    assert grown.blocks[:2] == verified.blocks
    assert grown.operations == frozenset({"read"})
    assert [agent for _id, agent in grown.chain] == ["lead", "lead.helper"]


def test_provenance_hops_come_from_the_verified_blocks() -> None:
    verified = verify_at_time(lead(), keys, NOW)
    child, child_id = t.delegate(verified.parsed, KEY, agent="lead.helper",
                                 operations=["read"], paths=["src/api/v1/**"],
                                 expires_at=NOW + 600)
    hops = delegation_chain(verify_at_time(child, keys, NOW), {child_id: NOW})
    assert [h.agent for h in hops] == ["lead", "lead.helper"]
    assert hops[0].paths == (("src/**",), ("src/api/**",)) and hops[0].delegable
    assert hops[1].ops == ("read",) and hops[1].issued_at == NOW
    assert hops[1].paths == (("src/**",), ("src/api/**",), ("src/api/v1/**",))


def test_a_handler_gets_no_token_text() -> None:
    fields = {f.name for f in dataclasses.fields(CallContext)}
    assert "token" in fields
    assert not {name for name in fields if "text" in name or "raw" in name}
