"""What a file's own imports and definitions say a name refers to.

Relations are resolved by name, so where a name repeats they over-approximate.
This module narrows them where the using file itself *proves* what a name is
bound to (its own top-level definition, or an import from a module that
resolves to files of the tree, followed up to ``LIMITS.binding_hops`` files deep),
and never otherwise. Which imports resolve, per language: docs/semantic.md,
"Relations and impact".
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.limits import LIMITS
from engine.semantic.languages import language_for

if TYPE_CHECKING:
    from engine.semantic.records import Definition, Import
    from engine.semantic.tree import TreeIndex

__all__ = [
    "binds_elsewhere",
    "import_files",
    "import_points_elsewhere",
    "narrowed",
    "origins",
]

_PY_SUFFIXES = (".py", ".pyi")
_JS_SUFFIXES = (".ts", ".tsx", ".mts", ".cts", ".d.ts", ".js", ".jsx", ".mjs", ".cjs")
_JS_LANGUAGES = ("javascript", "typescript", "tsx")


class _Modules:
    """Python module names of one index's files: every dotted tail of each path."""

    def __init__(self, index: TreeIndex) -> None:
        by_tail: defaultdict[str, set[str]] = defaultdict(set)
        for path in index.indexed:
            stem, dot, suffix = path.rpartition(".")
            if not dot or "." + suffix not in _PY_SUFFIXES:
                continue
            parts = stem.split("/")
            if parts[-1] == "__init__":
                parts.pop()
            for k in range(len(parts)):
                by_tail[".".join(parts[k:])].add(path)
        self.by_tail: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in by_tail.items()}


def _modules(index: TreeIndex) -> _Modules:
    found = index.derived.get("python_modules")
    if not isinstance(found, _Modules):
        found = _Modules(index)
        index.derived["python_modules"] = found  # a race makes it twice, harmlessly
    return found


def import_files(
    index: TreeIndex, importer: str, module: str, visible: Visible | None = None
) -> frozenset[str] | None:
    """The files of the tree an import's module can name.

    Args:
        index: The view's index.
        importer: Path of the importing file (its language picks the rules).
        module: The module as written (``Import.module``).
        visible: If given, only files it accepts count as the tree's, so
            files a caller may not see never change what its results show.

    Returns:
        The files (empty: a module outside the tree), or ``None`` when the
        spelling does not fix the file (a language or form not handled).
    """
    language = language_for(importer)
    if language == "python":
        files = _python_files(index, importer, module)
    elif language in _JS_LANGUAGES:
        files = _js_files(index, importer, module)
    else:
        return None
    if files is None or visible is None:
        return files
    return frozenset(f for f in files if visible(f))


def _python_files(index: TreeIndex, importer: str, module: str) -> frozenset[str] | None:
    if not module or module.strip(".") != module.lstrip("."):
        return None  # "a." or empty: not a module name
    dots = len(module) - len(module.lstrip("."))
    rest = module[dots:]
    if dots == 0:
        return _modules(index).by_tail.get(rest, frozenset())
    folder = posixpath.dirname(importer)
    for _ in range(dots - 1):
        if not folder:
            return None  # above the tree's root
        folder = posixpath.dirname(folder)
    base = posixpath.join(folder, *rest.split(".")) if rest else folder
    candidates = [base + s for s in _PY_SUFFIXES] + [posixpath.join(base, "__init__.py")]
    return frozenset(c for c in candidates if c in index.indexed)


def _js_files(index: TreeIndex, importer: str, module: str) -> frozenset[str] | None:
    if not module.startswith(("./", "../")):
        return None  # a package or an alias: not fixed by the spelling
    base = posixpath.normpath(posixpath.join(posixpath.dirname(importer), module))
    if base.startswith("../") or base == "..":
        return None
    stem = base
    for suffix in (".js", ".jsx", ".mjs", ".cjs"):
        if base.endswith(suffix):  # TypeScript imports "./b.js" for "./b.ts"
            stem = base[: -len(suffix)]
            break
    candidates = [base, *(stem + s for s in _JS_SUFFIXES)]
    candidates += [posixpath.join(base, "index" + s) for s in _JS_SUFFIXES]
    return frozenset(c for c in candidates if c in index.indexed)


_FAMILY = {"typescript": "javascript", "tsx": "javascript"}
Visible = Callable[[str], bool]
"""A test of whether the caller may see a path."""


def _family(path: str) -> str | None:
    language = language_for(path)
    return _FAMILY.get(language, language) if language is not None else None


def _defines_at_top(index: TreeIndex, path: str, name: str) -> bool:
    tops = index.derived.get("top_names")
    if not isinstance(tops, dict):
        tops = index.derived["top_names"] = {}
    names = tops.get(path)
    if names is None:
        record = index.indexed.get(path)
        outline = record.outline if record is not None else None
        # From the outline (no definition made): a top-level qualname is its name.
        names = tops[path] = (
            frozenset(n for n, q in zip(outline.names, outline.qualnames, strict=True) if n == q)
            if outline is not None
            else frozenset()
        )
    return name in names


