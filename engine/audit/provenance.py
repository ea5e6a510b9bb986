"""Provenance records: ``chit-provenance/1`` and ``/2``, signed with the engine's Ed25519 key.

This module builds a record's delegation chain, hashes the policy, seals and
opens envelopes (the record's shape: engine/audit/recordshape.py) and checks the
chain's narrowing. Pure: bytes and keys in, a value or a :class:`ProvenanceError`
out; reading the repository is :mod:`engine.audit.verify`'s job. The format:
docs/provenance-format.md.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import policy
from engine.audit.recordshape import shape_problem
from engine.auth import cbor
from engine.auth.signkeys import SIGNING_ALG, SigningKey
from engine.auth.verify import VerifiedToken, grant_of_blocks
from engine.errors import ProfileError
from engine.limits import LIMITS

__all__ = [
    "ASSISTED_TRAILER",
    "PROVENANCE_TRAILER",
    "RECORD_VERSION",
    "RECORD_VERSIONS",
    "RECORD_VERSION_APPROVED",
    "Hop",
    "ProvenanceError",
    "assisted_by",
    "check_chain",
    "delegation_chain",
    "envelope_hash",
    "envelope_signer",
    "open_envelope",
    "policy_hash",
    "seal",
    "split_message",
]

RECORD_VERSION: Final = "chit-provenance/1"
RECORD_VERSION_APPROVED: Final = "chit-provenance/2"
"""A ``chit-provenance/1`` record plus ``approval``: a commit made under an approval."""
RECORD_VERSIONS: Final = frozenset({RECORD_VERSION, RECORD_VERSION_APPROVED})
PROVENANCE_TRAILER: Final = "Chit-Provenance"
ASSISTED_TRAILER: Final = "Assisted-by"
"""The conventional attribution trailer of AI-assisted commits (docs/provenance-format.md §3)."""
SIGNATURE_CONTEXT: Final = b"chit-provenance/1 signature\x00"
"""Prefixed to the record bytes before signing (domain separation)."""
_CONTEXTS: Final = {
    RECORD_VERSION: SIGNATURE_CONTEXT,
    RECORD_VERSION_APPROVED: b"chit-provenance/2 signature\x00",
}
_TRAILER_LINE = re.compile(r"\nChit-Provenance: (sha256:[0-9a-f]{64})\n\Z")


def assisted_by(agent: str) -> str:
    """The :data:`ASSISTED_TRAILER` value of ``agent``'s commits: ``chit agent <agent>``."""
    return f"chit agent {agent}"


class ProvenanceError(Exception):
    """A record failed one audit check.

    Attributes:
        check: The check's stable name (docs/audit.md), e.g. ``signature``.
        reason: What failed, for a person; never secret material.
    """

    def __init__(self, check: str, reason: str) -> None:
        super().__init__(f"{check}: {reason}")
        self.check = check
        self.reason = reason


@dataclass(frozen=True)
class Hop:
    """One hop of a delegation chain as recorded: the token as its holder had it.

    Attributes:
        block_id: Hex id of the hop's identity block (the root block, or a
            delegation block).
        agent: The agent the hop names.
        ops: Operations after every block up to the next hop.
        paths: Path glob lists after every block up to the next hop (a path is
            in scope iff every list has a matching glob); each hop's lists extend
            the previous hop's.
        expires_at: Effective expiry, unix seconds.
        not_before: Effective not-before, unix seconds, or ``None``.
        delegable: The delegation flag at this hop.
        issued_at: When the engine issued the hop (delegations), else ``None``.
    """

    block_id: str
    agent: str
    ops: tuple[str, ...]
    paths: tuple[tuple[str, ...], ...]
    expires_at: int
    not_before: int | None
    delegable: bool
    issued_at: int | None = None

    def encoded(self) -> dict[str, Any]:
        """The hop as a ``chit-det/1`` map (absent values are left out)."""
        out: dict[str, Any] = {
            "id": self.block_id,
            "agent": self.agent,
            "ops": list(self.ops),
            "paths": [list(g) for g in self.paths],
            "exp": self.expires_at,
            "delegable": self.delegable,
        }
        if self.not_before is not None:
            out["nbf"] = self.not_before
        if self.issued_at is not None:
            out["iat"] = self.issued_at
        return out


