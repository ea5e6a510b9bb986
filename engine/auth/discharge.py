"""Approvals as discharges (``chit-approval/1``): request hash, signatures, verification.

An approval binds one request (:func:`request_hash`) to an operator's decision
(:class:`DecisionBody`), signed by the operator's Ed25519 key and countersigned
by the engine's signing key; the stored and recorded form is a
:class:`Discharge`. Pure: bytes, keys and values in, bytes and verdicts out; no
I/O, no clock. The format and its vectors: docs/approvals.md.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from engine.auth import cbor
from engine.errors import ProfileError
from engine.limits import LIMITS

__all__ = [
    "APPROVAL_ID",
    "DECISIONS",
    "DISCHARGE_FORMAT",
    "ENGINE_CONTEXT",
    "OPERATOR_CONTEXT",
    "DecisionBody",
    "Discharge",
    "DischargeError",
    "change_digest",
    "countersign",
    "decode_body",
    "decode_discharge",
    "encode_body",
    "encode_discharge",
    "key_id",
    "new_approval_id",
    "operator_sign",
    "request_hash",
    "verify_discharge",
]

DISCHARGE_FORMAT: Final = "chit-approval/1"
"""The discharge envelope's ``v``; the decision body's ``v`` is the integer 1."""
OPERATOR_CONTEXT: Final = b"chit-approval/1\x00"
"""Prefixed to the decision body's bytes before the operator signs them."""
ENGINE_CONTEXT: Final = b"chit-approval/1 engine\x00"
"""Prefixed to ``body + operator signature`` before the engine countersigns them."""
DECISIONS: Final = frozenset({"approved", "denied"})
APPROVAL_ID: Final = re.compile(r"apr_[a-z2-7]{26}")
"""An approval id: ``apr_`` and 26 lowercase base32 characters (128 random bits)."""

_KEY_ID = re.compile(r"[0-9a-f]{32}")
_ENGINE_KID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_BODY_KEYS = frozenset(
    {"v", "id", "request", "decision", "operator", "operator_key", "note", "decided_at",
     "expires_at"}
)
_ENVELOPE_KEYS = frozenset({"v", "body", "operator_sig", "engine_key", "engine_sig"})


