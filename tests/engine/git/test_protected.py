"""Protected content sealed at rest (docs/sealing.md): the engine, git and the read tools.

Threat: anyone with the repository (a clone, a backup, a CI cache, ``git show``)
reads protected files; an agent without access reads them through chit's read
tools. Real keys, real git (libgit2 and the git CLI) and the engine's own
interface; the format itself is tested in test_sealing_format.py.

The semantic tools (``search_symbols``, ``symbol_context``, ``project_context``,
...) index the same opened view and prune by the same check: the last tests
below show a protected file's symbols to a token allowed to read it and nothing
of them to one that is not.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pygit2
import pytest

from engine.auth import sealkeys
from engine.auth.sealing import MAGIC, Sealing, is_sealed, sealed_key_id
from engine.errors import RepositoryError
from engine.git import MODE_SYMLINK, Repository, StagedChange, lane_ref
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import Caller, ok
from tests.engine.engine_calls import error as err

GIT = shutil.which("git")

SECRET = b'api_token = "s3cret-7f2e"\nregion = "eu-west-1"\n'
MARKERS = (b"s3cret-7f2e", b"eu-west-1")
PROTECTED_POLICY = (
    "version = 1\n"
    "[paths]\n"
    'forbidden = ["**/.env"]\n'
    'protected = ["src/secret/**", "src/vault.txt", "src/hidden/**"]\n'
)


# -- the engine: sealed in git, plaintext through chit to those allowed ------------


call = Caller(session="s", per_token=16).call  # one session per token


def leaks(answer: object) -> bool:
    """Whether any marker of the secret appears anywhere in an answer (any encoding)."""
    text = json.dumps(answer)
    found = [m.decode() in text for m in MARKERS]
    found += [base64.b64encode(SECRET).decode()[:16] in text]
    return any(found)


def git(world: World, *args: str) -> bytes:
    assert GIT is not None
    return subprocess.run(
        [GIT, "-C", str(world.repo), *args], capture_output=True, check=True, timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(world.repo),
             "GIT_CONFIG_NOSYSTEM": "1"},
    ).stdout


def all_objects(world: World) -> list[bytes]:
    """Every object's content in the repository's object database, reachable or not."""
    repo = pygit2.Repository(str(world.repo))
    return [repo[oid].read_raw() for oid in repo.odb]


@pytest.fixture
def protected(world: World) -> Engine:
    (world.home / "policy.toml").write_text(PROTECTED_POLICY)
    return Engine(world.home, world.repo)


def _commit_secret(engine: Engine, world: World, path: str = "src/secret/api.toml") -> str:
    alice = world.mint(agent="alice")
    ok(call(engine, alice, "write_file", {"path": path, "content": SECRET.decode()}))
    return str(ok(call(engine, alice, "commit", {"message": "add the api token"}))["commit"])


def test_ciphertext_is_what_git_holds(protected: Engine, world: World) -> None:
    """Threat: plain git (show, log -p, cat-file, the object store) reveals a protected file."""
    commit = _commit_secret(protected, world)
    repo = pygit2.Repository(str(world.repo))
    blob = repo[commit].peel(pygit2.Tree)["src/secret/api.toml"].data
    assert is_sealed(blob) and not any(m in blob for m in MARKERS)
    assert sealed_key_id(blob) == sealkeys.SealingKeyring(world.home).active().key_id
    shown = git(world, "show", "agent/alice:src/secret/api.toml")
    assert shown == blob and not any(m in shown for m in MARKERS)
    patch = git(world, "log", "-p", "agent/alice")
    assert b"src/secret/api.toml" in patch and b"Binary files" in patch
    assert not any(m in patch for m in MARKERS)
    assert not any(m in git(world, "show", commit) for m in MARKERS)
    # Nothing in the object store holds the plaintext, reachable or not.
    assert not any(m in raw for raw in all_objects(world) for m in MARKERS)
    # The provenance record names the sealed blob, as the commit's tree does.
    audit = subprocess.run([*world.cli(), "audit", "verify", "--repo", str(world.repo)],
                           capture_output=True, text=True, timeout=60)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_reads_through_chit_return_plaintext_to_an_allowed_token(
    protected: Engine, world: World
) -> None:
    commit = _commit_secret(protected, world)
    reader = world.mint(agent="auditor-bot", ops="read", paths="src/**")
    for args in ({"path": "src/secret/api.toml", "ref": commit},
                 {"path": "src/secret/api.toml", "ref": "agent/alice"}):
        got = ok(call(protected, reader, "read_file", args, session="r"))
        assert got["content"] == SECRET.decode() and got["size"] == len(SECRET), args
    # The writer's own view (its lane) reads the same plaintext.
    alice = world.mint(agent="alice", ops="read")
    assert ok(call(protected, alice, "read_file", {"path": "src/secret/api.toml"}))["content"] == (
        SECRET.decode()
    )
    # A diff shows the plaintext patch, never ciphertext or "binary". The reader's view
    # is main (it has no lane), so alice's commit is the old side.
    diff = ok(call(protected, reader, "diff", {"ref": commit}, session="r"))
    [entry] = [f for f in diff["files"] if f["path"] == "src/secret/api.toml"]
    assert entry["change"] == "deleted" and not entry["binary"]
    assert '-api_token = "s3cret-7f2e"\n-region' in entry["patch"]
    log = ok(call(protected, reader, "log", {"ref": "agent/alice"}, session="r"))
    assert log["commits"][0]["paths"] == ["src/secret/api.toml"]


def test_no_plaintext_reaches_a_token_without_access(protected: Engine, world: World) -> None:
    """Threat: an agent without the path in scope, or refused by policy, reads a protected
    file through read_file, diff, log, status or list_conflicts."""
    commit = _commit_secret(protected, world)
    alice = world.mint(agent="alice")
    ok(call(protected, alice, "write_file", {"path": "src/app.py", "content": "x = 1\n"}))
    ok(call(protected, alice, "commit", {"message": "touch app"}))
    outsider = world.mint(agent="alice", ops="read", paths="src/app.py,src/api/**")
    answers = [
        call(protected, outsider, "read_file", {"path": "src/secret/api.toml"}, session="o"),
        call(protected, outsider, "read_file",
             {"path": "src/secret/api.toml", "ref": commit}, session="o"),
        call(protected, outsider, "diff", {"ref": "main"}, session="o"),
        call(protected, outsider, "log", {}, session="o"),
        call(protected, outsider, "status", {}, session="o"),
        call(protected, outsider, "list_conflicts", {}, session="o"),
    ]
    assert err(answers[0]) == "path_outside_scope" and err(answers[1]) == "path_outside_scope"
    diff = ok(answers[2])
    assert [f["path"] for f in diff["files"]] == ["src/app.py"] and diff["pruned"] == 1
    log = ok(answers[3])
    assert all("src/secret/api.toml" not in c["paths"] for c in log["commits"])
    assert log["pruned"] == 1  # the commit that only added the secret
    assert not any(leaks(a) for a in answers)
    assert all("api.toml" not in json.dumps(a) for a in answers[2:])


def test_policy_refusal_beats_scope_for_protected_content(world: World) -> None:
    """Threat: a protected path the policy also refuses is read by a token whose scope holds it."""
    (world.home / "policy.toml").write_text(
        'version = 1\n[paths]\nforbidden = ["src/secret/**"]\nprotected = ["src/secret/**"]\n'
    )
    engine = Engine(world.home, world.repo)
    alice = world.mint(agent="alice")
    refused = call(engine, alice, "write_file", {"path": "src/secret/a", "content": "x"})
    assert err(refused) == "path_forbidden"
    assert refused["error"]["rule"] == "paths.forbidden"


def test_staged_protected_content_is_plaintext_in_diff_and_status(
    protected: Engine, world: World
) -> None:
    alice = world.mint(agent="alice")
    ok(call(protected, alice, "write_file", {"path": "src/vault.txt", "content": "v1\n"}))
    diff = ok(call(protected, alice, "diff"))
    assert diff["files"][0]["patch"].endswith("+v1\n") and not diff["files"][0]["binary"]
    ok(call(protected, alice, "commit", {"message": "vault"}))
    # Writing back the same plaintext is no change, though the blob id differs from
    # a fresh seal of it: staged comparisons use plaintext.
    same = ok(call(protected, alice, "write_file", {"path": "src/vault.txt", "content": "v1\n"}))
    assert same["change"] == "unstaged" and ok(call(protected, alice, "status"))["staged"] == []
    ok(call(protected, alice, "write_file", {"path": "src/vault.txt", "content": "v2\n"}))
    patch = ok(call(protected, alice, "diff"))["files"][0]["patch"]
    assert "-v1\n+v2\n" in patch


def test_moves_reseal_under_the_new_path(protected: Engine, world: World) -> None:
    """A sealed blob is bound to its path: a move through chit opens and seals again."""
    _commit_secret(protected, world)
    alice = world.mint(agent="alice")
    ok(call(protected, alice, "move_file",
            {"source": "src/secret/api.toml", "destination": "src/hidden/api.toml"}))
    commit = ok(call(protected, alice, "commit", {"message": "move"}))["commit"]
    tree = pygit2.Repository(str(world.repo))[commit].peel(pygit2.Tree)
    blob = tree["src/hidden/api.toml"].data
    assert is_sealed(blob) and not any(m in blob for m in MARKERS)
    got = ok(call(protected, alice, "read_file", {"path": "src/hidden/api.toml"}))
    assert got["content"] == SECRET.decode()


def _plain_git_commit(world: World, ref: str, change: dict[str, bytes]) -> str:
    """A commit made outside chit (plain libgit2), as a person with the repository would."""
    repo = pygit2.Repository(str(world.repo))
    parent = repo.references[ref].peel(pygit2.Commit)
    index = pygit2.Index()
    index.read_tree(parent.tree)
    for path, data in change.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    sig = pygit2.Signature("someone", "someone@example.invalid", 1_700_000_100, 0)
    oid = repo.create_commit(ref, sig, sig, "outside chit\n", tree, [parent.id])
    return str(oid)


def test_a_sealed_blob_moved_or_altered_outside_chit_is_an_error(
    protected: Engine, world: World
) -> None:
    """Threat: ciphertext returned as content, or a sealed blob opened at another path."""
    commit = _commit_secret(protected, world)
    repo = pygit2.Repository(str(world.repo))
    sealed = repo[commit].peel(pygit2.Tree)["src/secret/api.toml"].data
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    _plain_git_commit(world, lane_ref("alice"), {
        "src/secret/copy.toml": sealed,  # moved by plain git: the path is in the AAD
        "src/vault.txt": tampered,
        "src/unprotected.txt": sealed,  # at a path that is not protected at all
    })
    alice = world.mint(agent="alice")
    for path in ("src/secret/copy.toml", "src/vault.txt", "src/unprotected.txt"):
        answer = call(protected, alice, "read_file", {"path": path})
        assert err(answer) == "seal_invalid", path
        assert "chit-seal" not in json.dumps(answer) and not leaks(answer)
    diff = call(protected, alice, "diff", {"ref": "main"})
    assert err(diff) == "seal_invalid" and diff["error"]["path"] == "src/secret/copy.toml"
    # A filter around the broken file still works, and the good file still reads.
    assert ok(call(protected, alice, "diff", {"ref": "main", "path": "src/app.py"}))
    assert ok(call(protected, alice, "read_file", {"path": "src/secret/api.toml"}))
    # Overwriting a broken seal is allowed (and seals afresh).
    ok(call(protected, alice, "write_file", {"path": "src/vault.txt", "content": "fixed\n"}))
    ok(call(protected, alice, "commit", {"message": "replace the broken vault"}))
    fixed = ok(call(protected, alice, "read_file", {"path": "src/vault.txt"}))
    assert fixed["content"] == "fixed\n"


def test_plaintext_committed_before_protection_reads_as_is(world: World) -> None:
    """A protected path holding an unsealed blob (plain git, before the policy said so)
    is already plaintext in git: it reads as it is, and chit seals its next version."""
    _plain_git_commit(world, "refs/heads/main", {"src/secret/legacy.txt": b"old plaintext\n"})
    (world.home / "policy.toml").write_text(PROTECTED_POLICY)
    engine = Engine(world.home, world.repo)
    alice = world.mint(agent="alice")
    got = ok(call(engine, alice, "read_file", {"path": "src/secret/legacy.txt"}))
    assert got["content"] == "old plaintext\n"
    ok(call(engine, alice, "write_file", {"path": "src/secret/legacy.txt", "content": "new\n"}))
    commit = ok(call(engine, alice, "commit", {"message": "seal it"}))["commit"]
    blob = pygit2.Repository(str(world.repo))[commit].peel(pygit2.Tree)["src/secret/legacy.txt"]
    assert is_sealed(blob.data) and b"new" not in blob.data
    patch = ok(call(engine, alice, "diff", {"ref": "main"}))["files"][0]["patch"]
    assert "-old plaintext\n+new\n" in patch


def test_sealing_keys_rotate_and_old_keys_keep_opening(protected: Engine, world: World) -> None:
    first_commit = _commit_secret(protected, world)
    old = sealkeys.SealingKeyring(world.home).active().key_id
    out = subprocess.run([*world.cli(), "keys", "rotate", "--sealing", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    new = json.loads(out.stdout)
    assert new["kind"] == "sealing" and new["kid"] != old and "secret" not in out.stdout
    listed = json.loads(subprocess.run([*world.cli(), "keys", "list", "--json"],
                                       capture_output=True, text=True, timeout=60).stdout)
    assert [(k["kid"], k["signing"]) for k in listed if k["kind"] == "sealing"] == [
        (new["kid"], True), (old, False)]
    alice = world.mint(agent="alice")
    # The running engine sees the new key on its next commit; the old blob still opens.
    ok(call(protected, alice, "write_file", {"path": "src/vault.txt", "content": "v\n"}))
    commit = ok(call(protected, alice, "commit", {"message": "vault"}))["commit"]
    tree = pygit2.Repository(str(world.repo))[commit].peel(pygit2.Tree)
    assert sealed_key_id(tree["src/vault.txt"].data) == new["kid"]
    assert sealed_key_id(tree["src/secret/api.toml"].data) == old
    for args in ({"path": "src/secret/api.toml", "ref": first_commit}, {"path": "src/vault.txt"}):
        assert ok(call(protected, alice, "read_file", args))["size"] > 0
    # A key the engine no longer holds opens nothing: seal_invalid, never ciphertext.
    (world.home / "keys" / "sealing" / f"{old}.json").unlink()
    gone = call(protected, alice, "read_file", {"path": "src/secret/api.toml"})
    assert err(gone) == "seal_invalid"


def test_three_way_merges_merge_plaintexts(protected: Engine, world: World) -> None:
    """Two sessions of one agent edit one protected file: the merge works on plaintext,
    the result is sealed, and no plaintext blob is left in git's objects."""
    alice = world.mint(agent="alice")
    base = "one\ntwo\nthree\nfour\nfive\n"
    ok(call(protected, alice, "write_file", {"path": "src/vault.txt", "content": base}))
    ok(call(protected, alice, "commit", {"message": "base"}))
    ok(call(protected, alice, "read_file", {"path": "src/vault.txt"}, session="a"))
    ok(call(protected, alice, "read_file", {"path": "src/vault.txt"}, session="b"))
    ok(call(protected, alice, "write_file",
            {"path": "src/vault.txt", "content": base.replace("one", "ONE-s3cret-7f2e")},
            session="a"))
    ok(call(protected, alice, "write_file",
            {"path": "src/vault.txt", "content": base.replace("five", "FIVE-eu-west-1")},
            session="b"))
    ok(call(protected, alice, "commit", {"message": "a"}, session="a"))
    ok(call(protected, alice, "commit", {"message": "b"}, session="b"))
    merged = ok(call(protected, alice, "read_file", {"path": "src/vault.txt"}, session="c"))
    assert merged["content"] == "ONE-s3cret-7f2e\ntwo\nthree\nfour\nFIVE-eu-west-1\n"
    assert not any(m in raw for raw in all_objects(world) for m in MARKERS)
    # Both sides change the same line: a conflict shown in plaintext, resolved, sealed.
    ok(call(protected, alice, "read_file", {"path": "src/vault.txt"}, session="d"))
    ok(call(protected, alice, "read_file", {"path": "src/vault.txt"}, session="e"))
    ok(call(protected, alice, "write_file",
            {"path": "src/vault.txt", "content": "d\n"}, session="d"))
    ok(call(protected, alice, "write_file",
            {"path": "src/vault.txt", "content": "e\n"}, session="e"))
    ok(call(protected, alice, "commit", {"message": "d"}, session="d"))
    assert err(call(protected, alice, "commit", {"message": "e"}, session="e")) == "conflict"
    [conflict] = ok(call(protected, alice, "list_conflicts", session="e"))["session"]
    assert (conflict["ours"], conflict["theirs"], conflict["binary"]) == ("e\n", "d\n", False)
    assert conflict["base"].startswith("ONE-")
    ok(call(protected, alice, "resolve_conflict",
            {"path": "src/vault.txt", "resolution": "content", "content": "d+e\n"}, session="e"))
    commit = ok(call(protected, alice, "commit", {"message": "e"}, session="e"))["commit"]
    blob = pygit2.Repository(str(world.repo))[commit].peel(pygit2.Tree)["src/vault.txt"].data
    assert is_sealed(blob) and b"d+e" not in blob


