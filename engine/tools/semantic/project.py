"""The ``project_context`` tool: a pre-write briefing, recording the caller's intent.

Symbols under the paths, the convention files nearest them, and the peers
whose intents or staged paths overlap (docs/semantic.md, "Intents").
"""

from __future__ import annotations

import bisect

from engine.catalog import schemas as s
from engine.limits import LIMITS
from engine.semantic.records import Definition
from engine.semantic.tree import TreeIndex
from engine.state import Intent
from engine.tools.context import CallContext
from engine.tools.semantic._shared import (
    check_paths,
    fit,
    read_view_file,
    to_symbol,
    under,
    view_index,
)
from engine.tools.semantic.intents import bounded, repo_id

__all__ = ["CONVENTION_FILES", "project_context"]

CONVENTION_FILES = (
    "AGENTS.md",
    "CONTRIBUTING.md",
    "CONVENTIONS.md",
    ".editorconfig",
    "pyproject.toml",
    "setup.cfg",
    "tox.ini",
    "ruff.toml",
    ".ruff.toml",
    ".flake8",
    ".pylintrc",
    "mypy.ini",
    ".eslintrc",
    ".eslintrc.js",
    ".eslintrc.cjs",
    ".eslintrc.json",
    ".eslintrc.yml",
    ".eslintrc.yaml",
    "eslint.config.js",
    "eslint.config.mjs",
    ".prettierrc",
    ".prettierrc.json",
    "biome.json",
    "tsconfig.json",
    ".golangci.yml",
    ".golangci.yaml",
    "rustfmt.toml",
    ".rustfmt.toml",
    "clippy.toml",
    "checkstyle.xml",
)


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _sorted_files(index: TreeIndex) -> list[str]:
    found = index.derived.get("sorted_files")
    if not isinstance(found, list):
        found = index.derived["sorted_files"] = sorted(index.files)
    return found


def _may_name(ctx: CallContext, index: TreeIndex, path: str, staged: bool) -> bool:
    """True iff the caller may be shown a peer's path.

    A path that is not a folder of the caller's view (a file, or a file to
    come) is shown only if the caller may see it. A declared folder is shown
    only if it holds a file the caller may see, so a folder is never named
    because a pattern scope could match below it, nor because a deny rule
    covers only what is inside it.
    """
    if path not in _folders(index):
        # A file of the view, or a path that names nothing yet (a file to come).
        return ctx.visible(path)
    if staged:
        return False
    files = _sorted_files(index)
    prefix = path.rstrip("/") + "/"
    at = bisect.bisect_left(files, prefix)
    while at < len(files) and files[at].startswith(prefix):
        if ctx.visible(files[at]):
            return True
        at += 1
    return False


def _peer_intents(
    ctx: CallContext, mine: list[str], names: set[str], index: TreeIndex
) -> tuple[list[s.PeerIntent], int]:
    repo = repo_id(ctx.repo)
    declared = ctx.store.intents(repo, now=ctx.now)
    staged = ctx.store.intents(repo, now=ctx.now, staged=True)
    me = (ctx.session.session_id, ctx.session.token_id)
    wanted: dict[tuple[str, str], tuple[str, dict[str, bool]]] = {}
    for kind, intents in ((False, declared), (True, staged)):
        for intent in intents:
            sid = (intent.session, intent.token_id)
            if sid != me:
                paths = wanted.setdefault(sid, (intent.agent, {}))[1]
                for path in intent.paths:
                    paths[path] = paths.get(path, True) and kind  # declared wins
    out: list[s.PeerIntent] = []
    pruned = 0
    for _sid, (agent, paths) in sorted(wanted.items()):
        overlapping = set()
        hidden = 0
        for path, is_staged in paths.items():
            if any(_overlaps(path, m) for m in mine):
                if _may_name(ctx, index, path, is_staged):
                    overlapping.add(path)
                else:
                    hidden += 1
            elif names and ctx.visible(path) and not names.isdisjoint(_top_names(index, path)):
                # Touches a symbol the caller's paths define. Only visible paths
                # are compared by name, so a name the caller defines cannot
                # probe a hidden file's definitions.
                overlapping.add(path)
        pruned += hidden
        if not overlapping:
            continue
        shown = sorted(overlapping)
        if shown:
            out.append(s.PeerIntent(agent=agent, paths=shown))
    return out, pruned


