"""A session's staged change saved as git objects under ``refs/chit/sessions/<session>``.

The reference points at a commit whose parent is the commit the change is
staged on and whose tree holds the ``chit-session/1`` record (who the session
belongs to, until when, what is deleted, which paths conflict), the staged
files at their paths under ``staged/`` and each conflict's sides under
``conflicts/<n>/``. Blobs at protected paths are sealed as a commit seals
them. The format, with an example: docs/engine-api.md, "Sessions that survive".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pygit2
from pygit2.enums import FileMode

from engine.auth import cbor
from engine.errors import ProfileError, RepositoryError
from engine.git.handle import Handle, bounded_blob, tree_entry
from engine.git.reffiles import list_refs, read_ref, swap_ref
from engine.git.views import MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK, StagedChange, check_path
from engine.limits import LIMITS
from engine.paths import is_session_id

__all__ = [
    "RECORD_VERSION",
    "SESSION_FOLDER",
    "Owner",
    "SaveCache",
    "SavedSession",
    "current_commit",
    "drop_session",
    "peek_session",
    "restore_session",
    "save_session",
    "saved_sessions",
    "session_ref",
]

SESSION_FOLDER: Final = "refs/chit/sessions"
RECORD_VERSION: Final = "chit-session/1"
RECORD_ENTRY: Final = "session"
STAGED_FOLDER: Final = "staged"
CONFLICTS_FOLDER: Final = "conflicts"
SIDES: Final = ("base", "ours", "theirs")

_MODES = frozenset({MODE_FILE, MODE_EXECUTABLE, MODE_SYMLINK})
_HEX40 = frozenset("0123456789abcdef")
_RECORD_KEYS = frozenset(
    {"v", "session", "agent", "token_id", "lane", "base", "expires_at", "time", "deleted",
     "conflicts"}
)
_UNREADABLE = "the session's saved staged change cannot be read"

_BlobKey = tuple[str, str, bool]
_Entry = tuple[str, pygit2.Oid, int]


@dataclass
class SaveCache:
    """What one session's last save wrote, so the next writes only what changed.

    A save writes (and seals) only content whose bytes object is not the one
    cached for its path, so a staged change of many files costs one blob per
    changed file, and a sealed file is not sealed afresh (a new nonce, a new
    blob) on every save; and it writes only the folders whose entries changed.
    Everything cached is reachable from the session's reference (a failed save
    empties the cache), so nothing it names is ever pruned by ``git gc``.

    Attributes:
        blobs: ``(kind, path, sealed)`` to ``(content, blob id)``.
        folders: Each folder of the last saved tree (``""`` the root), with its
            sorted entries and the tree id they were written as.
    """

    blobs: dict[_BlobKey, tuple[bytes, pygit2.Oid]] = field(default_factory=dict)
    folders: dict[str, tuple[tuple[_Entry, ...], pygit2.Oid]] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget everything (the reference moved elsewhere, or was removed)."""
        self.blobs.clear()
        self.folders.clear()


def session_ref(session_id: str) -> str:
    """``refs/chit/sessions/<session_id>``.

    Raises:
        ValueError: If ``session_id`` is not a session id (a caller bug: the
            service checks ids first, :func:`engine.paths.validate_session_id`).
    """
    if not is_session_id(session_id):
        raise ValueError("not a session id")
    return f"{SESSION_FOLDER}/{session_id}"


@dataclass(frozen=True)
class Owner:
    """Who a saved session belongs to and until when (never the token itself).

    Attributes:
        agent: The agent of the token identity.
        token_id: The token id (identity block id, 32 hex).
        expires_at: Unix seconds: the latest expiry of the tokens that changed it.
    """

    agent: str
    token_id: str
    expires_at: int

    @property
    def lane(self) -> str:
        """The agent's lane, ``agent/<agent>``."""
        return f"agent/{self.agent}"


@dataclass(frozen=True)
class SavedSession:
    """A saved session's record, read before any content is opened.

    Attributes:
        commit: The commit the session reference points at.
        session: The session id the record names.
        owner: Its token identity and expiry.
        base: The commit the change is staged on (the commit's parent).
        time: When it was saved, Unix seconds.
        deleted: Paths staged as deleted.
        conflicts: ``(path, ours mode, theirs mode)`` of each conflict, in the
            order of ``conflicts/<n>/``.
    """

    commit: pygit2.Oid
    session: str
    owner: Owner
    base: pygit2.Oid
    time: int
    deleted: tuple[str, ...]
    conflicts: tuple[tuple[str, int | None, int | None], ...]


