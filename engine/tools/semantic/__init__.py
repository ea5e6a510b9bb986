"""The semantic tool handlers, one module per tool family, over the semantic index.

``symbols`` (search_symbols, symbol_context), ``relations``
(symbol_relations), ``impact`` (change_impact), ``project``
(project_context) and ``intents`` (what peers see of a session's work); what
they share, in ``_shared``. Each reads the caller's session view and names
nothing the caller may not see: ``pruned`` says how many were left out, never
what, and no count can be steered toward a hidden name (docs/semantic.md,
"Scope pruning and budgets").
"""

__all__: list[str] = []
