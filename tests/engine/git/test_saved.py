"""Saved sessions (``refs/chit/sessions/<session>``): the format, sealing, compare and swap.

Real git throughout: pygit2 for the objects, the git CLI to pack references as
an operator's ``git gc`` would. The engine-level behaviour (resuming, identity,
sweeping) is in tests/engine/service/test_saved_sessions.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from engine.auth import cbor
from engine.auth.sealing import MAGIC, Sealing, is_sealed
from engine.auth.sealkeys import SealingKeyring
from engine.errors import RepositoryError
from engine.git import MODE_EXECUTABLE, MODE_SYMLINK, Owner, Repository, SaveCache, StagedChange
from engine.git import saved as saved_module
from engine.git.reffiles import list_refs, read_ref
from tests.conftest import World
from tests.engine.git.repo_helpers import T0

GIT = shutil.which("git")
OWNER = Owner("alice", "7c41d0" + "0" * 26, T0 + 3600)
SECRET = b'api_token = "s3cret-7f2e"\n'


def _repo(world: World, protected: str = "") -> Repository:
    keys = SealingKeyring(world.home)
    return Repository(world.repo, sealing=Sealing(keys, lambda p: p.startswith(protected)
                                                  if protected else False))


def _staged(vcs: Repository) -> StagedChange:
    staged = StagedChange()
    vcs.stage_write("alice", staged, "src/new.py", b"NEW = 1\n")
    vcs.stage_write("alice", staged, "src/app.py", b"def main():\n    return 2\n")
    vcs.stage_delete("alice", staged, "README.md")
    staged.modes["src/new.py"] = MODE_EXECUTABLE
    return staged


def _git(world: World, *args: str) -> str:
    assert GIT is not None
    return subprocess.run(
        [GIT, "-C", str(world.repo), *args], capture_output=True, check=True, text=True,
        timeout=60, env={"PATH": os.environ.get("PATH", ""), "HOME": str(world.repo),
                         "GIT_CONFIG_NOSYSTEM": "1"},
    ).stdout


def test_a_saved_change_reads_back_as_it_was(world: World) -> None:
    vcs = _repo(world)
    staged = _staged(vcs)
    staged.changes["src/link"] = b"app.py"
    staged.modes["src/link"] = MODE_SYMLINK
    staged.conflicts["docs/guide.md"] = (b"base\n", b"ours\n", None)
    staged.conflict_modes["docs/guide.md"] = (0o100644, None)
    commit = vcs.save_session("s-1", OWNER, staged, expected=None, now=T0, cache=SaveCache())
    assert commit is not None and vcs.saved_session_commit("s-1") == commit

    record = vcs.saved_session("s-1")
    assert record is not None
    assert record.owner == OWNER and record.session == "s-1" and record.time == T0
    assert record.base == staged.base and record.deleted == ("README.md",)
    assert record.conflicts == (("docs/guide.md", 0o100644, None),)
    back = vcs.restore_session(record)
    assert back.base == staged.base
    assert back.changes == staged.changes and back.modes == staged.modes
    assert back.conflicts == staged.conflicts and back.conflict_modes == staged.conflict_modes

    # The commit is what docs/engine-api.md shows: parent = base, record + staged/ + conflicts/.
    raw = pygit2.Repository(str(world.repo))
    made = raw[commit].peel(pygit2.Commit)
    assert [str(p) for p in made.parent_ids] == [str(staged.base)]
    assert made.message == "chit: session s-1\n"
    names = sorted(_flat(made.tree))
    assert names == ["conflicts/0/base", "conflicts/0/ours", "session", "staged/src/app.py",
                     "staged/src/link", "staged/src/new.py"]
    assert made.tree["staged/src/new.py"].filemode == MODE_EXECUTABLE
    doc = cbor.decode(made.tree["session"].data)
    assert doc == {
        "v": "chit-session/1", "session": "s-1", "agent": "alice", "token_id": OWNER.token_id,
        "lane": "agent/alice", "base": str(staged.base), "expires_at": OWNER.expires_at,
        "time": T0, "deleted": ["README.md"],
        "conflicts": [{"path": "docs/guide.md", "ours_mode": 0o100644, "theirs_mode": None}],
    }


def _flat(tree: pygit2.Tree, prefix: str = "") -> list[str]:
    out = []
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            out += _flat(entry, f"{prefix}{entry.name}/")
        else:
            out.append(f"{prefix}{entry.name}")
    return out


def test_protected_content_is_sealed_in_the_saved_objects(world: World) -> None:
    """Threat: a saved session leaves a protected file's plaintext in git's object store."""
    vcs = _repo(world, protected="config/")
    staged = StagedChange()
    vcs.stage_write("alice", staged, "config/secrets.toml", SECRET)
    vcs.stage_write("alice", staged, "src/plain.py", MAGIC + b" looks sealed\n")
    staged.conflicts["config/other.toml"] = (None, SECRET, b"theirs " + SECRET)
    cache = SaveCache()
    commit = vcs.save_session("s", OWNER, staged, expected=None, now=T0, cache=cache)
    assert commit is not None
    raw = pygit2.Repository(str(world.repo))
    tree = raw[commit].peel(pygit2.Tree)
    for path in ("staged/config/secrets.toml", "conflicts/0/ours", "conflicts/0/theirs",
                 "staged/src/plain.py"):
        assert is_sealed(tree[path].data), path
    assert not any(b"s3cret-7f2e" in raw[oid].read_raw() for oid in raw.odb)
    record = vcs.saved_session("s")
    assert record is not None
    back = vcs.restore_session(record)
    assert back.changes["config/secrets.toml"] == SECRET
    assert back.changes["src/plain.py"] == MAGIC + b" looks sealed\n"
    assert back.conflicts["config/other.toml"] == (None, SECRET, b"theirs " + SECRET)

    # Saving again with the same content seals nothing anew (no new blob, same tree).
    again = vcs.save_session("s", OWNER, staged, expected=commit, now=T0, cache=cache)
    assert again is not None and raw[again].peel(pygit2.Tree).id == tree.id

    # Without the sealing key (an auditor's repository) a sealed staged file does not open.
    keyless = Repository(world.repo)
    with pytest.raises(RepositoryError) as info:
        keyless.restore_session(record)
    assert info.value.code == "seal_invalid"


def test_the_reference_moves_only_by_compare_and_swap(world: World) -> None:
    """Threat: a stale engine overwrites a session another engine saved since."""
    vcs = _repo(world)
    staged = _staged(vcs)
    first = vcs.save_session("s", OWNER, staged, expected=None, now=T0, cache=SaveCache())
    assert first is not None
    with pytest.raises(RepositoryError) as info:
        vcs.save_session("s", OWNER, staged, expected=None, now=T0 + 1, cache=SaveCache())
    assert info.value.code == "conflict"
    vcs.stage_write("alice", staged, "src/more.py", b"x\n")
    second = vcs.save_session("s", OWNER, staged, expected=first, now=T0 + 1, cache=SaveCache())
    assert second is not None and second != first
    with pytest.raises(RepositoryError):
        vcs.drop_saved_session("s", first)
    assert vcs.saved_session_commit("s") == second
    # Nothing staged: the save removes the reference.
    gone = vcs.save_session("s", OWNER, StagedChange(), expected=second, now=T0,
                            cache=SaveCache())
    assert gone is None
    assert vcs.saved_session_commit("s") is None and vcs.saved_session("s") is None
    assert "refs/chit/sessions/s" not in world.refs()


def test_packed_session_refs_are_read_and_moved(world: World) -> None:
    """An operator's ``git pack-refs --all`` (or ``git gc``) moves refs into packed-refs."""
    vcs = _repo(world)
    one = vcs.save_session("one", OWNER, _staged(vcs), expected=None, now=T0, cache=SaveCache())
    two = vcs.save_session("two", OWNER, _staged(vcs), expected=None, now=T0, cache=SaveCache())
    _git(world, "pack-refs", "--all")
    assert not (Path(world.repo) / ".git" / "refs" / "chit" / "sessions" / "one").exists()
    assert vcs.saved_session_commit("one") == one
    assert vcs.saved_sessions() == {"one": one, "two": two}
    assert one is not None
    vcs.drop_saved_session("one", one)
    assert vcs.saved_sessions() == {"two": two}
    assert "refs/chit/sessions/one" not in _git(world, "for-each-ref")
    # git itself reads what chit wrote.
    assert _git(world, "rev-parse", "refs/chit/sessions/two").strip() == str(two)


