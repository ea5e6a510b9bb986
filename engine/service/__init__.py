"""The engine's interface to edges: :class:`Engine` with ``offer`` and ``invoke``.

Every call re-runs the ordered check (docs/architecture.md); the answers are the
typed objects of ``engine.service.answers`` (docs/engine-api.md, "Answers").
``Engine`` is imported on first use, so an edge that only reads answers (``chit
mcp --engine``) never loads the engine, its keys or git; ``LIMITS`` (pure) gives
edges the bounds of the API they speak (docs/limits.md), and
``validate_session_id`` the rule for a session id a client resumes. ``RepoSpec``
and ``resolve_repo_specs`` (the repositories an engine serves,
engine/service/repos.py) are imported on first use too, and
``validate_repo_name`` (pure: an edge checks a name in a path with it).
``reporting`` lets an edge hear the progress of an embedded engine's call
(engine/progress.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.limits import LIMITS
from engine.paths import validate_session_id
from engine.progress import Reporter, reporting
from engine.service.answers import (
    Answer,
    AnswerError,
    CallAnswer,
    Called,
    OfferAnswer,
    Offered,
    OfferedTool,
    Refused,
    read_call,
    read_offer,
    read_refusal,
    read_warning,
    warning_of,
)
from engine.service.placement import Placement, SessionElsewhere

if TYPE_CHECKING:
    from engine.auth.reponames import validate_repo_name
    from engine.service.interface import Engine
    from engine.service.repos import RepoSpec, resolve_repo_specs

__all__ = [
    "LIMITS",
    "Answer",
    "AnswerError",
    "CallAnswer",
    "Called",
    "Engine",
    "OfferAnswer",
    "Offered",
    "OfferedTool",
    "Placement",
    "Refused",
    "RepoSpec",
    "Reporter",
    "SessionElsewhere",
    "read_call",
    "read_offer",
    "read_refusal",
    "read_warning",
    "reporting",
    "resolve_repo_specs",
    "validate_repo_name",
    "validate_session_id",
    "warning_of",
]


def __getattr__(name: str) -> Any:
    """``Engine``, ``RepoSpec``, ``resolve_repo_specs`` and ``validate_repo_name``, on first use."""
    if name == "Engine":
        from engine.service.interface import Engine

        return Engine
    if name == "validate_repo_name":
        from engine.auth.reponames import validate_repo_name

        return validate_repo_name
    if name in ("RepoSpec", "resolve_repo_specs"):
        from engine.service import repos

        return getattr(repos, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
