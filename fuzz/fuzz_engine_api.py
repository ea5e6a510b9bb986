"""Fuzz what ``chit-engine/1`` accepts of a request body (gateway/engine_server/requests.py).

The input is a request body. Checks: ``_wire.loads_strict`` refuses only with
``WireError``; an object then goes through each endpoint's field check
(``offer_request``, ``invoke_request``, ``changes_request``), which refuse only
with ``RequestError`` (4xx, a stable code from docs/errors.md); an invoke body
naming a declared tool has its ``arguments`` validated against the tool's input
model (``engine.service.arguments.parse_arguments``), which refuses only with
``invalid_argument``. The same path a server takes, without the server
(docs/engine-api.md, "Requests refused before the engine").
"""

from __future__ import annotations

import _harness
import atheris

with atheris.instrument_imports(include=_harness.INSTRUMENT):
    from engine.catalog.declarations import tool_by_name
    from engine.errors import CODES, ChitError
    from engine.service.arguments import parse_arguments
    from gateway import _wire
    from gateway.engine_server import requests


def _refusal(exc: requests.RequestError) -> None:
    code = exc.answer["error"]["error"]
    if not 400 <= exc.status < 500 or code not in CODES:
        raise RuntimeError(f"a refusal with status {exc.status} and code {code!r}")


def TestOneInput(data: bytes) -> None:
    try:
        doc = _wire.loads_strict(data)
    except _wire.WireError:
        return
    if not isinstance(doc, dict):
        return
    for check in (requests.offer_request, requests.changes_request):
        try:
            check(doc)
        except requests.RequestError as exc:
            _refusal(exc)
    try:
        call = requests.invoke_request(doc)
    except requests.RequestError as exc:
        _refusal(exc)
        return
    spec = tool_by_name(call.tool)
    if spec is None:
        return
    try:
        parse_arguments(spec, call.arguments)
    except ChitError as exc:
        if exc.code != "invalid_argument":
            raise


if __name__ == "__main__":
    _harness.run(TestOneInput)
