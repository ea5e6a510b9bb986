"""Languages the index knows: file suffixes and tree-sitter grammars from wheels.

Every grammar comes from its PyPI wheel (``tree-sitter-python`` and friends),
loaded in process; nothing is downloaded or compiled at run time. A parser is
made per thread (tree-sitter parsers are not shared between threads). What each
language's index holds: docs/semantic.md, "Languages".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import tree_sitter
import tree_sitter_go
import tree_sitter_java
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript

__all__ = ["LANGUAGES", "SUFFIXES", "grammar_for", "language_for", "parser_for"]

_GRAMMARS: dict[str, Callable[[], Any]] = {
    "python": tree_sitter_python.language,
    "javascript": tree_sitter_javascript.language,
    "typescript": tree_sitter_typescript.language_typescript,
    "tsx": tree_sitter_typescript.language_tsx,
    "go": tree_sitter_go.language,
    "rust": tree_sitter_rust.language,
    "java": tree_sitter_java.language,
}
LANGUAGES = frozenset(_GRAMMARS)

SUFFIXES: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
}

_local = threading.local()


def language_for(path: str) -> str | None:
    """Return the language of a repository path by its suffix, or ``None``."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    if dot <= 0:
        return None
    return SUFFIXES.get(name[dot:].lower())


@cache
def grammar_for(name: str) -> tree_sitter.Language:
    """Return the tree-sitter grammar of a language in :data:`LANGUAGES` (loaded once)."""
    return tree_sitter.Language(_GRAMMARS[name]())


def parser_for(name: str) -> tree_sitter.Parser:
    """Return this thread's parser for a language in :data:`LANGUAGES`."""
    parsers: dict[str, tree_sitter.Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = {}
        _local.parsers = parsers
    parser = parsers.get(name)
    if parser is None:
        parser = tree_sitter.Parser(grammar_for(name))
        parsers[name] = parser
    return parser
