"""in-toto attestations of chit's commits: Statement v1 in a DSSE envelope.

Each commit chit makes gets a statement whose subject is the commit
(``gitCommit`` digest) and whose predicate is its provenance record as JSON,
signed with the engine's Ed25519 key through securesystemslib's DSSE
implementation; a lane gets a summary statement on request. Anyone verifies
them with standard tools and no chit code (docs/attestations.md).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import CryptoSigner, Key, SSlibKey

from engine.audit import provenance
from engine.auth.signkeys import SigningKey
from engine.limits import LIMITS

__all__ = [
    "LANE_PREDICATE_TYPE",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "AttestationError",
    "attest_commit",
    "check_commit",
    "commit_statement",
    "dumps",
    "envelope_digest",
    "find_for_commit",
    "public_key_entry",
    "record_predicate",
    "sign_statement",
    "verify_envelope",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
"""The in-toto Statement layer's ``_type`` (in-toto attestation framework, v1)."""

PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""The DSSE ``payloadType`` of an in-toto statement."""

PREDICATE_TYPE = "https://chit.invalid/attestation/provenance/v1"
"""The predicate type of one commit's provenance (docs/attestations.md §2)."""

LANE_PREDICATE_TYPE = "https://chit.invalid/attestation/lane/v1"
"""The predicate type of a lane's summary (docs/attestations.md §3)."""

_COMMIT_ID = re.compile(r"[0-9a-f]{40}")


class AttestationError(Exception):
    """An attestation that does not verify; ``reason`` says why (never secret)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def dumps(value: Any) -> bytes:
    """The JSON bytes chit writes: UTF-8, sorted keys, no spaces, no NaN.

    Deterministic, so the same statement is always the same bytes (and, Ed25519
    being deterministic, the same envelope).
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _json_value(value: Any) -> Any:
    """A record value as JSON: byte strings become standard padded base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def record_predicate(record: Mapping[str, Any], envelope_hash: str) -> dict[str, Any]:
    """The provenance predicate: the record's fields as JSON, plus ``provenance``.

    Args:
        record: A verified ``chit-provenance/1`` or ``/2`` record
            (docs/provenance-format.md §1).
        envelope_hash: ``sha256:<hex>`` of the record's envelope, the commit's
            ``Chit-Provenance`` trailer.

    Returns:
        Every record field under its own name (byte strings of an approval as
        standard base64), and ``provenance``: ``envelope_hash``.
    """
    predicate: dict[str, Any] = _json_value(dict(record))
    predicate["provenance"] = envelope_hash
    return predicate


def commit_statement(commit: str, record: Mapping[str, Any], envelope_hash: str) -> dict[str, Any]:
    """The in-toto Statement v1 of one chit commit.

    Args:
        commit: The commit id, 40 lowercase hex.
        record: Its verified provenance record.
        envelope_hash: ``sha256:<hex>`` of the record's envelope.

    Returns:
        ``{"_type", "subject": [{"name": <lane>, "digest": {"gitCommit":
        commit}}], "predicateType": PREDICATE_TYPE, "predicate": ...}``.

    Raises:
        ValueError: If ``commit`` is not 40 lowercase hex.
    """
    if not isinstance(commit, str) or not _COMMIT_ID.fullmatch(commit):
        raise ValueError("not a commit id")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": str(record["lane"]), "digest": {"gitCommit": commit}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": record_predicate(record, envelope_hash),
    }


def _sslib_key(key_id: str, public: Ed25519PublicKey) -> SSlibKey:
    return SSlibKey.from_crypto(public, keyid=key_id, scheme="ed25519")


def sign_statement(statement: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """Sign a statement into a DSSE envelope (securesystemslib; DSSE v1 PAE, Ed25519).

    Args:
        statement: An in-toto statement (JSON data model).
        key: The engine's active signing key; its id is the signature's ``keyid``.

    Returns:
        The envelope's JSON form: ``{"payload": <base64 of the statement's
        bytes>, "payloadType": PAYLOAD_TYPE, "signatures": [{"keyid", "sig"}]}``.
    """
    private = Ed25519PrivateKey.from_private_bytes(key.seed)
    signer = CryptoSigner(private, _sslib_key(key.key_id, private.public_key()))
    envelope = Envelope(dumps(dict(statement)), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    doc: dict[str, Any] = envelope.to_dict()
    return doc


def attest_commit(commit: str, envelope: bytes, key: SigningKey) -> bytes:
    """The attestation of a commit chit just made: one JSON line, no newline.

    Args:
        commit: The new commit's id, 40 lowercase hex.
        envelope: Its provenance envelope, as :func:`provenance.seal` made it.
        key: The key that sealed it (the engine's active signing key).

    Returns:
        The DSSE envelope's JSON bytes (:func:`dumps`).

    Raises:
        ValueError: If ``commit`` is not a commit id, or ``envelope`` was not
            sealed by ``key`` (a caller bug).
    """
    public = Ed25519PrivateKey.from_private_bytes(key.seed).public_key()
    try:
        record = provenance.open_envelope(envelope, {key.key_id: public})
    except provenance.ProvenanceError as exc:
        raise ValueError(f"not an envelope of this key: {exc.reason}") from None
    statement = commit_statement(commit, record, provenance.envelope_hash(envelope))
    return dumps(sign_statement(statement, key))


def envelope_digest(line: bytes) -> str:
    """``sha256:<hex>`` of an attestation's bytes as stored (one JSON line)."""
    return provenance.envelope_hash(line)


def public_key_entry(key_id: str, public: Ed25519PublicKey) -> dict[str, Any]:
    """One public key in the forms verifiers read.

    Returns:
        ``{"keyid", "keytype": "ed25519", "scheme": "ed25519", "keyval":
        {"public": <64 hex>}, "pem": <SubjectPublicKeyInfo PEM>}``: the first
        four are securesystemslib's (and in-toto's) key format, ``pem`` is
        what OpenSSL and cosign read.
    """
    entry = _sslib_key(key_id, public).to_dict()
    entry["keyid"] = key_id
    entry["pem"] = public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    return entry


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"duplicate member {name!r}")
        out[name] = value
    return out


