"""The engine's interface to edges: :class:`Engine` with ``offer`` and ``invoke``.

Every call re-runs the ordered check (docs/architecture.md); the answers are the
typed objects of ``engine.service.answers`` (docs/engine-api.md, "Answers").
"""

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
)
from engine.service.interface import Engine

__all__ = [
    "Answer",
    "AnswerError",
    "CallAnswer",
    "Called",
    "Engine",
    "OfferAnswer",
    "Offered",
    "OfferedTool",
    "Refused",
    "read_call",
    "read_offer",
    "read_refusal",
]
