"""The semantic index: tree-sitter records shaped like SCIP, per blob, per view.

See docs/semantic.md. ``engine.semantic.tools`` holds the tool handlers.
"""

from engine.semantic.fileindex import FileIndex
from engine.semantic.indexer import Indexer, indexer_for
from engine.semantic.records import Definition, Import, Occurrence, Range, Role
from engine.semantic.tree import TreeIndex

__all__ = [
    "Definition",
    "FileIndex",
    "Import",
    "Indexer",
    "Occurrence",
    "Range",
    "Role",
    "TreeIndex",
    "indexer_for",
]
