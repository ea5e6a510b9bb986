"""The index of one view: the union of its files' records, with lookup tables.

A :class:`TreeIndex` is built from the files' outlines (no definition made),
derived from another when a staged edit replaces some files, and never changed
once built, so every session with the same view shares it
(docs/semantic.md, "Building and reuse").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping

from engine.semantic.fileindex import FileIndex
from engine.semantic.names import NameIndex, rank_key
from engine.semantic.records import Definition, Import, Occurrence, Role
from engine.semantic.tables import ByPlace, BySymbol, Children, Definitions

__all__ = ["TreeIndex"]

_NO_PATHS: list[str] = []


class TreeIndex:
    """The union of the file records of one view, with lookup tables.

    The tables are built from each file's outline (names, qualnames, symbols and
    bases of its definitions) and the names its occurrences spell, so building
    a view makes no definition: the definitions a lookup returns are made from
    their files' records on first use (a file read from the persisted index is
    then checked; see :class:`~engine.semantic.fileindex.FileIndex`).

    Attributes:
        files: Every regular file of the view (path to blob id), indexed or not.
        indexed: Path to record, for files in a known language.
        cut: Paths of files this view indexed in part or not at all, among those
            a caller of the view may see (sorted): files over 1 MB or over a
            per-file bound (their records say ``truncated``), and files in a
            known language beyond
            ``LIMITS.indexed_files`` that the view's
            scope matches. A result says ``truncated`` for a caller only if it
            may see one of them (:meth:`truncated_for`), so a file it cannot
            see tells it nothing.
        unlisted: True if the view has more than
            ``LIMITS.listed_files`` files: the
            listing stopped, and which files it missed is unknown, so every
            caller is told its results may be cut.
        complete: False if ``LIMITS.indexed_files``
            left files out (whoever may see them): a view with staged edits is
            then built in full, never derived from this one.
        by_name: Definitions by name (a read-only mapping to lists, made per
            name on first lookup); ``by_qualname``, ``by_symbol`` and
            ``by_place`` (``(path, qualname)``) likewise.
        uses: Name to the paths of the files with an occurrence of it (the
            occurrences themselves through :meth:`uses_of`, made lazily).
        imports: ``(path, Import)`` for every import (made on first use).
        children: Base name to the definitions naming it as a base (and Rust
            types implementing a trait of that name).
        impls: ``(path, type, trait, line)`` for Rust ``impl Trait for Type``.
        derived: Lookup structures other modules make from this index on
            first use, by name.

    An index is never changed once built (:meth:`derive` makes a new one), so
    every session with the same view shares it across threads; what it makes
    on first use is made the same by any thread.
    """

    def __init__(
        self,
        files: dict[str, str],
        indexed: dict[str, FileIndex],
        *,
        cut: tuple[str, ...] = (),
        unlisted: bool = False,
        complete: bool = True,
        names: dict[str, list[str]],
        qualnames: dict[str, list[str]],
        uses: dict[str, list[str]],
        impls: list[tuple[str, str, str, int]],
    ) -> None:
        self.files = files
        self.indexed = indexed
        self.cut = cut
        self.unlisted = unlisted
        self.complete = complete
        self.by_name: Mapping[str, list[Definition]] = Definitions(
            names, indexed, qualified=False
        )
        self.by_qualname: Mapping[str, list[Definition]] = Definitions(
            qualnames, indexed, qualified=True
        )
        self.by_symbol: Mapping[str, Definition] = BySymbol(self)
        self.by_place: Mapping[tuple[str, str], Definition] = ByPlace(indexed)
        self.uses = uses
        self.impls = impls
        self.children: Mapping[str, list[Definition]] = Children(self)
        self._name_paths = names
        self._qualname_paths = qualnames
        self._imports: list[tuple[str, Import]] | None = None
        self._symbols: dict[str, str] | None = None
        self._bases: dict[str, list[str]] | None = None
        self._ranks: dict[str, int] | None = None
        self._names: NameIndex | None = None
        self.derived: dict[str, object] = {}

    def __repr__(self) -> str:
        return f"TreeIndex({len(self.files)} files, {len(self.indexed)} indexed)"

    @classmethod
    def build(
        cls,
        files: dict[str, str],
        records: Iterable[FileIndex],
        *,
        left_out: Iterable[str] = (),
        unlisted: bool = False,
        complete: bool = True,
        may_see: Callable[[str], bool] | None = None,
    ) -> TreeIndex:
        """Merge file records into one index (from their outlines; no definition is made).

        Args:
            files: Every regular file of the view (path to blob id).
            records: The records of the files indexed, in the view's file order.
            left_out: Files in a known language the view does not index (beyond
                ``LIMITS.indexed_files``) that a caller
                of the view may see.
            unlisted: The listing of ``files`` stopped at
                ``LIMITS.listed_files``.
            complete: No file was left out by
                ``LIMITS.indexed_files``.
            may_see: If given, only paths it accepts can be seen by a caller of
                this view: a record cut by a per-file bound elsewhere is not
                kept in :attr:`cut`.

        Returns:
            The :class:`TreeIndex`.
        """
        cut = set(left_out)
        by_name: defaultdict[str, list[str]] = defaultdict(list)
        by_qual: defaultdict[str, list[str]] = defaultdict(list)
        uses: defaultdict[str, list[str]] = defaultdict(list)
        indexed: dict[str, FileIndex] = {}
        impls: list[tuple[str, str, str, int]] = []
        for record in records:
            path = record.path
            indexed[path] = record
            if record.truncated and (may_see is None or may_see(path)):
                cut.add(path)
            outline = record.outline
            for name in dict.fromkeys(outline.names):
                by_name[name].append(path)
            for qualname in dict.fromkeys(outline.qualnames):
                by_qual[qualname].append(path)
            for name in record.names:
                uses[name].append(path)
            impls.extend((path, t, trait, line) for t, trait, line in record.impls)
        return cls(
            files,
            indexed,
            cut=tuple(sorted(cut)),
            unlisted=unlisted,
            complete=complete,
            names=dict(by_name),
            qualnames=dict(by_qual),
            uses=dict(uses),
            impls=impls,
        )

    def derive(self, files: dict[str, str], replaced: dict[str, FileIndex | None]) -> TreeIndex:
        """A new index: this one with some files' records replaced (this one is unchanged).

        Tables are copied shallowly; only the entries the replaced files touch
        (their names and qualnames, and the names they use) are rebuilt, so a
        staged edit costs about its own file, not the tree.

        Args:
            files: Every regular file of the new view (path to blob id).
            replaced: Path to its new records, or ``None`` where the file is gone
                or not indexed.

        Returns:
            The new :class:`TreeIndex`.
        """
        paths = set(replaced)
        old = [self.indexed[p] for p in paths if p in self.indexed]
        new = [r for r in replaced.values() if r is not None]
        cut = {p for p in self.cut if p not in paths} | {r.path for r in new if r.truncated}
        indexed = dict(self.indexed)
        for p in paths:
            indexed.pop(p, None)
        for r in new:
            indexed[r.path] = r

        def rebuilt(table: dict[str, list[str]], column: Callable[[FileIndex], Iterable[str]]
                    ) -> dict[str, list[str]]:
            # Files by key: dropping a file's entries costs the files sharing the key.
            out = dict(table)
            added: defaultdict[str, list[str]] = defaultdict(list)
            for r in new:
                for key in dict.fromkeys(column(r)):
                    added[key].append(r.path)
            for key in {k for r in old for k in column(r)} | set(added):
                kept = [p for p in table.get(key, ()) if p not in paths]
                kept += added.get(key, ())
                if kept:
                    out[key] = kept
                else:
                    out.pop(key, None)
            return out

        impls = [x for x in self.impls if x[0] not in paths]
        for r in new:
            impls.extend((r.path, t, trait, line) for t, trait, line in r.impls)
        index = TreeIndex(
            files,
            indexed,
            cut=tuple(sorted(cut)),
            unlisted=self.unlisted,
            complete=self.complete,
            names=rebuilt(self._name_paths, lambda r: r.outline.names),
            qualnames=rebuilt(self._qualname_paths, lambda r: r.outline.qualnames),
            uses=rebuilt(self.uses, lambda r: r.names),
            impls=impls,
        )
        symbols = self._symbols
        if symbols is not None:  # else made on first use
            symbols = dict(symbols)
            for r in old:
                for symbol in r.outline.symbols:
                    if symbols.get(symbol) == r.path:
                        del symbols[symbol]
            for r in new:
                symbols.update(dict.fromkeys(r.outline.symbols, r.path))
            index._symbols = symbols
        return index

    def truncated_for(self, visible: Callable[[str], bool]) -> bool:
        """Whether this view's index was cut where a caller may see.

        Args:
            visible: Whether the caller may see a path (``CallContext.visible``);
                called for the paths of :attr:`cut` in order, until one is seen.

        Returns:
            True if the listing stopped (:attr:`unlisted`) or the caller may see
            a file the view indexed in part or not at all; a file it cannot see
            never makes this True.
        """
        return self.unlisted or any(visible(path) for path in self.cut)

    @property
    def imports(self) -> list[tuple[str, Import]]:
        """``(path, Import)`` for every import, file by file (made on first use)."""
        found = self._imports
        if found is None:
            found = self._imports = [
                (path, imp) for path, record in self.indexed.items() for imp in record.imports
            ]
        return found

    def symbol_paths(self) -> dict[str, str]:
        """SCIP symbol to the path of its file (made on first use)."""
        found = self._symbols
        if found is None:
            found = {}
            for path, record in self.indexed.items():
                found.update(dict.fromkeys(record.outline.symbols, path))
            self._symbols = found
        return found

    def base_paths(self) -> dict[str, list[str]]:
        """Base name to the files with a definition naming it (made on first use)."""
        found = self._bases
        if found is None:
            table: defaultdict[str, list[str]] = defaultdict(list)
            for path, record in self.indexed.items():
                for base in record.outline.bases:
                    table[base].append(path)
            found = self._bases = dict(table)
        return found

    def name_rank(self) -> dict[str, int]:
        """Each defined name's place in ``by_name`` (made on first use)."""
        found = self._ranks
        if found is None:
            found = self._ranks = {name: i for i, name in enumerate(self._name_paths)}
        return found

    def defined_in(self, name: str) -> list[str]:
        """Paths of the files defining ``name``, in view order, without making definitions.

        Do not change the list.
        """
        return self._name_paths.get(name, _NO_PATHS)

    def names(self) -> NameIndex:
        """The name lookup structures of this index (made on first use, then kept)."""
        found = self._names
        if found is None:
            found = self._names = NameIndex(self.by_name)
        return found

    def uses_of(self, name: str) -> Iterator[tuple[str, Occurrence]]:
        """Every occurrence of a name (references and calls) with its file's path, file by file."""
        for path in self.uses.get(name, ()):
            for occ in self.indexed[path].named(name):
                yield path, occ

    def occurrence_count(self) -> int:
        """How many occurrences the index holds (without making them)."""
        return sum(r.occurrence_count for r in self.indexed.values())

    def calls_in(self, d: Definition) -> list[Occurrence]:
        """Call occurrences inside a definition (callees), in source order."""
        record = self.indexed.get(d.path)
        if record is None:
            return []
        return [o for o in record.inside(d.qualname) if o.roles & Role.CALL]

    def enclosing(self, path: str, occ: Occurrence) -> Definition | None:
        """The definition an occurrence sits in, or ``None`` at file level."""
        return None if occ.enclosing is None else self.by_place.get((path, occ.enclosing))

    def resolve(
        self,
        symbol: str,
        path: str | None = None,
        visible: Callable[[str], bool] | None = None,
    ) -> list[Definition]:
        """Definitions a symbol argument names, best first.

        Args:
            symbol: A SCIP symbol string, a dotted name within a file
                (``Router.add_route``) or a plain name (``add_route``); each
                form is tried in that order until one finds something.
            path: Keep only definitions in that file or under that folder.
            visible: Keep only definitions whose path this accepts, at every
                step, so a definition it refuses never changes which form is
                used (a name defined only where the caller cannot see is not
                found, exactly as one defined nowhere).

        Returns:
            The definitions, ordered by :func:`rank_key`; empty if none.
        """
        prefix = None if path is None else path.rstrip("/") + "/"

        def kept(defs: Iterable[Definition]) -> list[Definition]:
            return [
                d
                for d in defs
                if (prefix is None or d.path == path or d.path.startswith(prefix))
                and (visible is None or visible(d.path))
            ]

        found: list[Definition] = []
        by_symbol = self.by_symbol.get(symbol)
        if by_symbol is not None:
            found = kept([by_symbol])
        if not found:
            found = kept(self.by_qualname.get(symbol, ()))
        if not found and "." in symbol:
            tail = symbol.rsplit(".", 1)[1]
            found = kept(d for d in self.by_name.get(tail, ()) if d.qualname.endswith(symbol))
        if not found:
            found = kept(self.by_name.get(symbol, ()))
        return sorted(found, key=rank_key)