def test_conflicts_with_main_show_plaintext_sides(world: World) -> None:
    """git sees sealed files as binary, so a protected file changed on the lane and on
    main conflicts; list_conflicts shows its sides opened, never as ciphertext."""
    _plain_git_commit(world, "refs/heads/main", {"src/secret/notes.txt": b"base\n"})
    (world.home / "policy.toml").write_text(PROTECTED_POLICY)
    engine = Engine(world.home, world.repo)
    alice = world.mint(agent="alice")
    ok(call(engine, alice, "write_file", {"path": "src/secret/notes.txt", "content": "lane\n"}))
    ok(call(engine, alice, "commit", {"message": "lane edit"}))
    _plain_git_commit(world, "refs/heads/main", {"src/secret/notes.txt": b"main\n"})
    found = ok(call(engine, alice, "list_conflicts"))["with_main"]
    assert [(c["path"], c["base"], c["ours"], c["theirs"]) for c in found] == [
        ("src/secret/notes.txt", "base\n", "lane\n", "main\n")]
    outsider = world.mint(agent="alice", ops="read", paths="src/app.py")
    assert ok(call(engine, outsider, "list_conflicts", session="o"))["with_main"] == []


def test_content_that_looks_sealed_is_sealed_wherever_it_is_written(
    protected: Engine, world: World
) -> None:
    """A file that itself begins with the seal header (at an unprotected path) is sealed
    too, so every blob chit writes that starts with the header is a seal chit made."""
    alice = world.mint(agent="alice")
    tricky = MAGIC + b"\x01\x05abcde" + bytes(40)
    ok(call(protected, alice, "write_file",
            {"path": "src/data/fixture.bin", "content": base64.b64encode(tricky).decode(),
             "encoding": "base64"}))
    commit = ok(call(protected, alice, "commit", {"message": "fixture"}))["commit"]
    blob = pygit2.Repository(str(world.repo))[commit].peel(pygit2.Tree)["src/data/fixture.bin"]
    assert is_sealed(blob.data) and blob.data != tricky
    got = ok(call(protected, alice, "read_file", {"path": "src/data/fixture.bin"}))
    content = got["content"]
    raw = content.encode() if got["encoding"] == "utf-8" else base64.b64decode(content)
    assert raw == tricky