def _unreadable() -> RepositoryError:
    return RepositoryError("internal_error", _UNREADABLE)


def _blob(
    handle: Handle, cache: SaveCache, used: set[_BlobKey], kind: str, path: str, data: bytes
) -> pygit2.Oid:
    """The id of ``data`` stored for ``path`` (sealed where the repository's sealing says)."""
    sealed = handle.sealing.must_seal(path, data)
    key = (kind, path, sealed)
    used.add(key)
    known = cache.blobs.get(key)
    if known is not None and known[0] is data:
        return known[1]
    stored = handle.sealing.seal(path, data) if sealed else data
    oid = handle.repo.create_blob(stored)
    cache.blobs[key] = (data, oid)
    return oid


def _write_tree(
    repo: pygit2.Repository, entries: dict[str, tuple[pygit2.Oid, int]], cache: SaveCache
) -> pygit2.Oid:
    """The tree holding ``entries`` (path to blob and mode), writing only folders that changed.

    A folder that changed is built on its last saved version, inserting only
    its new or changed entries (libgit2 checks each inserted object exists); one
    that lost entries is built afresh. Entries are never looked up or removed
    by name: pygit2 keeps the strings its lookups are handed.

    Raises:
        ValueError: If a path is both a file and a folder (a caller bug).
    """
    root: dict[str, Any] = {}
    for path, value in entries.items():
        node = root
        *folders, name = path.split("/")
        for folder in folders:
            node = node.setdefault(folder, {})
            if not isinstance(node, dict):
                raise ValueError("a staged path is both a file and a folder")
        if name in node:
            raise ValueError("a staged path is both a file and a folder")
        node[name] = value
    written: dict[str, tuple[tuple[_Entry, ...], pygit2.Oid]] = {}

    def write(where: str, node: dict[str, Any]) -> pygit2.Oid:
        items: list[_Entry] = []
        for name in sorted(node):
            value = node[name]
            if isinstance(value, dict):
                items.append((name, write(f"{where}{name}/", value), int(FileMode.TREE)))
            else:
                items.append((name, value[0], value[1]))
        key = tuple(items)
        last = cache.folders.get(where)
        if last is not None and last[0] == key:
            oid = last[1]
        else:
            if last is not None and {n for n, _, _ in last[0]} <= set(node):
                builder = repo.TreeBuilder(last[1])  # it only gained or changed entries
                kept = set(last[0])
                fresh = [item for item in key if item not in kept]
            else:
                builder, fresh = repo.TreeBuilder(), items
            for name, entry, mode in fresh:
                builder.insert(name, entry, mode)
            oid = builder.write()
        written[where] = (key, oid)
        return oid

    tree = write("", root)
    cache.folders = written
    return tree


def _record(
    session_id: str,
    owner: Owner,
    base: pygit2.Oid,
    staged: StagedChange,
    conflicts: list[str],
    now: int,
) -> bytes:
    return cbor.encode({
        "v": RECORD_VERSION,
        "session": session_id,
        "agent": owner.agent,
        "token_id": owner.token_id,
        "lane": owner.lane,
        "base": str(base),
        "expires_at": int(owner.expires_at),
        "time": int(now),
        "deleted": sorted(p for p, data in staged.changes.items() if data is None),
        "conflicts": [
            {"path": path, "ours_mode": modes[0], "theirs_mode": modes[1]}
            for path in conflicts
            for modes in [staged.conflict_modes.get(path, (None, None))]
        ],
    })


