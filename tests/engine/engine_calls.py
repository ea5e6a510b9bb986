"""One way for engine tests to list, then call, a tool as an edge does."""

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