class DischargeError(ValueError):
    """A discharge that does not decode, is not well formed, or does not verify.

    Args:
        reason: A short, caller-safe description (stable wording, no key material).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def key_id(public: bytes) -> str:
    """An operator key's id: lowercase hex of the first 16 bytes of SHA-256 of the raw key.

    Args:
        public: The raw 32-byte Ed25519 public key (RFC 8032).

    Returns:
        32 lowercase hex digits.

    Raises:
        ValueError: If ``public`` is not 32 bytes.
    """
    if type(public) is not bytes or len(public) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return hashlib.sha256(public).digest()[:16].hex()


def new_approval_id() -> str:
    """A fresh approval id: ``apr_`` + 128 random bits, lowercase base32 without padding."""
    raw = base64.b32encode(secrets.token_bytes(16)).decode("ascii")
    return "apr_" + raw.rstrip("=").lower()


def _lowered(value: object, depth: int = 0) -> Any:
    """A JSON value in the ``chit-det/1`` data model (docs/approvals.md, "The request hash").

    Text that the profile refuses (not NFC, or lone surrogates, which JSON can
    carry) becomes the byte string of its UTF-8 (``surrogatepass``): JSON has no
    byte strings, so the two never collide. Floats are refused.
    """
    if depth > LIMITS.cbor_default_depth_levels:
        raise ProfileError("nesting too deep")
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
        return value if unicodedata.is_normalized("NFC", value) else value.encode("utf-8")
    if type(value) is list or type(value) is tuple:
        return [_lowered(item, depth + 1) for item in value]
    if type(value) is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ProfileError("map key is not a text string")
            out[key] = _lowered(item, depth + 1)
        return out
    return value  # None, bool, int; anything else is refused by cbor.encode


def request_hash(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    session: str,
    token_id: str,
    repo: str,
    change: str | None = None,
) -> bytes:
    """The request an approval is bound to: SHA-256 of its ``chit-det/1`` map.

    The map is ``{"v": 1, "tool", "arguments", "session", "token", "repo"}``
    plus ``"change"`` for a commit (docs/approvals.md, "The request hash").

    Args:
        tool: The tool's name.
        arguments: The call's arguments as the engine parsed them (JSON values,
            defaults filled in).
        session: The session id.
        token_id: The token's id (hex of its identity block).
        repo: The repository's name.
        change: For ``commit``: :func:`change_digest` of the staged change; else ``None``.

    Returns:
        32 bytes.

    Raises:
        ProfileError: If an argument is outside JSON's data model (a float, a
            map key that is not text, nesting deeper than the profile allows)
            or a label is not NFC text.
    """
    request: dict[str, Any] = {
        "v": 1,
        "tool": tool,
        "arguments": _lowered(dict(arguments)),
        "session": session,
        "token": token_id,
        "repo": repo,
    }
    if change is not None:
        request["change"] = change
    return hashlib.sha256(cbor.encode(request)).digest()


def change_digest(entries: Iterable[tuple[str, int | None, bytes | None]]) -> str:
    """What a commit's approval binds of its staged change (docs/approvals.md, "The request hash").

    Args:
        entries: ``(path, git file mode, content)`` of every staged path;
            ``(path, None, None)`` for a deletion (both sides of a move appear).

    Returns:
        Lowercase hex of SHA-256 over the ``chit-det/1`` array, sorted by path,
        of ``[path, mode, SHA-256 of content]`` (``[path, null, null]`` for a
        deletion): the content as committed, whatever the lane it merges onto.
    """
    rows = sorted(
        (path, mode, None if data is None else hashlib.sha256(data).digest())
        for path, mode, data in entries
    )
    encoded = cbor.encode([[_lowered(path), mode, digest] for path, mode, digest in rows])
    return hashlib.sha256(encoded).hexdigest()


@dataclass(frozen=True)
class DecisionBody:
    """An operator's decision on one approval: what the operator signs.

    Attributes:
        approval_id: The approval's id (``apr_...``).
        request: The request hash it decides (32 bytes).
        decision: ``approved`` or ``denied``.
        operator: The operator's name as registered.
        operator_key: The key id (32 hex) of the operator key that signs.
        note: The operator's note (may be empty).
        decided_at: When, unix seconds.
        expires_at: When the approval expires, unix seconds.
    """

    approval_id: str
    request: bytes
    decision: str
    operator: str
    operator_key: str
    note: str
    decided_at: int
    expires_at: int

    def __post_init__(self) -> None:
        if not (
            type(self.approval_id) is str and APPROVAL_ID.fullmatch(self.approval_id)
            and type(self.request) is bytes and len(self.request) == 32
            and self.decision in DECISIONS
            and type(self.operator) is str and 0 < len(self.operator) <= LIMITS.operator_name_chars
            and type(self.operator_key) is str and _KEY_ID.fullmatch(self.operator_key)
            and type(self.note) is str and len(self.note) <= LIMITS.approval_note_chars
            and type(self.decided_at) is int and type(self.expires_at) is int
            and 0 <= self.decided_at and 0 <= self.expires_at
        ):
            raise DischargeError("not a well-formed chit-approval/1 decision")


def encode_body(body: DecisionBody) -> bytes:
    """The decision body's ``chit-det/1`` bytes (docs/approvals.md, "The discharge").

    Raises:
        ProfileError: If the operator name or note is not NFC text.
    """
    return cbor.encode(
        {
            "v": 1,
            "id": body.approval_id,
            "request": body.request,
            "decision": body.decision,
            "operator": body.operator,
            "operator_key": body.operator_key,
            "note": body.note,
            "decided_at": body.decided_at,
            "expires_at": body.expires_at,
        }
    )


def decode_body(data: bytes) -> DecisionBody:
    """Decode and check a decision body (untrusted bytes).

    Raises:
        DischargeError: If the bytes are not exactly a ``chit-approval/1`` body.
    """
    try:
        value = cbor.decode(data, max_size=LIMITS.approval_discharge_bytes)
    except (ProfileError, TypeError):
        raise DischargeError("the decision is not chit-det/1") from None
    if type(value) is not dict or set(value) != _BODY_KEYS or value["v"] != 1:
        raise DischargeError("not a chit-approval/1 decision")
    try:
        return DecisionBody(
            value["id"], value["request"], value["decision"], value["operator"],  # type: ignore[arg-type]
            value["operator_key"], value["note"], value["decided_at"],  # type: ignore[arg-type]
            value["expires_at"],  # type: ignore[arg-type]
        )
    except TypeError:
        raise DischargeError("not a well-formed chit-approval/1 decision") from None


def operator_sign(body: bytes, private: Ed25519PrivateKey) -> bytes:
    """The operator's Ed25519 signature over :data:`OPERATOR_CONTEXT` + ``body`` (64 bytes)."""
    return private.sign(OPERATOR_CONTEXT + body)


