"""The ``list_files`` tool: the session view's files and folders, pruned to what the caller sees.

A file is named only if the caller may read it (``ctx.visible``: scope, then the
policy, as for ``read_file``), and a folder only if it holds such a file; what
is hidden is counted over the whole listing, never per page, so neither the
glob nor the cursor can steer the count toward a hidden name (docs/tools.md,
"Listing and searching").
"""

from __future__ import annotations

from dataclasses import dataclass

from engine import git
from engine.catalog import schemas as s
from engine.errors import InvalidRequestError
from engine.limits import LIMITS
from engine.paths import glob_matches, glob_may_match_below, validate_glob
from engine.tools.context import CallContext

__all__ = ["list_files", "may_hold_visible", "under"]


def under(path: str, root: str | None) -> bool:
    """Whether ``path`` is ``root`` or lies inside folder ``root`` (no ``root``: always)."""
    return root is None or path == root or path.startswith(root + "/")


def may_hold_visible(ctx: CallContext, folder: str) -> bool:
    """Whether the token's scope could match something inside ``folder`` (else never walk it)."""
    scopes = ctx.token.path_scopes
    return bool(scopes) and all(
        any(glob_may_match_below(g, folder) for g in globs) for globs in scopes
    )


@dataclass
class _Folder:
    entry: git.ViewEntry
    named: bool = False  # it held something visible: offered to the page already


def _glob(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_glob(value)
    except ValueError as exc:
        raise InvalidRequestError(
            "invalid_argument", f"glob: {exc}", fields=["glob"]
        ) from None


def list_files(ctx: CallContext, args: s.ListFilesArgs) -> s.FileList:
    """List the view under ``args.path`` in path order, a page at a time.

    ``args.path`` was checked by the service as a filter is (in scope, or a
    folder with scope under it; readable under the policy). A path naming a
    file lists that file alone; one naming nothing lists nothing.

    Raises:
        InvalidRequestError: ``invalid_argument`` for a glob that is not one.
    """
    root = args.path
    glob = _glob(args.glob)
    after = args.cursor
    cut = len(root) + 1 if root is not None else 0

    def enter(folder: str) -> bool:
        inside = under(folder, root) or (root is not None and root.startswith(folder + "/"))
        return inside and may_hold_visible(ctx, folder)

    def wanted(entry: git.ViewEntry) -> bool:
        if glob is not None:
            relative = entry.path[cut:] if entry.path != root else entry.path.rpartition("/")[2]
            if not glob_matches(glob, relative):
                return False
        return after is None or git.sort_key(entry.path, entry.kind) > after

    entries, _read = ctx.repo.walk_view(ctx.token.agent, ctx.session.staged, enter=enter)
    shown: list[s.ListedEntry] = []
    folders: list[_Folder] = []  # the folders above the walk's position
    pruned = scanned = 0
    more = incomplete = False

    def offer(item: git.ViewEntry) -> None:
        nonlocal more
        if not wanted(item):
            return
        if len(shown) == args.limit:
            more = True
        else:
            shown.append(s.ListedEntry(path=item.path, kind=item.kind, size=item.size))

    for entry in entries:
        if not under(entry.path, root) or (entry.path == root and entry.kind == "folder"):
            continue
        scanned += 1
        if scanned > LIMITS.list_scan_entries:
            incomplete = True
            break
        while folders and not entry.path.startswith(folders[-1].entry.path + "/"):
            folders.pop()
        if entry.kind == "folder":
            if may_hold_visible(ctx, entry.path):
                folders.append(_Folder(entry))
            else:
                pruned += 1  # counted once, never walked
            continue
        if not ctx.visible(entry.path):
            pruned += 1
            continue
        for folder in folders:  # a folder is named once it holds something visible
            if not folder.named:
                folder.named = True
                offer(folder.entry)
        offer(entry)
    last = shown[-1] if shown else None
    return s.FileList(
        entries=shown,
        pruned=pruned,
        truncated=more,
        cursor=git.sort_key(last.path, last.kind) if more and last is not None else None,
        incomplete=incomplete,
    )
