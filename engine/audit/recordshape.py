"""The shape of a ``chit-provenance/1`` or ``/2`` record: exactly its fields, each of its type.

Checked on every record whose signature verified, before any other audit check
reads it (docs/provenance-format.md §1, the audit's ``record_decodes``). Pure: a
decoded map in, ``None`` or the reason out.
"""

from __future__ import annotations

import re
from typing import Any

from engine.audit.approval import approval_shape_problem

__all__ = ["shape_problem"]

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_RECORD_KEYS = {
    "v": str,
    "kid": str,
    "lane": str,
    "agent": str,
    "session": str,
    "token_id": str,
    "time": int,
    "commit": dict,
    "chain": list,
    "catalog": dict,
    "policy": str,
    "change": list,
}


def shape_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a decoded record's shape, if anything.

    Args:
        record: A decoded ``chit-provenance/1`` record map (untrusted).

    Returns:
        ``None`` if the record has exactly the fields of docs/provenance-format.md
        §1, each of its type and form (hex ids, ``sha256:`` hashes, the commit,
        catalog, change and chain entries); else the reason, naming the first
        field that is not.
    """
    approved = record.get("v") == "chit-provenance/2"
    if set(record) != set(_RECORD_KEYS) | ({"approval"} if approved else set()):
        return f"record fields are not those of {record.get('v')}"
    if approved:
        problem = approval_shape_problem(record["approval"])
        if problem is not None:
            return problem
    for name, kind in _RECORD_KEYS.items():
        if type(record[name]) is not kind:
            return _bad(name)
    commit = record["commit"]
    if set(commit) != {"tree", "parents", "author", "committer", "message"}:
        return _bad("commit")
    if not isinstance(commit["tree"], str) or not _HEX40.match(commit["tree"]):
        return _bad("commit.tree")
    parents = commit["parents"]
    if not isinstance(parents, list) or not all(
        isinstance(p, str) and _HEX40.match(p) for p in parents
    ):
        return _bad("commit.parents")
    for who in ("author", "committer"):
        sig = commit[who]
        if (
            not isinstance(sig, dict)
            or set(sig) != {"name", "email", "time", "offset"}
            or not isinstance(sig["name"], str)
            or not isinstance(sig["email"], str)
            or type(sig["time"]) is not int
            or type(sig["offset"]) is not int
        ):
            return _bad(f"commit.{who}")
    if not isinstance(commit["message"], str) or not _HASH.match(commit["message"]):
        return _bad("commit.message")
    catalog = record["catalog"]
    if (
        set(catalog) != {"hash", "encoding"}
        or not isinstance(catalog["hash"], str)
        or not _HASH.match(catalog["hash"])
        or not isinstance(catalog["encoding"], str)
    ):
        return _bad("catalog")
    if not _HASH.match(record["policy"]):
        return _bad("policy")
    for entry in record["change"]:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("path"), str)
            or not set(entry) <= {"path", "old", "new", "old_mode", "new_mode"}
            or not all(
                isinstance(entry[k], str) and _HEX40.match(entry[k])
                for k in ("old", "new")
                if k in entry
            )
            or not all(type(entry[k]) is int for k in ("old_mode", "new_mode") if k in entry)
        ):
            return _bad("change")
    if not record["chain"]:
        return _bad("chain")
    for hop in record["chain"]:
        if (
            not isinstance(hop, dict)
            or not {"id", "agent", "ops", "paths", "exp", "delegable"} <= set(hop)
            or not set(hop) <= {"id", "agent", "ops", "paths", "exp", "delegable", "nbf", "iat"}
            or not isinstance(hop["id"], str)
            or not isinstance(hop["agent"], str)
            or not isinstance(hop["ops"], list)
            or not all(isinstance(o, str) for o in hop["ops"])
            or not isinstance(hop["paths"], list)
            or not all(
                isinstance(g, list) and all(isinstance(x, str) for x in g) for g in hop["paths"]
            )
            or type(hop["exp"]) is not int
            or type(hop["delegable"]) is not bool
            or not all(type(hop[k]) is int for k in ("nbf", "iat") if k in hop)
        ):
            return _bad("chain")
    return None


def _bad(what: str) -> str:
    return f"record field {what} is malformed"
