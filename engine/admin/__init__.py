"""What the operator's and auditor's commands call: init, mint, keys, freeze, audit.

The CLI reaches the engine only through this package, :mod:`engine.service`
and :mod:`engine.errors` (docs/architecture.md).
"""

__all__: list[str] = []