@pytest.mark.parametrize("bad", ["", "..", "a..b", "../x", "a/b", "x.lock", "x.", ".x",
                                 "a\0b", "a:b", "a b", "a\nb", "x" * 129, "é"])
def test_hostile_session_ids_never_reach_a_reference(world: World, bad: str) -> None:
    """Threat: a session id that escapes refs/chit/sessions/ or names a lock file."""
    vcs = _repo(world)
    before = world.refs()
    with pytest.raises(ValueError):
        vcs.saved_session(bad)
    with pytest.raises(ValueError):
        vcs.save_session(bad, OWNER, _staged(vcs), expected=None, now=T0, cache=SaveCache())
    assert world.refs() == before
    assert not (Path(world.repo) / ".git" / "refs" / "chit" / "sessions").exists()


def test_a_record_that_is_not_chits_is_unreadable(world: World) -> None:
    """Threat: a hand-made or corrupt reference read as someone's session."""
    vcs = _repo(world)
    raw = pygit2.Repository(str(world.repo))
    base = raw.references["refs/heads/main"].target
    sig = pygit2.Signature("x", "x@example.org", T0, 0)

    def plant(session: str, record: object, parents: list[pygit2.Oid]) -> None:
        index = pygit2.Index()
        blob = raw.create_blob(cbor.encode(record) if not isinstance(record, bytes) else record)
        index.add(pygit2.IndexEntry("session", blob, pygit2.enums.FileMode.BLOB))
        commit = raw.create_commit(None, sig, sig, "x\n", index.write_tree(raw), parents)
        raw.references.create(f"refs/chit/sessions/{session}", commit)

    good = {"v": "chit-session/1", "session": "a", "agent": "alice", "token_id": "t",
            "lane": "agent/alice", "base": str(base), "expires_at": 1, "time": 1,
            "deleted": [], "conflicts": []}
    plant("a", good, [base])
    assert vcs.saved_session("a") is not None
    plant("b", dict(good, session="a"), [base])  # names another session
    plant("c", dict(good, session="c", v="chit-session/2"), [base])
    plant("d", dict(good, session="d"), [])  # parent is not the base
    plant("e", b"\xff not cbor", [base])
    plant("f", dict(good, session="f", deleted=["../etc/passwd"]), [base])
    plant("g", dict(good, session="g", extra=1), [base])
    for name in "bcdefg":
        with pytest.raises(RepositoryError) as info:
            vcs.saved_session(name)
        assert info.value.code == "internal_error", name
    assert set(list_refs(str(Path(world.repo) / ".git"), "refs/chit/sessions")) == {
        f"refs/chit/sessions/{n}" for n in "abcdefg"}
    assert read_ref(str(Path(world.repo) / ".git"), "refs/chit/sessions/zz") is None
    assert saved_module.session_ref("a") == "refs/chit/sessions/a"