def _top_names(index: TreeIndex, path: str) -> tuple[str, ...]:
    """The names a file defines at its top level (from its outline: nothing made)."""
    record = index.indexed.get(path)
    if record is None:
        return ()
    outline = record.outline
    return tuple(n for n, q in zip(outline.names, outline.qualnames, strict=True) if n == q)


def _folders(index: TreeIndex) -> frozenset[str]:
    """Every folder of the view (made once per index)."""
    found = index.derived.get("folders")
    if not isinstance(found, frozenset):
        folders: set[str] = set()
        for path in index.files:
            cut = path.rfind("/")
            while cut > 0 and path[:cut] not in folders:
                folders.add(path[:cut])
                cut = path.rfind("/", 0, cut)
        found = index.derived["folders"] = frozenset(folders)
    return found


def _convention_files(index: TreeIndex) -> dict[str, list[str]]:
    """Convention files of the view by folder (``""``: the root), in CONVENTION_FILES order."""
    found = index.derived.get("conventions")
    if not isinstance(found, dict):
        rank = {name: k for k, name in enumerate(CONVENTION_FILES)}
        by_folder: dict[str, list[str]] = {}
        for path in index.files:
            folder, _slash, name = path.rpartition("/")
            if name in rank:
                by_folder.setdefault(folder, []).append(path)
        for listed in by_folder.values():
            listed.sort(key=lambda p: rank[p.rpartition("/")[2]])
        found = index.derived["conventions"] = by_folder
    return found


def _conventions(
    ctx: CallContext, index: TreeIndex, paths: list[str]
) -> tuple[list[s.FileContent], int, bool]:
    by_folder = _convention_files(index)
    order: dict[str, None] = {}
    for path in paths:
        folder = path if path not in index.files else path.rpartition("/")[0]
        # The folders above it that the view has, root first: a walk that stops
        # at the first folder the view lacks (a deep made-up path costs nothing).
        chain = [""]
        at = 0
        while folder and at < len(folder):
            end = folder.find("/", at)
            end = len(folder) if end < 0 else end
            prefix = folder[:end]
            if prefix not in _folders(index):
                break
            chain.append(prefix)
            at = end + 1
        for prefix in reversed(chain):
            order.update(dict.fromkeys(by_folder.get(prefix, ())))
    found: list[s.FileContent] = []
    pruned = 0
    truncated = False
    used = 0
    for path in order:
        if not ctx.visible(path):
            pruned += 1
            continue
        data = read_view_file(ctx, path)
        if data is None:
            continue
        size = len(data)
        if size > LIMITS.convention_file_bytes:
            data = data[: LIMITS.convention_file_bytes]
            truncated = True
        text = data.decode("utf-8", "replace")
        if used + len(text.encode()) > LIMITS.result_budget_bytes // 2:
            truncated = True
            break
        used += len(text.encode())
        found.append(s.FileContent(path=path, ref=None, encoding="utf-8", content=text, size=size))
    return found, pruned, truncated


def project_context(ctx: CallContext, args: s.ProjectContextArgs) -> s.ProjectContext:
    """A pre-write briefing for some paths, recording the caller's intent for them."""
    paths = check_paths(ctx, args.paths)
    index = view_index(ctx)
    pruned = 0
    defs: list[Definition] = []
    for path, record in sorted(index.indexed.items()):
        if under(path, paths):
            if ctx.visible(path):
                defs.extend(record.definitions)
            else:
                pruned += 1  # one per hidden file, whatever it defines
    defs.sort(key=lambda d: (d.scope is not None, d.path, d.range.start_line))
    symbols, cut_symbols = fit((to_symbol(d) for d in defs), LIMITS.result_budget_bytes // 4)
    conventions, hidden, cut_conventions = _conventions(ctx, index, paths)
    names = {d.name for d in defs if d.scope is None}
    peers, hidden_peers = _peer_intents(ctx, paths, names, index)
    expires = min(ctx.now + LIMITS.intent_ttl_seconds, int(ctx.token.expires_at))
    ctx.store.put_intent(
        Intent(
            repo=repo_id(ctx.repo),
            session=ctx.session.session_id,
            token_id=ctx.session.token_id,
            agent=ctx.token.agent,
            paths=bounded(tuple(dict.fromkeys(paths))),
            expires_at=expires,
        ),
        now=ctx.now,
    )
    return s.ProjectContext(
        symbols=symbols,
        conventions=conventions,
        peers=peers,
        pruned=pruned + hidden + hidden_peers,
        truncated=cut_symbols or cut_conventions or index.truncated_for(ctx.visible),
    )