def save_session(
    handle: Handle,
    session_id: str,
    owner: Owner,
    staged: StagedChange,
    *,
    expected: pygit2.Oid | None,
    now: int,
    cache: SaveCache,
) -> pygit2.Oid | None:
    """Save ``staged`` as the session's reference, or delete the reference if nothing is staged.

    Objects are written before the reference moves (an interrupted save leaves
    unreachable objects, as an interrupted commit does); the reference moves by
    compare and swap from ``expected``.

    Args:
        handle: The repository.
        session_id: A session id.
        owner: The session's token identity and expiry.
        staged: The staged change (its ``base`` set unless it is empty).
        expected: The commit the reference points at now (``None``: absent).
        now: Unix seconds, the save's time.
        cache: The session's :class:`SaveCache`, updated (emptied if the save fails).

    Returns:
        The new commit, or ``None`` if the reference was deleted (or never made).

    Raises:
        RepositoryError: ``conflict`` if the reference is not at ``expected``
            (another engine saved the session) or is locked; ``seal_invalid``
            if a protected file must be sealed and there is no sealing key.
    """
    ref = session_ref(session_id)
    repo = handle.repo
    if staged.is_empty() and not staged.conflicts:
        cache.clear()
        swap_ref(repo, handle.commondir, ref, None, expected, "chit: session dropped")
        return None
    base = staged.base
    if base is None:
        raise ValueError("a staged change without a base cannot be saved")
    conflicts = sorted(staged.conflicts)
    record = repo.create_blob(_record(session_id, owner, base, staged, conflicts, now))
    entries: dict[str, tuple[pygit2.Oid, int]] = {RECORD_ENTRY: (record, MODE_FILE)}
    used: set[_BlobKey] = set()
    try:
        for path, data in staged.changes.items():
            if data is not None:
                oid = _blob(handle, cache, used, STAGED_FOLDER, path, data)
                entries[f"{STAGED_FOLDER}/{path}"] = (oid, staged.modes.get(path, MODE_FILE))
        for number, path in enumerate(conflicts):
            for side, data in zip(SIDES, staged.conflicts[path], strict=True):
                if data is not None:
                    oid = _blob(handle, cache, used, side, path, data)
                    entries[f"{CONFLICTS_FOLDER}/{number}/{side}"] = (oid, MODE_FILE)
        for key in [k for k in cache.blobs if k not in used]:
            del cache.blobs[key]  # content no longer staged: let it go
        tree = _write_tree(repo, entries, cache)
        signature = pygit2.Signature("chit", "chit@localhost", int(now), 0)
        commit = repo.create_commit(
            None, signature, signature, f"chit: session {session_id}\n", tree, [base]
        )
        swap_ref(repo, handle.commondir, ref, commit, expected, "chit: session saved")
    except BaseException:
        cache.clear()  # what it names may now be unreachable
        raise
    return commit


def drop_session(handle: Handle, session_id: str, expected: pygit2.Oid) -> None:
    """Delete the session's reference iff it still points at ``expected``.

    Raises:
        RepositoryError: ``conflict`` if it moved or is locked.
    """
    swap_ref(handle.repo, handle.commondir, session_ref(session_id), None, expected,
             "chit: session dropped")


def current_commit(handle: Handle, session_id: str) -> pygit2.Oid | None:
    """The commit the session's reference points at now, or ``None``."""
    return read_ref(handle.commondir, session_ref(session_id))


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _unreadable()
    return value


def _mode(value: Any) -> int | None:
    if value is not None and (type(value) is not int or value not in _MODES):
        raise _unreadable()
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _unreadable()
    return value


def _path(value: Any) -> str:
    try:
        check_path(value)
    except ValueError:
        raise _unreadable() from None
    return str(value)


def _read_record(handle: Handle, commit: pygit2.Commit) -> dict[str, Any]:
    data = bounded_blob(handle.repo, tree_entry(commit.tree, RECORD_ENTRY),
                        LIMITS.saved_session_record_bytes)
    if data is None:
        raise _unreadable()
    try:
        record = cbor.decode(data, max_size=LIMITS.saved_session_record_bytes,
                             max_depth=4)
    except ProfileError:
        raise _unreadable() from None
    if not isinstance(record, dict) or set(record) != _RECORD_KEYS:
        raise _unreadable()
    if record["v"] != RECORD_VERSION:
        raise _unreadable()
    return record


