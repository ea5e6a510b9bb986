"""The tool surface as declared: argument and result models, one declaration per tool.

Declarations name no handler, so everything below the tools floor (the audit
among them) can read them; ``chit-catalog/1`` is in docs/catalog-encoding.md.
"""

__all__: list[str] = []
