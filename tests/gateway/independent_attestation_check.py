"""Check chit's exported attestations with securesystemslib alone (no chit module).

Run as a script: ``python independent_attestation_check.py KEYS ATTESTATIONS
EXPECTED``. ``EXPECTED`` is a JSON file: a list, one item per line of
``ATTESTATIONS``, ``{"commit", "predicateType", "predicate": {field: value}}``
(the fields that must match). Prints one JSON object: ``{"ok": bool,
"results": [{"line", "ok", "reason"}], "chit_modules": [...]}``; exits 0 only
if every line verified and matched, and no chit module was ever imported.
"""

import base64
import hashlib
import json
import sys

from securesystemslib.dsse import Envelope
from securesystemslib.signer import Key

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


def load_keys(path):
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    return [Key.from_dict(e["keyid"], {k: e[k] for k in ("keytype", "scheme", "keyval")})
            for e in doc["keys"]]


def check(line, keys, expected):
    envelope = Envelope.from_dict(json.loads(line))
    if envelope.payload_type != PAYLOAD_TYPE:
        return "payloadType"
    try:
        envelope.verify(keys, 1)
    except Exception as exc:  # securesystemslib's VerificationError, or a key error
        return f"signature: {type(exc).__name__}"
    statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
    if statement != json.loads(envelope.payload):
        return "payload"
    if statement.get("_type") != STATEMENT_TYPE:
        return "_type"
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1:
        return "subject count"
    if subjects[0].get("digest") != {"gitCommit": expected["commit"]}:
        return "subject is another commit"
    if statement.get("predicateType") != expected["predicateType"]:
        return "predicateType"
    for name, value in expected["predicate"].items():
        if statement["predicate"].get(name) != value:
            return f"predicate.{name}"
    if "digest" in expected:
        if "sha256:" + hashlib.sha256(line).hexdigest() != expected["digest"]:
            return "digest"
    return None


def main():
    keys_path, lines_path, expected_path = sys.argv[1:4]
    keys = load_keys(keys_path)
    with open(expected_path, encoding="utf-8") as fh:
        expected = json.load(fh)
    with open(lines_path, "rb") as fh:
        lines = [line for line in fh.read().split(b"\n") if line]
    results = []
    for at, line in enumerate(lines):
        want = expected[at] if at < len(expected) else None
        reason = "unexpected line" if want is None else check(line, keys, want)
        results.append({"line": at, "ok": reason is None, "reason": reason})
    ok = len(lines) == len(expected) and all(r["ok"] for r in results)
    chit = sorted(m for m in sys.modules
                  if m.split(".")[0] in ("engine", "gateway", "policy", "tests"))
    print(json.dumps({"ok": ok and not chit, "results": results, "chit_modules": chit}))
    return 0 if ok and not chit else 1


if __name__ == "__main__":
    sys.exit(main())
