"""The operator's freeze: read-only mode for every engine on a home.

``chit freeze on|off|status`` call these. The freeze lives in the home's state
store, so every engine on that home (each ``chit mcp`` process) sees it on its
next call; each change is also recorded in the call log as an operator entry
(agent ``(operator)``). docs/architecture.md says what a frozen engine offers.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine.admin.state import state_store
from engine.audit import calllog, provenance, redact, tlog
from engine.errors import ConfigurationError
from engine.limits import LIMITS
from engine.service.policyfile import load_policy
from engine.state import Store

__all__ = ["freeze_status", "set_freeze"]


def set_freeze(
    home: str | os.PathLike[str], frozen: bool, *, reason: str = "", state: str | None = None
) -> dict[str, Any]:
    """Freeze (read-only mode) or unfreeze every engine that uses this home.

    The mode takes effect on each engine's next call. The change is then
    recorded in the call log; if that fails (no signing key) the mode still
    stands and ``logged`` is false, since freezing is an emergency action.

    Args:
        home: The chit home.
        frozen: The new mode.
        reason: A note for other operators, at most 500 characters.
        state: A state URL (``--state``); ``None``: the home's (docs/deployment.md).

    Returns:
        ``{"frozen", "reason", "changed_at", "logged"}``.

    Raises:
        ValueError: If the reason is too long or holds control characters.
    """
    most = LIMITS.freeze_reason_chars
    if len(reason) > most or any(ord(c) < 0x20 or ord(c) == 0x7F for c in reason):
        raise ValueError(f"--reason is one line of at most {most} characters")
    now = int(time.time())
    with state_store(home, state) as store:
        return _set_freeze(home, store, frozen, reason, now)


def _set_freeze(
    home: str | os.PathLike[str], store: Store, frozen: bool, reason: str, now: int
) -> dict[str, Any]:
    mode = store.set_freeze(frozen, now=now, reason=reason)
    try:
        policy_hash = provenance.policy_hash(load_policy(home))
    except ConfigurationError:
        policy_hash = "-"
    record = calllog.CallRecord(
        time=now,
        agent=calllog.OPERATOR,
        chain=(),
        session="-",
        tool="chit freeze " + ("on" if frozen else "off"),
        arguments=redact.redact_arguments({"reason": reason} if frozen else {}),
        decision="allowed",
        code=None,
        policy_hash=policy_hash,
        catalog_hash=None,
    )
    try:
        tlog.append(store, [record], calllog.LogSigner(home), now=now, checkpoint_entries=1)
        logged = True
    except (ConfigurationError, OSError):
        logged = False
    return {
        "frozen": mode.frozen,
        "reason": mode.reason,
        "changed_at": mode.changed_at,
        "logged": logged,
    }


def freeze_status(home: str | os.PathLike[str], *, state: str | None = None) -> dict[str, Any]:
    """The operator's mode: ``{"frozen", "reason", "changed_at"}`` (never set: not frozen).

    Args:
        home: The chit home.
        state: A state URL (``--state``); ``None``: the home's.
    """
    with state_store(home, state) as store:
        mode = store.freeze_state()
    return {"frozen": mode.frozen, "reason": mode.reason, "changed_at": mode.changed_at}
