"""The provenance tool: ``provenance_graph``, the derivation graph around a handle.

Only commits whose provenance record verifies under the engine's public keys
take part, and the graph is pruned to what the caller may see
(docs/audit.md; the graph itself: ``engine.audit.graph``).
"""

from __future__ import annotations

from engine.audit import graph
from engine.catalog import schemas as s
from engine.errors import ConfigurationError
from engine.tools.context import CallContext

__all__ = ["provenance_graph"]


def provenance_graph(ctx: CallContext, args: s.ProvenanceGraphArgs) -> s.ProvenanceGraph:
    """The derivation graph around a commit, session or token id, pruned to the caller's scope.

    Only commits whose provenance record verifies under the engine's public keys
    take part (``engine.audit.graph``).
    """
    if ctx.public_keys is None:
        raise ConfigurationError("no public keys configured")
    entries, _unverified, truncated = graph.collect(ctx.repo, ctx.public_keys())
    found = graph.build_graph(entries, args.handle.strip(), ctx.visible)
    return s.ProvenanceGraph(
        nodes=[s.GraphNode(**n) for n in found["nodes"]],
        edges=[s.GraphEdge(**e) for e in found["edges"]],
        pruned=found["pruned"],
        truncated=truncated,
    )