def test_a_save_writes_only_what_changed_and_the_same_tree_as_a_fresh_one(world: World) -> None:
    """Each save reuses the blobs and folders of the last; the result is what a fresh save makes."""
    vcs = _repo(world, protected="config/")
    raw = pygit2.Repository(str(world.repo))
    staged, cache = StagedChange(), SaveCache()
    commit = None
    for n in range(12):
        folder = ("src/deep/er", "config", "docs")[n % 3]
        vcs.stage_write("alice", staged, f"{folder}/f{n}.txt", f"{n}\n".encode())
        if n == 6:
            vcs.stage_delete("alice", staged, "src/app.py")
        if n == 9:  # undo an earlier write: its blob leaves the cache
            vcs.stage_write("alice", staged, "src/deep/er/f0.txt", b"0 again\n")
        before = set(raw.odb)
        commit = vcs.save_session("s", OWNER, staged, expected=commit, now=T0 + n, cache=cache)
        assert commit is not None
        written = set(raw.odb) - before
        # A record and a commit, the root and staged/, and for each changed file
        # its blob and at most three folders on its path: never the untouched ones.
        changed = 2 if n == 9 else 1
        assert len(written) <= 2 + 2 + changed * (1 + 3), n
        fresh = vcs.save_session(f"fresh{n}", OWNER, staged, expected=None, now=T0 + n,
                                 cache=SaveCache())
        assert fresh is not None
        mine, theirs = raw[commit].peel(pygit2.Tree), raw[fresh].peel(pygit2.Tree)
        for folder in ("src", "docs"):  # config/ is sealed: each fresh save has new nonces
            if folder in mine["staged"]:
                assert mine["staged"][folder].id == theirs["staged"][folder].id, (n, folder)
        assert sorted(_flat(mine)) == sorted(_flat(theirs)), n
    record = vcs.saved_session("s")
    assert record is not None
    back = vcs.restore_session(record)
    assert back.changes == staged.changes and back.modes == staged.modes
    assert ("staged", "src/deep/er/f3.txt", False) in cache.blobs
    assert all(key[1] in staged.changes for key in cache.blobs)
