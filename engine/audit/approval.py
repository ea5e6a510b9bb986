"""The approval a ``chit-provenance/2`` record names, and the audit's ``approval`` check.

A commit made under an approval carries the discharge (``chit-approval/1``,
docs/approvals.md) in its signed provenance record, with the operator's public
key and the parts of the request the record does not already hold. The audit
checks that the discharge verifies, approved exactly this commit's request and
was unexpired when the commit was made (docs/provenance-format.md §10). Pure:
a decoded record in, facts or an :class:`ApprovalProblem` out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.auth import cbor
from engine.auth import discharge as dis
from engine.auth.sealing import is_sealed
from engine.errors import ProfileError
from engine.limits import LIMITS

__all__ = [
    "ApprovalFacts",
    "ApprovalProblem",
    "approval_entry",
    "approval_shape_problem",
    "check_approval",
]

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_APPROVAL_KEYS = frozenset({"discharge", "operator_public_key", "request", "change"})
_REQUEST_KEYS = frozenset({"v", "tool", "arguments", "session", "token", "repo", "change"})


class ApprovalProblem(Exception):
    """The record's approval fails the audit's ``approval`` check.

    Attributes:
        reason: What failed, for a person; never secret material.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ApprovalFacts:
    """What a verified approval says, for reports and the graph.

    Attributes:
        approval_id: The approval's id (``apr_...``).
        operator: The approving operator's registered name.
        operator_key: The operator key's id (32 hex).
        decided_at: When the operator approved, unix seconds.
        expires_at: When the approval expired, unix seconds.
        note: The operator's note.
    """

    approval_id: str
    operator: str
    operator_key: str
    decided_at: int
    expires_at: int
    note: str


def approval_entry(
    discharge: bytes, operator_public_key: bytes, request: bytes, change: bytes
) -> dict[str, Any]:
    """The record's ``approval`` map for a commit made under an approval.

    Args:
        discharge: The ``chit-approval/1`` envelope bytes the engine stored.
        operator_public_key: The approving operator's raw 32-byte Ed25519 key.
        request: The request map's bytes (:func:`engine.auth.discharge.request_bytes`)
            whose SHA-256 the discharge approves.
        change: The approved staged change's bytes
            (:func:`engine.auth.discharge.change_bytes`), whose SHA-256 the
            request names.

    Returns:
        ``{"discharge": bytes, "operator_public_key": "<64 hex>", "request":
        bytes, "change": bytes}``.
    """
    return {
        "discharge": discharge,
        "operator_public_key": operator_public_key.hex(),
        "request": request,
        "change": change,
    }


def approval_shape_problem(value: object) -> str | None:
    """What is wrong with a record's ``approval`` map's shape, if anything (untrusted)."""
    if type(value) is not dict or set(value) != _APPROVAL_KEYS:
        return "record field approval is malformed"
    if type(value["discharge"]) is not bytes:
        return "record field approval.discharge is malformed"
    key = value["operator_public_key"]
    if type(key) is not str or not _HEX64.match(key):
        return "record field approval.operator_public_key is malformed"
    if type(value["request"]) is not bytes:
        return "record field approval.request is malformed"
    if type(value["change"]) is not bytes:
        return "record field approval.change is malformed"
    return None


def _request(data: bytes) -> dict[str, Any]:
    """The approved request map (untrusted bytes), in the shape a commit's request has."""
    try:
        request: Any = cbor.decode(data, max_size=LIMITS.provenance_record_bytes)
    except ProfileError:
        raise ApprovalProblem("the approved request is not chit-det/1") from None
    if (
        type(request) is not dict
        or set(request) != _REQUEST_KEYS
        or request["v"] != 1
        or request["tool"] != "commit"
        or type(request["arguments"]) is not dict
        or not all(type(request[k]) is str for k in ("session", "token", "repo", "change"))
        or not _HEX64.match(request["change"])
    ):
        raise ApprovalProblem("the approved request is not a commit's request")
    return request


def _change(data: bytes) -> dict[str, tuple[int, bytes] | None]:
    """The approved change (untrusted bytes): per path, ``(mode, SHA-256 of content)`` or None."""
    try:
        rows: Any = cbor.decode(data, max_size=LIMITS.provenance_record_bytes)
    except ProfileError:
        raise ApprovalProblem("the approved change is not chit-det/1") from None
    if type(rows) is not list:
        raise ApprovalProblem("the approved change is malformed")
    paths: dict[str, tuple[int, bytes] | None] = {}
    for row in rows:
        if type(row) is not list or len(row) != 3:
            raise ApprovalProblem("the approved change is malformed")
        path, mode, digest = row
        if type(path) is bytes:  # text chit-det/1 refuses, kept as its UTF-8 (docs/approvals.md)
            path = path.decode("utf-8", "surrogatepass")
        if type(path) is not str or path in paths:
            raise ApprovalProblem("the approved change is malformed")
        if mode is None and digest is None:
            paths[path] = None
        elif type(mode) is int and type(digest) is bytes and len(digest) == 32:
            paths[path] = (mode, digest)
        else:
            raise ApprovalProblem("the approved change is malformed")
    return paths