def delegation_chain(token: VerifiedToken, issued_at: Mapping[str, int]) -> list[Hop]:
    """Each hop of ``token``'s chain with the scope its holder had.

    Read from the blocks' bytes that verified (``token.blocks``), never from
    text parsed again.

    Args:
        token: The verified token.
        issued_at: Block id to issue time (unix seconds) for delegation blocks
            the engine issued.

    Returns:
        One :class:`Hop` per chain entry, root first; the last hop's scope is
        the token's effective scope.

    Raises:
        ValueError: If the token has no chain (a caller bug).
    """
    ids = [block_id for block_id, _agent in token.chain]
    if len(token.blocks) != len(token.block_ids) or not ids:
        raise ValueError("token and parsed token differ")
    ends = [token.block_ids.index(i) for i in ids[1:]] + [len(token.block_ids)]
    hops: list[Hop] = []
    for n, (block_id, agent) in enumerate(token.chain):
        grant = grant_of_blocks(token.blocks[: ends[n]])
        hops.append(
            Hop(
                block_id=block_id,
                agent=agent,
                ops=tuple(sorted(grant["ops"])),
                paths=tuple(grant["paths"]),
                expires_at=grant["exp"] if grant["exp"] is not None else token.expires_at,
                not_before=grant["nbf"],
                delegable=grant["delegable"],
                issued_at=issued_at.get(block_id) if n else None,
            )
        )
    return hops


def policy_hash(p: policy.Policy) -> str:
    """``sha256:<hex>`` of the policy's ``chit-det/1`` encoding (its model dump).

    Two policy files that load to the same model hash alike (comments and key
    order do not count).
    """
    return "sha256:" + hashlib.sha256(cbor.encode(_plain(p.model_dump(mode="json")))).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def seal(record: Mapping[str, Any], key: SigningKey) -> bytes:
    """Sign a record and return the envelope's ``chit-det/1`` bytes.

    Args:
        record: The record map (``chit-det/1`` data model); its ``kid`` must
            name ``key`` and its ``v`` one of :data:`RECORD_VERSIONS`.
        key: The engine's active signing key.

    Returns:
        The envelope ``{"v", "alg", "kid", "record": bytes, "sig": bytes}``,
        where ``v`` is the record's and ``sig`` is Ed25519 over that version's
        signature context (``chit-provenance/N signature`` and a zero byte)
        + record bytes.

    Raises:
        ProfileError: If the record is outside the profile.
        ValueError: If the record's ``kid`` is not ``key``'s.
    """
    version = record.get("v")
    if record.get("kid") != key.key_id or version not in _CONTEXTS:
        raise ValueError("the record must name this key and a record version")
    body = cbor.encode(dict(record))
    return cbor.encode(
        {
            "v": version,
            "alg": SIGNING_ALG,
            "kid": key.key_id,
            "record": body,
            "sig": key.sign(_CONTEXTS[str(version)] + body),
        }
    )


def envelope_hash(envelope: bytes) -> str:
    """``sha256:<hex>`` of an envelope's bytes: the ``Chit-Provenance`` trailer value."""
    return "sha256:" + hashlib.sha256(envelope).hexdigest()


def envelope_signer(untrusted: bytes) -> str | None:
    """The key id an envelope names, unverified (for ``chit doctor``'s vital signs).

    Args:
        untrusted: The stored envelope bytes.

    Returns:
        Its ``kid``, or ``None`` if it is not an envelope of this format.
    """
    try:
        env = cbor.decode(untrusted, max_size=LIMITS.provenance_record_bytes)
    except ProfileError:
        return None
    kid = env.get("kid") if isinstance(env, dict) else None
    return kid if isinstance(kid, str) else None


