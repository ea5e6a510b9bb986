"""The semantic index: tree-sitter records shaped like SCIP, per blob, per view.

Extraction (``extract``, with ``rules/``, ``walk`` and ``packed``), the records
(``records``, ``fileindex``) and their byte form (``codec/``), persistence
(``persist``, ``database``), the parse pool (``pool``), a view's index
(``tree``, ``tables``, ``names``, ``binding``) and its caches (``indexer``).
The tool handlers are in engine/tools/semantic/. See docs/semantic.md.
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
