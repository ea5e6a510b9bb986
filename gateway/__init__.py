"""The edges of chit: the MCP server for agents and the ``chit`` CLI."""

__all__: list[str] = []
