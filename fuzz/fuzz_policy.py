"""Fuzz policy loading (``policy.load``, the ``policy.toml`` parser; docs/policy.md).

The input, as UTF-8 text (invalid bytes replaced, as a file read as text can
hold no lone surrogate), is a policy document. Checks: ``policy.load`` refuses
only with ``PolicyError`` and a non-empty list of problems; a policy it returns
is evaluated without raising for a few fixed requests (``policy.evaluate``
never raises on a refusal) and ``locate`` never raises.
"""

from __future__ import annotations

import _harness
import atheris

with atheris.instrument_imports(include=[*_harness.INSTRUMENT, "tomllib"]):
    import policy

_REQUESTS = [
    policy.Request(agent="alice", tool="read_file", operation="read", paths=("src/a.py",)),
    policy.Request(
        agent="ci-acme.helper", tool="commit", operation="commit", paths=("docs/x.md", "src/b"),
        staged_bytes=10, staged_files=2, commit_files=2, message="Fix\n\nSigned-off-by: a",
    ),
    policy.Request(agent="bob", tool="effective_scope", operation="none"),
]


def TestOneInput(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        loaded = policy.load(text)
    except policy.PolicyError as exc:
        if not exc.problems:
            raise RuntimeError("a PolicyError without problems") from None
        for location, _message in exc.problems:
            policy.locate(text, location)
        return
    for request in _REQUESTS:
        policy.evaluate(loaded, request)
        policy.rate_limits_for(loaded, request.agent, request.tool)
        policy.approval_for(loaded, request)


if __name__ == "__main__":
    _harness.run(TestOneInput)
