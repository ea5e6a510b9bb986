"""One way for engine tests to list, then call, a tool as an edge does.

:class:`EngineCalls` names a session per token; :func:`call` takes the session and
the listed catalog hash as given (``error`` reads a refusal's code).
"""

from __future__ import annotations

import hashlib
from typing import Any

from engine.service import Engine


class EngineCalls:
    """``call`` and ``ok`` over ``self.engine``: offer (the catalog hash), then invoke.

    A session name is made per token (``<session>-<token hash prefix>``), so two
    tokens never share a session by accident.
    """

    engine: Engine
    default_session = "s"

    def call(self, token: str, tool: str, args: dict[str, Any], session: str | None = None) -> Any:
        listed = self.engine.offer(token)["catalog_hash"]
        tag = hashlib.sha256(token.encode()).hexdigest()[:12]
        name = f"{session or self.default_session}-{tag}"
        return self.engine.invoke(token, tool, args, session=name, offered_catalog_hash=listed)

    def ok(self, token: str, tool: str, args: dict[str, Any], session: str | None = None) -> Any:
        answer = self.call(token, tool, args, session)
        assert answer["ok"] is True, answer
        return answer["result"]


def call(
    engine: Engine,
    token: str,
    tool: str,
    args: dict[str, object] | None = None,
    session: str = "s1",
    listed: str | None = "listed",
) -> dict[str, object]:
    """Invoke as an edge that listed the token's catalog first (unless told otherwise)."""
    if listed == "listed":
        offer = engine.offer(token)
        listed = offer.get("catalog_hash")  # type: ignore[assignment]
    return engine.invoke(token, tool, args or {}, session=session, offered_catalog_hash=listed)


def error(answer: dict[str, object]) -> str:
    assert answer["ok"] is False, answer
    return str(answer["error"]["error"])  # type: ignore[index]
