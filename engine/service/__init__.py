"""The engine's interface to edges: :class:`Engine` with ``offer`` and ``invoke``.

Every call re-runs the ordered check (docs/architecture.md, docs/engine-api.md).
"""

from engine.service.interface import Engine

__all__ = ["Engine"]