def open_envelope(
    untrusted: bytes, public_keys: Mapping[str, Ed25519PublicKey]
) -> dict[str, Any]:
    """Decode an envelope, verify its signature, and return the record.

    Args:
        untrusted: The stored envelope bytes.
        public_keys: Trusted key id to Ed25519 public key (``chit keys export-public``).

    Returns:
        The record map, once the signature verified.

    Raises:
        ProvenanceError: ``record_decodes`` if the envelope or record is not
            ``chit-det/1`` in the shape of its version; ``signature`` if the
            key id is unknown, the envelope and record name different keys, or
            the signature does not verify.
    """
    try:
        env = cbor.decode(untrusted, max_size=LIMITS.provenance_record_bytes)
    except ProfileError as exc:
        reason = f"envelope is not chit-det/1: {exc.reason}"
        raise ProvenanceError("record_decodes", reason) from None
    if (
        not isinstance(env, dict)
        or set(env) != {"v", "alg", "kid", "record", "sig"}
        or env["v"] not in _CONTEXTS
        or env["alg"] != SIGNING_ALG
        or not isinstance(env["kid"], str)
        or not isinstance(env["record"], bytes)
        or not isinstance(env["sig"], bytes)
    ):
        raise ProvenanceError("record_decodes", "envelope is not a chit-provenance envelope")
    key = public_keys.get(env["kid"])
    if key is None:
        raise ProvenanceError("signature", f"signed by unknown key id {env['kid']!r}")
    try:
        key.verify(env["sig"], _CONTEXTS[env["v"]] + env["record"])
    except InvalidSignature:
        raise ProvenanceError("signature", "the signature does not verify") from None
    try:
        record = cbor.decode(env["record"], max_size=LIMITS.provenance_record_bytes)
    except ProfileError as exc:
        raise ProvenanceError("record_decodes", f"record is not chit-det/1: {exc.reason}") from None
    if not isinstance(record, dict) or record.get("v") != env["v"]:
        raise ProvenanceError("record_decodes", f"record is not a {env['v']} record")
    if record.get("kid") != env["kid"]:
        raise ProvenanceError("signature", "envelope and record name different keys")
    problem = shape_problem(record)
    if problem is not None:
        raise ProvenanceError("record_decodes", problem)
    return record


def split_message(message: str) -> tuple[str, str]:
    """Split a commit message into what the record hashes and the trailer value.

    Args:
        message: The whole commit message. Its last line must be
            ``Chit-Provenance: sha256:<64 hex>`` followed by a newline.

    Returns:
        ``(signed_part, record_hash)``: the message up to (not including) that
        line, and the ``sha256:<hex>`` it names.

    Raises:
        ProvenanceError: ``trailers`` if the last line is not that trailer.
    """
    match = _TRAILER_LINE.search(message)
    if match is None:
        raise ProvenanceError("trailers", "the message does not end with a Chit-Provenance trailer")
    return message[: match.start() + 1], match.group(1)


def message_digest(signed_part: str) -> str:
    """``sha256:<hex>`` of the UTF-8 bytes of the message up to the provenance line."""
    return "sha256:" + hashlib.sha256(signed_part.encode("utf-8")).hexdigest()


def check_chain(record: Mapping[str, Any]) -> None:
    """Check that every hop of the recorded chain narrows the one before.

    A hop narrows when its agent is the previous agent plus ``.<label>``, its
    operations are a subset, its path lists extend the previous hop's (so its
    scope is an intersection that includes the previous one), its expiry is no
    later, its not-before no earlier, and it is delegable only if the previous
    hop was (and the previous hop must have held the delegation flag and the
    ``sub-token:issue`` operation to delegate at all).
    The last hop must name the record's agent and lane.

    Raises:
        ProvenanceError: ``chain`` with the first hop that widens.
    """
    chain: Sequence[Mapping[str, Any]] = record["chain"]
    for n in range(1, len(chain)):
        prev, hop = chain[n - 1], chain[n]
        where = f"hop {n} ({hop['agent']!r})"
        if not str(hop["agent"]).startswith(str(prev["agent"]) + "."):
            raise ProvenanceError("chain", f"{where} is not a sub-agent of {prev['agent']!r}")
        if not prev["delegable"] or "sub-token:issue" not in prev["ops"]:
            raise ProvenanceError(
                "chain", f"{where} was delegated by a hop that could not delegate"
            )
        if not set(hop["ops"]) <= set(prev["ops"]):
            raise ProvenanceError("chain", f"{where} widens the operations")
        if hop["paths"][: len(prev["paths"])] != prev["paths"]:
            raise ProvenanceError("chain", f"{where} does not keep the parent's path scope")
        if hop["exp"] > prev["exp"]:
            raise ProvenanceError("chain", f"{where} outlives its parent")
        if prev.get("nbf") is not None and hop.get("nbf", -1) < prev["nbf"]:
            raise ProvenanceError("chain", f"{where} is valid before its parent")
    last = chain[-1]
    if last["agent"] != record["agent"] or record["lane"] != f"agent/{record['agent']}":
        raise ProvenanceError("lane", "the chain's last agent does not own the recorded lane")