def peek_session(handle: Handle, session_id: str) -> SavedSession | None:
    """Read the session's record, opening no content.

    Args:
        handle: The repository.
        session_id: A session id.

    Returns:
        The record, or ``None`` if the session has no reference.

    Raises:
        RepositoryError: ``internal_error`` if the reference, its commit or its
            record is not what :func:`save_session` writes (for another session
            id, say, or another format version).
    """
    target = current_commit(handle, session_id)
    if target is None:
        return None
    try:
        commit = handle.repo[target].peel(pygit2.Commit)
    except (pygit2.GitError, KeyError, ValueError):
        raise _unreadable() from None
    record = _read_record(handle, commit)
    base = _text(record["base"])
    if len(base) != 40 or not set(base) <= _HEX40 or [str(p) for p in commit.parent_ids] != [base]:
        raise _unreadable()
    if record["session"] != session_id:
        raise _unreadable()
    agent, token_id = _text(record["agent"]), _text(record["token_id"])
    if record["lane"] != f"agent/{agent}":
        raise _unreadable()
    deleted, conflicts = record["deleted"], record["conflicts"]
    if not isinstance(deleted, list) or not isinstance(conflicts, list):
        raise _unreadable()
    if len(deleted) + len(conflicts) > LIMITS.saved_session_entries:
        raise _unreadable()
    read_conflicts = []
    for item in conflicts:
        if not isinstance(item, dict) or set(item) != {"path", "ours_mode", "theirs_mode"}:
            raise _unreadable()
        read_conflicts.append(
            (_path(item["path"]), _mode(item["ours_mode"]), _mode(item["theirs_mode"]))
        )
    return SavedSession(
        commit=target,
        session=session_id,
        owner=Owner(agent, token_id, _count(record["expires_at"])),
        base=pygit2.Oid(hex=base),
        time=_count(record["time"]),
        deleted=tuple(_path(p) for p in deleted),
        conflicts=tuple(read_conflicts),
    )


def _staged_entries(tree: pygit2.Tree) -> Iterator[tuple[str, pygit2.Object]]:
    """Every non-tree entry under ``tree`` with its path, at most the bound's number."""
    count = 0
    stack: list[tuple[pygit2.Tree, str]] = [(tree, "")]
    while stack:
        folder, prefix = stack.pop()
        for child in folder:
            count += 1
            if count > LIMITS.saved_session_entries:
                raise _unreadable()
            path = prefix + (child.name or "")
            if isinstance(child, pygit2.Tree):
                stack.append((child, path + "/"))
            else:
                yield path, child


def restore_session(handle: Handle, saved: SavedSession) -> StagedChange:
    """The staged change a saved session holds, every sealed blob opened.

    Args:
        handle: The repository (its sealing opens sealed blobs).
        saved: What :func:`peek_session` read.

    Returns:
        The staged change, based on ``saved.base``.

    Raises:
        RepositoryError: ``internal_error`` if the tree is not what
            :func:`save_session` writes; ``seal_invalid`` if a sealed blob does
            not open (its key was retired or removed).
    """
    try:
        commit = handle.repo[saved.commit].peel(pygit2.Commit)
    except (pygit2.GitError, KeyError, ValueError):
        raise _unreadable() from None
    staged = StagedChange(base=saved.base)
    folder = tree_entry(commit.tree, STAGED_FOLDER)
    if folder is not None:
        if not isinstance(folder, pygit2.Tree):
            raise _unreadable()
        for path, entry in sorted(_staged_entries(folder), key=lambda item: item[0]):
            mode = int(entry.filemode)
            if not isinstance(entry, pygit2.Blob) or mode not in _MODES:
                raise _unreadable()
            staged.changes[_path(path)] = handle.sealing.open(path, entry.data)
            if mode != MODE_FILE:
                staged.modes[path] = mode
    for path in saved.deleted:
        if path in staged.changes:
            raise _unreadable()
        staged.changes[path] = None
    for number, (path, ours_mode, theirs_mode) in enumerate(saved.conflicts):
        sides: list[bytes | None] = []
        for side in SIDES:
            found = tree_entry(commit.tree, f"{CONFLICTS_FOLDER}/{number}/{side}")
            if found is None:
                sides.append(None)
            elif isinstance(found, pygit2.Blob):
                sides.append(handle.sealing.open(path, found.data))
            else:
                raise _unreadable()
        if path in staged.conflicts:
            raise _unreadable()
        staged.conflicts[path] = (sides[0], sides[1], sides[2])
        staged.conflict_modes[path] = (ours_mode, theirs_mode)
    return staged


def saved_sessions(handle: Handle) -> dict[str, pygit2.Oid]:
    """Every saved session: ``{session id: commit}`` (names that are no session id left out)."""
    prefix = SESSION_FOLDER + "/"
    return {
        name[len(prefix):]: oid
        for name, oid in list_refs(handle.commondir, SESSION_FOLDER).items()
        if is_session_id(name[len(prefix):])
    }