def test_rebase_compares_plaintext_not_sealed_ids(protected: Engine, world: World) -> None:
    """A staged change stays clean when a protected path it touches was re-sealed with
    the same content on the lane (fresh nonce, new blob id)."""
    ring = sealkeys.SealingKeyring(world.home)
    vcs = Repository(world.repo, sealing=Sealing(ring, lambda p: p.startswith("src/secret/")))
    staged = StagedChange()
    vcs.stage_write("carol", staged, "src/secret/a.txt", b"same\n")
    vcs.commit("carol", staged, "a\n", author_name="carol", author_email="c@x", time=1)
    mine = StagedChange()
    vcs.stage_write("carol", mine, "src/secret/a.txt", b"mine\n")
    # Another writer seals the same plaintext again at that path (a new blob id).
    other = StagedChange()
    vcs.stage_write("carol", other, "src/app.py", b"x\n")
    base = vcs.head_for("carol")
    other.changes["src/secret/a.txt"] = b"same\n"
    vcs.commit("carol", other, "b\n", author_name="carol", author_email="c@x", time=2)
    head = vcs.head_for("carol")
    assert head.tree["src/secret/a.txt"].id != base.tree["src/secret/a.txt"].id
    assert vcs.staged_paths_changed_on_lane("carol", mine) == []
    assert vcs.rebase_if_clean("carol", mine) and mine.base == head.id