def countersign(body: bytes, operator_sig: bytes, sign: Callable[[bytes], bytes]) -> bytes:
    """The engine's signature over :data:`ENGINE_CONTEXT` + ``body`` + ``operator_sig``.

    Args:
        body: The decision body's bytes.
        operator_sig: The operator's 64-byte signature over it.
        sign: The engine signing key's Ed25519 sign function
            (:meth:`engine.auth.signkeys.SigningKey.sign`).

    Returns:
        The 64-byte countersignature.
    """
    return sign(ENGINE_CONTEXT + body + operator_sig)


@dataclass(frozen=True)
class Discharge:
    """A signed, countersigned decision: the envelope the store and the record keep.

    Read back from anywhere it is untrusted until :func:`verify_discharge` says so.

    Attributes:
        body: The decision body's bytes.
        operator_sig: Ed25519 by the operator key over :data:`OPERATOR_CONTEXT` + body.
        engine_key: The engine signing key id that countersigned.
        engine_sig: Ed25519 by that key over :data:`ENGINE_CONTEXT` + body + operator_sig.
    """

    body: bytes
    operator_sig: bytes
    engine_key: str
    engine_sig: bytes


def encode_discharge(discharge: Discharge) -> bytes:
    """The envelope's ``chit-det/1`` bytes (docs/approvals.md, "The discharge").

    Returns:
        ``{"v": "chit-approval/1", "body", "operator_sig", "engine_key", "engine_sig"}``
        encoded.
    """
    return cbor.encode(
        {
            "v": DISCHARGE_FORMAT,
            "body": discharge.body,
            "operator_sig": discharge.operator_sig,
            "engine_key": discharge.engine_key,
            "engine_sig": discharge.engine_sig,
        }
    )


def decode_discharge(data: object) -> Discharge:
    """Decode an envelope (untrusted bytes) without verifying it.

    Raises:
        DischargeError: If the bytes are not exactly a ``chit-approval/1`` envelope.
    """
    if not isinstance(data, bytes):
        raise DischargeError("the discharge is not bytes")
    try:
        value = cbor.decode(data, max_size=LIMITS.approval_discharge_bytes)
    except ProfileError:
        raise DischargeError("the discharge is not chit-det/1") from None
    if (
        type(value) is not dict
        or set(value) != _ENVELOPE_KEYS
        or value["v"] != DISCHARGE_FORMAT
        or type(value["body"]) is not bytes
        or type(value["operator_sig"]) is not bytes
        or len(value["operator_sig"]) != 64
        or type(value["engine_key"]) is not str
        or not _ENGINE_KID.fullmatch(value["engine_key"])
        or type(value["engine_sig"]) is not bytes
        or len(value["engine_sig"]) != 64
    ):
        raise DischargeError("not a chit-approval/1 discharge")
    return Discharge(value["body"], value["operator_sig"], value["engine_key"],
                     value["engine_sig"])


def verify_discharge(
    discharge: Discharge,
    operator_key: Callable[[str, str], bytes | None],
    engine_keys: Mapping[str, Ed25519PublicKey],
) -> DecisionBody:
    """Verify both signatures of a discharge and return its decision.

    Args:
        discharge: The envelope (untrusted).
        operator_key: Maps ``(operator name, key id)`` to the operator's raw
            32-byte public key, or ``None`` if that operator never had that key.
            A removed operator's key still verifies the decisions it signed.
        engine_keys: The engine's public signing keys by key id (retired ones
            included, :func:`engine.auth.signkeys.load_public_keys`).

    Returns:
        The verified decision. The caller checks it matches the request
        (``request``), the approval id and the time (``expires_at``).

    Raises:
        DischargeError: If the body is malformed, the operator key is unknown or
            its id does not match, or either signature does not verify.
    """
    body = decode_body(discharge.body)
    public = operator_key(body.operator, body.operator_key)
    if public is None or len(public) != 32 or key_id(public) != body.operator_key:
        raise DischargeError("the operator key the decision names is not known")
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(
            discharge.operator_sig, OPERATOR_CONTEXT + discharge.body
        )
    except (InvalidSignature, ValueError):
        raise DischargeError("the operator's signature does not verify") from None
    engine = engine_keys.get(discharge.engine_key)
    if engine is None:
        raise DischargeError("the engine key that countersigned is not known")
    try:
        engine.verify(
            discharge.engine_sig, ENGINE_CONTEXT + discharge.body + discharge.operator_sig
        )
    except InvalidSignature:
        raise DischargeError("the engine's countersignature does not verify") from None
    return body