def _landed_as_approved(
    record: Mapping[str, Any], paths: Mapping[str, tuple[int, bytes] | None],
    blob: Callable[[str], bytes | None], at_path: Callable[[str], tuple[int, str] | None],
) -> str | None:
    """The first path where the commit differs from the approved change, if any.

    A protected file is sealed afresh at every commit (docs/sealing.md): its
    plaintext is beyond an auditor without the sealing key, so a sealed landed
    blob is checked for path and mode only (the engine compared its plaintext).
    """
    landed: dict[str, tuple[int, str] | None] = {}
    for entry in record["change"]:
        old = (entry.get("old"), entry.get("old_mode"))
        new = (entry.get("new"), entry.get("new_mode"))
        if old == new:
            continue  # staged but written back unchanged: not a change
        landed[entry["path"]] = None if new[0] is None else (int(new[1] or 0), str(new[0]))
    for path in sorted(set(landed) | set(paths)):
        if path not in paths:
            return path  # a change nobody approved
        # An approved path the commit did not change already held the approved
        # content on the lane (the merge kept it): compare the commit's tree.
        approved = paths[path]
        actual = landed[path] if path in landed else at_path(path)
        if approved is None or actual is None:
            if (approved is None) != (actual is None):
                return path
            continue
        if approved[0] != actual[0]:
            return path
        data = blob(actual[1])
        if data is None or (not is_sealed(data) and hashlib.sha256(data).digest() != approved[1]):
            return path
    return None


def _text(value: object) -> str | None:
    """A request text value: text, or the UTF-8 bytes the request hash keeps non-NFC text as."""
    if type(value) is str:
        return value
    if type(value) is bytes:
        return value.decode("utf-8", "surrogatepass")
    return None


def check_approval(
    record: Mapping[str, Any],
    signed_part: str,
    engine_keys: Mapping[str, Ed25519PublicKey],
    blob: Callable[[str], bytes | None],
    at_path: Callable[[str], tuple[int, str] | None],
) -> ApprovalFacts:
    """Check the approval a verified ``chit-provenance/2`` record names.

    Args:
        record: The record, its signature and shape already verified.
        signed_part: The commit message up to the ``Chit-Provenance`` line.
        engine_keys: Trusted engine key id to Ed25519 public key (the
            discharge's countersignature must verify under one of them).
        blob: The repository's blob of this id (hex), or ``None`` if it has
            none.
        at_path: ``(mode, blob id hex)`` of a path in the commit's tree, or
            ``None`` if the tree has no file there.

    Returns:
        The approval's facts.

    Raises:
        ApprovalProblem: If the discharge does not decode or verify (the
            operator's signature under the recorded key, the engine's
            countersignature under a trusted key), is not an approval, approves
            other request bytes, or the request is not this commit's (tool,
            session, token, message; the change's paths, modes and content
            hashes are what the commit changed, a sealed blob standing for its
            plaintext), or the approval
            was not in force
            when the commit was made (``decided_at <= time < expires_at``).
    """
    entry = record["approval"]
    public = bytes.fromhex(entry["operator_public_key"])

    def operator_key(_name: str, kid: str) -> bytes | None:
        return public if dis.key_id(public) == kid else None

    try:
        body = dis.verify_discharge(dis.decode_discharge(entry["discharge"]), operator_key,
                                    engine_keys)
    except dis.DischargeError as exc:
        raise ApprovalProblem(f"the approval does not verify: {exc.reason}") from None
    aid = body.approval_id
    if body.decision != "approved":
        raise ApprovalProblem(f"approval {aid} was denied")
    if hashlib.sha256(entry["request"]).digest() != body.request:
        raise ApprovalProblem(f"approval {aid} was for another request")
    request = _request(entry["request"])
    if request["session"] != record["session"] or request["token"] != record["token_id"]:
        raise ApprovalProblem(f"approval {aid} was for another session or token")
    if hashlib.sha256(entry["change"]).hexdigest() != request["change"]:
        raise ApprovalProblem(f"the recorded change is not the one approval {aid} covers")
    differs = _landed_as_approved(record, _change(entry["change"]), blob, at_path)
    if differs is not None:
        raise ApprovalProblem(
            f"the commit changed {differs!r} otherwise than approval {aid} covers"
        )
    message = _text(request["arguments"].get("message"))
    if message is None or not signed_part.startswith(message.strip() + "\n\n"):
        raise ApprovalProblem(f"the commit's message is not the one approval {aid} covers")
    if not body.decided_at <= record["time"] < body.expires_at:
        raise ApprovalProblem(
            f"approval {aid} was not in force when the commit was made "
            f"(decided {body.decided_at}, expired {body.expires_at}, commit {record['time']})"
        )
    return ApprovalFacts(aid, body.operator, body.operator_key, body.decided_at,
                         body.expires_at, body.note)
