"""The chit engine: the authority behind every edge.

It verifies tokens, runs the ordered check, offers the tool catalog, works on the
repository through git object space and records provenance. Edges reach it only
through :class:`engine.service.Engine` (docs/architecture.md).
"""

__all__: list[str] = []
