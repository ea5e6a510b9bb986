"""The tool surface: one module per tool family, the handler table and the offer.

``scope``, ``files``, ``history``, ``conflicts``, ``commit``, ``delegation``,
``provenance`` and ``semantic`` hold the handlers; ``table`` names each declared
tool's handler; ``offer`` computes what a token is offered; ``context`` is what a
handler is given. Handlers run after the ordered check passed (docs/tools.md,
docs/architecture.md).
"""

__all__: list[str] = []