def _local_name(imp: Import) -> str | None:
    """The name an import binds for a named import (``from m import n as a``: ``a``)."""
    if imp.name is None or imp.name in ("*", "default"):
        return None
    return imp.alias or imp.name


def origins(
    index: TreeIndex, path: str, name: str, visible: Visible | None = None, hops: int = 0
) -> frozenset[str] | None:
    """The files whose top-level definition of ``name`` a use in ``path`` refers to.

    Args:
        index: The view's index.
        path: The using file.
        name: The name as used there.
        visible: If given, modules resolve among the files it accepts only
            (:func:`import_files`): what a caller may not see never decides.
        hops: Files followed so far (callers pass 0).

    Returns:
        The files (empty: bound to something outside the tree), or ``None``
        when the file does not prove what the name is bound to.
    """
    if _defines_at_top(index, path, name):
        return frozenset((path,))
    record = index.indexed.get(path)
    if record is None or hops >= LIMITS.binding_hops:
        return None
    stars: list[Import] = []
    for imp in record.imports:
        if imp.enclosing is not None:
            continue  # binds inside a function only
        if imp.name == "*" and imp.alias is None:
            stars.append(imp)
        elif _local_name(imp) == name and imp.name is not None:
            return _through(index, path, imp.module, imp.name, visible, hops)
    found: set[str] = set()
    for imp in stars:
        files = import_files(index, path, imp.module, visible)
        if files is None:
            return None
        for f in files:
            there = origins(index, f, name, visible, hops + 1)
            if there:
                found |= there
    return frozenset(found) if found else None


def _through(
    index: TreeIndex,
    importer: str,
    module: str,
    name: str,
    visible: Visible | None,
    hops: int,
) -> frozenset[str] | None:
    """The origins of ``name`` imported from ``module`` by ``importer``."""
    files = import_files(index, importer, module, visible)
    if files is None:
        return None
    found: set[str] = set()
    for f in files:
        there = origins(index, f, name, visible, hops + 1)
        if there is None:
            return None
        found |= there
    return frozenset(found)


def import_points_elsewhere(
    index: TreeIndex, importer: str, imp: Import, target: str, visible: Visible | None = None
) -> bool:
    """True iff a named import provably names a definition outside ``target``'s file.

    Its origins (:func:`origins`, through the imported module) are known and
    do not include ``target``; a module outside the tree has none. With
    ``visible``, an importer it accepts is judged on visible files only.
    """
    if imp.name is None or imp.name in ("*", "default"):
        return False
    if _family(importer) != _family(target):
        return True
    guard = visible if visible is not None and visible(importer) else None
    found = _through(index, importer, imp.module, imp.name, guard, 0)
    return found is not None and target not in found


def binds_elsewhere(
    index: TreeIndex, path: str, d: Definition, visible: Visible | None = None
) -> bool:
    """True iff uses of ``d.name`` in ``path`` provably refer to something other than ``d``.

    Args:
        index: The view's index.
        path: The using file.
        d: The definition the uses are matched to by name.
        visible: What the caller may see. A file it accepts is judged on
            visible files only (its imports of hidden modules resolve as if
            outside the tree), so hidden files never change which visible
            uses are shown; a hidden file (only ever counted) is judged on
            everything.

    Returns:
        True for a file of another language family; for a definition at its
        file's top level, True when the file's origins of the name are known
        and do not include ``d``'s file. False otherwise, and for ``d``'s own file.
    """
    if path == d.path:
        return False
    if _family(path) != _family(d.path):
        return True
    if d.scope is not None:
        return False
    guard = visible if visible is not None and visible(path) else None
    found = origins(index, path, d.name, guard)
    return found is not None and d.path not in found


def narrowed(
    index: TreeIndex,
    path: str,
    name: str,
    candidates: list[Definition],
    visible: Visible | None = None,
) -> list[Definition]:
    """Of the definitions named ``name``, those a use in ``path`` can refer to, in order.

    The candidates in the name's known origins (:func:`origins`) if any are
    there; else those of the using file's language family (none of another
    family: a Python call never resolves to a Java method).

    Args:
        index: The view's index.
        path: The using file.
        name: The name used.
        candidates: The definitions of that name to choose from (already
            limited to what the caller may see), in rank order.
        visible: What the caller may see (``path`` is one of its files):
            modules resolve among visible files only.
    """
    found = origins(index, path, name, visible)
    if found:
        chosen = [d for d in candidates if d.path in found and d.scope is None]
        if chosen:
            return chosen
    family = _family(path)
    return [d for d in candidates if _family(d.path) == family]