def test_a_protected_path_cannot_hold_a_symlink(world: World) -> None:
    ring = sealkeys.SealingKeyring(world.home)
    vcs = Repository(world.repo, sealing=Sealing(ring, lambda p: p.startswith("src/secret/")))
    staged = StagedChange()
    vcs.stage_write("carol", staged, "src/secret/link", b"../app.py")
    staged.modes["src/secret/link"] = MODE_SYMLINK
    with pytest.raises(Exception, match="symbolic link") as caught:
        vcs.commit("carol", staged, "link\n", author_name="carol", author_email="c@x", time=1)
    assert getattr(caught.value, "code", None) == "invalid_argument"
    assert "refs/heads/agent/carol" not in pygit2.Repository(str(world.repo)).references


def test_an_auditor_repository_opens_no_seal(protected: Engine, world: World) -> None:
    """A repository opened without keys (the audit CLI's) never returns ciphertext."""
    commit = _commit_secret(protected, world)
    with pytest.raises(RepositoryError, match="seal_invalid"):
        Repository(world.repo).read_at(commit, "src/secret/api.toml")


SECRET_CODE = (
    'def rotate_vault_key(days):\n    """Rotate the s3cret-7f2e key."""\n    return days\n'
)


def _commit_secret_code(engine: Engine, world: World) -> None:
    alice = world.mint(agent="alice")
    path = "src/secret/vault.py"
    ok(call(engine, alice, "write_file", {"path": path, "content": SECRET_CODE}))
    ok(call(engine, alice, "write_file", {"path": "src/use.py",
                                          "content": "rotate_vault_key(3)\n"}))
    ok(call(engine, alice, "commit", {"message": "vault"}))


