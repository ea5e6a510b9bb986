"""The tool handlers, the table naming each declared tool's handler, and the offer.

Handlers run after the ordered check passed (docs/tools.md, docs/architecture.md).
"""

__all__: list[str] = []
