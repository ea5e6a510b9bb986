"""The lookup mappings of a view's index, each made from its files' records on first use.

A view's tables hold paths, not definitions: these read-only mappings make the
definitions a lookup returns from the files' records when first asked, so only
the files a query touches are decoded (docs/semantic.md, "Building and reuse").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from engine.semantic.fileindex import FileIndex
from engine.semantic.records import Definition

__all__ = ["ByPlace", "BySymbol", "Children", "Definitions", "Tables"]


class Tables(Protocol):
    """What the mappings read of a view's index (:class:`~engine.semantic.tree.TreeIndex`)."""

    indexed: dict[str, FileIndex]
    impls: list[tuple[str, str, str, int]]
    by_name: Mapping[str, list[Definition]]

    def symbol_paths(self) -> dict[str, str]:
        """SCIP symbol to the path of its file."""
        ...

    def base_paths(self) -> dict[str, list[str]]:
        """Base name to the files with a definition naming it."""
        ...

    def name_rank(self) -> dict[str, int]:
        """Each defined name's place in ``by_name``."""
        ...


class Definitions(Mapping[str, list[Definition]]):
    """Definitions by a key (name or qualname), made from the files on first lookup.

    Holds each key's files (in the view's file order); a lookup makes the list
    from those files' records (so only the files a query touches are decoded)
    and keeps it. The lists are shared: do not change them.
    """

    __slots__ = ("_indexed", "_made", "_qualified", "paths")

    def __init__(
        self, paths: dict[str, list[str]], indexed: dict[str, FileIndex], *, qualified: bool
    ) -> None:
        self.paths = paths  # key -> the files defining it, in the view's file order
        self._indexed = indexed
        self._qualified = qualified
        self._made: dict[str, list[Definition]] = {}

    def __getitem__(self, key: str) -> list[Definition]:
        made = self._made.get(key)
        if made is None:
            paths = self.paths[key]  # KeyError for a key no file defines
            indexed = self._indexed
            if self._qualified:
                made = [d for p in paths for d in indexed[p].qualified(key)]
            else:
                made = [d for p in paths for d in indexed[p].defined(key)]
            self._made[key] = made
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __contains__(self, key: object) -> bool:
        return key in self.paths


class BySymbol(Mapping[str, Definition]):
    """SCIP symbol to its definition (the last of a repeated one), through its file."""

    __slots__ = ("_index",)

    def __init__(self, index: Tables) -> None:
        self._index = index

    def __getitem__(self, symbol: str) -> Definition:
        path = self._index.symbol_paths().get(symbol)
        record = self._index.indexed.get(path) if path is not None else None
        found = record.symbol(symbol) if record is not None else None
        if found is None:
            raise KeyError(symbol)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.symbol_paths())

    def __len__(self) -> int:
        return len(self._index.symbol_paths())


class ByPlace(Mapping[tuple[str, str], Definition]):
    """``(path, qualname)`` to the first definition of that qualname in that file."""

    __slots__ = ("_indexed",)

    def __init__(self, indexed: dict[str, FileIndex]) -> None:
        self._indexed = indexed

    def __getitem__(self, place: tuple[str, str]) -> Definition:
        path, qualname = place
        record = self._indexed.get(path)
        found = record.qualified(qualname) if record is not None else ()
        if not found:
            raise KeyError(place)
        return found[0]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for path, record in self._indexed.items():
            for qualname in dict.fromkeys(record.outline.qualnames):
                yield path, qualname

    def __len__(self) -> int:
        return sum(len(set(r.outline.qualnames)) for r in self._indexed.values())


class Children(Mapping[str, list[Definition]]):
    """Base name to the definitions naming it as a base, then Rust types implementing it.

    Order: definitions by their name's place among the view's names
    (``by_name`` order), then in file order; then ``impl`` blocks in order.
    """

    __slots__ = ("_index", "_made")

    def __init__(self, index: Tables) -> None:
        self._index = index
        self._made: dict[str, list[Definition]] = {}

    def _find(self, base: str) -> list[Definition]:
        index = self._index
        found = [
            d
            for p in index.base_paths().get(base, ())
            for d in index.indexed[p].definitions
            for b in d.bases
            if b == base
        ]
        rank = index.name_rank()
        found.sort(key=lambda d: rank.get(d.name, len(rank)))  # stable: file order kept
        for path, typ, trait, _line in index.impls:
            if trait == base:
                found.extend(
                    d
                    for d in index.by_name.get(typ, ())
                    if d.path == path or d.kind in ("struct", "enum", "type")
                )
        return found

    def __getitem__(self, base: str) -> list[Definition]:
        made = self._made.get(base)
        if made is None:
            made = self._made[base] = self._find(base)
        if not made:
            raise KeyError(base)
        return made

    def _keys(self) -> list[str]:
        index = self._index
        keys = dict.fromkeys(index.base_paths())
        keys.update(dict.fromkeys(trait for _p, _t, trait, _l in index.impls))
        return [k for k in keys if k in self]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