def _strict_json(untrusted: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(untrusted.decode("utf-8"), object_pairs_hook=_no_duplicates,
                      parse_constant=refuse)


def verify_envelope(
    untrusted: bytes, public_keys: Mapping[str, Ed25519PublicKey]
) -> tuple[str, dict[str, Any]]:
    """Verify one attestation line and return its signer and statement.

    Args:
        untrusted: One DSSE envelope's JSON bytes (a line of a note or export).
        public_keys: Trusted key id to Ed25519 public key.

    Returns:
        ``(key id, statement)``: the key that verified and the statement, an
        in-toto Statement v1 with at least one subject.

    Raises:
        AttestationError: If the line is larger than
            ``LIMITS.attestation_bytes``, not strict JSON, not a DSSE envelope
            of an in-toto statement, signed by no key in ``public_keys``, or
            its payload is not a Statement v1.
    """
    if len(untrusted) > LIMITS.attestation_bytes:
        raise AttestationError("the attestation is larger than the limit")
    try:
        doc = _strict_json(untrusted)
        if not isinstance(doc, dict) or set(doc) != {"payload", "payloadType", "signatures"}:
            raise ValueError("not a DSSE envelope")
        if not isinstance(doc["signatures"], list) or not all(
            isinstance(s, dict) and set(s) <= {"keyid", "sig"} for s in doc["signatures"]
        ):
            raise ValueError("malformed signatures")
        envelope = Envelope.from_dict(copy.deepcopy(doc))
    except (ValueError, KeyError, TypeError, FormatError, UnicodeDecodeError, AttributeError,
            RecursionError):
        raise AttestationError("not a DSSE envelope") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise AttestationError(f"payloadType is not {PAYLOAD_TYPE}")
    keys: list[Key] = [_sslib_key(kid, public_keys[kid]) for kid in envelope.signatures
            if kid in public_keys]
    if not keys:
        raise AttestationError("signed by no known key")
    try:
        accepted = envelope.verify(keys, 1)
    except VerificationError:
        raise AttestationError("the signature does not verify") from None
    try:
        statement = _strict_json(envelope.payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise AttestationError("the payload is not JSON") from None
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    if (
        not isinstance(statement, dict)
        or statement.get("_type") != STATEMENT_TYPE
        or not isinstance(subjects, list)
        or not subjects
        or not all(isinstance(s, dict) and isinstance(s.get("digest"), dict) for s in subjects)
        or not isinstance(statement.get("predicateType"), str)
    ):
        raise AttestationError("the payload is not an in-toto Statement v1")
    return next(iter(accepted)), statement


def find_for_commit(
    note: bytes, commit: str, public_keys: Mapping[str, Ed25519PublicKey]
) -> tuple[bytes, str, dict[str, Any]]:
    """The verified provenance attestation of ``commit`` in a note (JSON Lines).

    Args:
        note: The note's bytes (untrusted): one DSSE envelope per line.
        commit: The commit id the note is attached to, 40 lowercase hex.
        public_keys: Trusted key id to Ed25519 public key.

    Returns:
        ``(line, key id, statement)`` of the first line that verifies, is of
        :data:`PREDICATE_TYPE` and names ``commit`` as its only subject.

    Raises:
        AttestationError: If no line does; the reason is the first line's
            failure (or that no line is about this commit).
    """
    first: str | None = None
    for raw in note.split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        try:
            kid, statement = verify_envelope(line, public_keys)
        except AttestationError as exc:
            first = first or exc.reason
            continue
        subjects = statement["subject"]
        if statement["predicateType"] != PREDICATE_TYPE:
            continue
        if len(subjects) != 1 or subjects[0]["digest"] != {"gitCommit": commit}:
            first = first or "the attestation is about another commit"
            continue
        return line, kid, statement
    raise AttestationError(first or "the note holds no attestation")


def check_commit(
    note: bytes,
    commit: str,
    record: Mapping[str, Any],
    envelope_hash: str,
    public_keys: Mapping[str, Ed25519PublicKey],
) -> str:
    """Check a commit's attestation against its verified provenance record.

    Args:
        note: The commit's note under ``refs/notes/chit`` (untrusted).
        commit: The commit id, 40 lowercase hex.
        record: The commit's provenance record, already verified.
        envelope_hash: ``sha256:<hex>`` of the record's envelope (the
            ``Chit-Provenance`` trailer).
        public_keys: Trusted key id to Ed25519 public key.

    Returns:
        ``sha256:<hex>`` of the attestation line that verified
        (:func:`envelope_digest`).

    Raises:
        AttestationError: If no line of the note verifies for ``commit``, or
            the one that does says something other than the record (another
            lane, predicate or provenance hash).
    """
    line, _kid, statement = find_for_commit(note, commit, public_keys)
    if statement["subject"][0].get("name") != record["lane"]:
        raise AttestationError("the attestation names another lane than the record")
    if statement["predicate"] != record_predicate(record, envelope_hash):
        raise AttestationError("the attestation's predicate is not the commit's record")
    return envelope_digest(line)
