"""The edges of chit: the MCP server for agents and the ``chit`` CLI (docs/architecture.md)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("chit")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