def test_symbol_tools_show_protected_symbols_only_to_allowed_tokens(
    protected: Engine, world: World
) -> None:
    """Threat: a protected file's names, docstrings or code leak through the symbol index."""
    _commit_secret_code(protected, world)
    # The blob in git is sealed; the engine indexes the plaintext it opens.
    allowed = world.mint(agent="alice", ops="read", paths="src/**")
    found = ok(call(protected, allowed, "search_symbols", {"query": "rotate_vault_key"}))
    assert [(x["symbol"], x["path"]) for x in found["symbols"]] == [
        ("rotate_vault_key", "src/secret/vault.py")
    ]
    context = ok(call(protected, allowed, "symbol_context", {"symbol": "rotate_vault_key"}))
    assert "s3cret-7f2e" in (context["doc"] or "")
    # A token on the same lane without the protected folder sees nothing of it.
    narrow = world.mint(agent="alice", ops="read", paths="src/use.py,src/app.py")
    answers = [
        call(protected, narrow, "search_symbols", {"query": "rotate_vault_key"}),
        call(protected, narrow, "search_symbols", {"query": "rotate"}),
        call(protected, narrow, "symbol_relations", {"symbol": "rotate_vault_key"}),
        call(protected, narrow, "symbol_context", {"symbol": "rotate_vault_key"}),
        call(protected, narrow, "change_impact", {"symbols": ["rotate_vault_key"]}),
        call(protected, narrow, "project_context", {"paths": ["src/use.py"]}),
    ]
    assert not any(leaks(a) or "vault.py" in json.dumps(a) for a in answers)
    # A protected name answers as one defined nowhere: not listed, not counted.
    assert ok(answers[0])["symbols"] == [] and ok(answers[0])["pruned"] == 0
    assert ok(answers[0]) == ok(call(protected, narrow, "search_symbols",
                                     {"query": "rotate_vault_kez"}))
    assert err(answers[2]) == err(answers[3]) == "not_found"

