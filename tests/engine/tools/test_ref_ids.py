"""``ref`` given as a commit id: only commits the caller's branches reach.

Threat model: chit keeps its own records in the same repository, under
``refs/chit/``: provenance records (which agent changed which paths, under which
token), the catalog store and saved sessions (another agent's staged, not yet
committed work). None of them is a branch an agent may name, but ``read_file``,
``log`` and ``diff`` took any commit id, so an agent holding such an id (from
the call log, a provenance trailer, a guess at a short prefix) read them. An id
outside the base branch and the branches an agent may name must be answered
exactly as an id that does not exist, so the answer tells nothing either.
"""

from __future__ import annotations

from typing import Any

import pygit2
import pytest

from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, ok, refusal

MISSING = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def engine(world: World) -> Engine:
    return Engine(world.home, world.repo)


def _store(world: World) -> dict[str, pygit2.Commit]:
    repo = pygit2.Repository(str(world.repo))
    return {ref.name: ref.peel(pygit2.Commit) for ref in repo.references.iterator()}


def _first_blob(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str = "") -> tuple[str, str]:
    for entry in tree:
        obj = repo.get(entry.id)
        if isinstance(obj, pygit2.Blob):
            return prefix + str(entry.name), str(entry.id)
        if isinstance(obj, pygit2.Tree):
            return _first_blob(repo, obj, prefix + str(entry.name) + "/")
    raise AssertionError("no blob")


@pytest.fixture
def setup(engine: Engine, world: World) -> dict[str, Any]:
    alice = world.mint(agent="alice", paths="**")
    bob = world.mint(agent="bob", paths="**")
    ok(call(engine, bob, "write_file", {"path": "src/bob.py", "content": "BOB = 1\n"},
            session="bob-1"))
    ok(call(engine, bob, "commit", {"message": "bob's work"}, session="bob-1"))
    # Another of bob's sessions: staged, not committed, saved under refs/chit/sessions/.
    ok(call(engine, bob, "write_file", {"path": "src/secret_plan.py", "content": "PLAN\n"},
            session="bob-2"))
    ok(call(engine, alice, "write_file", {"path": "src/alice.py", "content": "A = 1\n"},
            session="alice-1"))
    ok(call(engine, alice, "commit", {"message": "alice's work"}, session="alice-1"))
    refs = _store(world)
    internal = {name: commit for name, commit in refs.items() if name.startswith("refs/chit/")}
    assert any(name.startswith("refs/chit/provenance/") for name in internal)
    assert "refs/chit/catalogs" in internal
    assert any(name.startswith("refs/chit/sessions/") for name in internal)
    return {"alice": alice, "bob": bob, "refs": refs, "internal": internal}


def _reads(engine: Engine, token: str, ref: str, path: str) -> dict[str, dict[str, Any]]:
    """Each tool's answer for ``ref`` (a fresh session each, so none sees another's)."""
    return {
        "read_file": call(engine, token, "read_file", {"path": path, "ref": ref}, session="r1"),
        "log": call(engine, token, "log", {"ref": ref}, session="r2"),
        "diff": call(engine, token, "diff", {"ref": ref}, session="r3"),
    }


def _assert_like_missing(engine: Engine, token: str, ref: str, path: str) -> None:
    missing = _reads(engine, token, MISSING[: len(ref)], path)
    for tool, answer in _reads(engine, token, ref, path).items():
        assert refusal(answer) == refusal(missing[tool]), (tool, ref)
        assert refusal(answer)["error"] == "not_found"


def test_internal_commits_are_refused_like_missing_ones(
    engine: Engine, world: World, setup: dict[str, Any]
) -> None:
    """Threat: reading provenance records, the catalog store or another agent's
    saved session by commit id."""
    repo = pygit2.Repository(str(world.repo))
    for name, commit in setup["internal"].items():
        path, _blob = _first_blob(repo, commit.tree)
        for ref in (str(commit.id), str(commit.id)[:12].upper()):
            # Some internal trees hold paths no agent may name; a path a valid
            # request can carry shows the refusal comes from the ref.
            _assert_like_missing(engine, setup["alice"], ref, "src/secret_plan.py"), name
            if not path.startswith(".git"):
                _assert_like_missing(engine, setup["alice"], ref, path)


def test_the_saved_session_of_another_agent_is_not_readable_by_id(
    engine: Engine, world: World, setup: dict[str, Any]
) -> None:
    """Threat: reading another agent's uncommitted work through its saved session's id."""
    saved = [c for n, c in setup["internal"].items() if n.startswith("refs/chit/sessions/")]
    assert saved
    for commit in saved:
        answer = call(engine, setup["alice"], "read_file",
                      {"path": "src/secret_plan.py", "ref": str(commit.id)}, session="r1")
        assert refusal(answer) == refusal(call(
            engine, setup["alice"], "read_file",
            {"path": "src/secret_plan.py", "ref": MISSING}, session="r1"))


def test_blob_and_tree_ids_of_internal_records_are_refused(
    engine: Engine, world: World, setup: dict[str, Any]
) -> None:
    """Threat: naming a provenance record's blob or tree instead of its commit."""
    repo = pygit2.Repository(str(world.repo))
    provenance = next(c for n, c in setup["internal"].items() if "provenance" in n)
    _path, blob = _first_blob(repo, provenance.tree)
    for ref in (blob, str(provenance.tree.id)):
        _assert_like_missing(engine, setup["alice"], ref, "src/alice.py")


def test_base_and_lane_commits_stay_readable_by_id(
    engine: Engine, world: World, setup: dict[str, Any]
) -> None:
    refs = setup["refs"]
    alice_lane = refs["refs/heads/agent/alice"]
    bob_lane = refs["refs/heads/agent/bob"]
    token = setup["alice"]
    # The base, by full id and by prefix; an ancestor reached through a lane.
    base = ok(call(engine, token, "read_file", {"path": "src/app.py", "ref": world.main_id}))
    assert base["ref"] == world.main_id
    ok(call(engine, token, "read_file", {"path": "src/app.py", "ref": world.main_id[:7]}))
    own = ok(call(engine, token, "read_file", {"path": "src/alice.py",
                                               "ref": str(alice_lane.id)}))
    assert own["content"] == "A = 1\n"
    # Other agents' lanes are branches any caller may name (agent/bob), so by id too.
    theirs = ok(call(engine, token, "read_file", {"path": "src/bob.py",
                                                  "ref": str(bob_lane.id)[:10]}))
    assert theirs["content"] == "BOB = 1\n"
    listed = ok(call(engine, token, "log", {"ref": str(alice_lane.id)}))
    assert listed["commits"][0]["id"] == str(alice_lane.id)
    assert world.main_id in {c["id"] for c in listed["commits"]}
    ok(call(engine, token, "diff", {"ref": str(bob_lane.id)}))
    ok(call(engine, token, "diff", {"ref": world.main_id}))
