"""What the semantic tools' ``pruned`` counts may reveal, and what it may not.

Threat: a token limited to part of a repository (by scope, or kept out of a
protected file by a deny rule) recovers the names defined in the files it may
not see, by asking for text it chooses and watching the counts (a prefix query
answered "1 pruned" for ``vault_r`` and "0 pruned" for ``vault_x`` spells a
hidden name one character at a time). Every test here compares the answer for
a hidden name with the answer for a name that exists nowhere: they must be the
same, byte for byte.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine import admin
from engine.admin.seed import create_repository
from engine.limits import LIMITS
from engine.service import Engine
from engine.state.sqlite import SQLiteStore
from tests.engine.engine_calls import EngineCalls

POLICY = """version = 1
[paths]
protected = ["src/open/secret/**"]

[[rules]]
effect = "deny"
agents = ["narrow*"]
paths = ["src/open/secret/**"]
reason = "key handling is for the vault team"
"""

FILES = {
    "src/open/app.py": (
        b"from open.util import helper\n\n\n"
        b"def handle_request(x):\n    return helper(x)\n\n\n"
        b"class Plain:\n    pass\n"
    ),
    "src/open/util.py": b"def helper(x):\n    return x\n",
    # Out of the narrow token's scope.
    "src/vault/keys.py": (
        b"from open.util import helper\n\n\n"
        b"def vault_rotate_master(days):\n    return helper(days)\n\n\n"
        b"class VaultBase:\n    pass\n"
    ),
    # In its scope, but protected and denied to it by policy.
    "src/open/secret/seal.py": (
        b"from open.util import helper\n\n\n"
        b"def seal_unwrap_kek(blob):\n    return helper(blob)\n"
    ),
}


class World(EngineCalls):
    """A home with a policy, a repository of ``files``, an engine, and a narrow token."""

    def __init__(
        self, tmp: Path, files: dict[str, bytes] = FILES, policy: str | None = POLICY
    ) -> None:
        self.home, self.repo = tmp / "home", tmp / "repo"
        tmp.mkdir(parents=True, exist_ok=True)
        admin.init_home(self.home)
        if policy is not None:
            (self.home / "policy.toml").write_text(policy)
        create_repository(self.repo, files)
        self.engine = Engine(self.home, self.repo)
        self.narrow = self.mint("narrow-1", "src/open/**")

    def mint(self, agent: str, paths: str, ops: str = "read,write") -> str:
        info = admin.mint_token(self.home, agent=agent, operations=ops.split(","),
                                paths=paths.split(","), ttl_seconds=900)
        return str(info["token"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("pruning"))


def test_the_hidden_names_exist_for_a_token_that_may_see_them(world: World) -> None:
    """The fixture's hidden names are real: a wide token finds each of them."""
    wide = world.mint("wide", "src/**")
    for name, path in [("vault_rotate_master", "src/vault/keys.py"),
                       ("seal_unwrap_kek", "src/open/secret/seal.py")]:
        found = world.ok(wide, "search_symbols", {"query": name[:7]})["symbols"]
        assert (name, path) in {(s["symbol"], s["path"]) for s in found}


# A hidden name, a prefix of it, a near miss of it; and a name of the same
# shape that exists nowhere.
HIDDEN_AND_ABSENT = [
    ("vault_rotate_master", "vault_rotate_mistle"),
    ("vault_r", "vault_x"),
    ("vaultrotatemaster", "vaultrotatemistle"),  # fuzzy
    ("VaultBase", "VaultBose"),
    ("seal_unwrap_kek", "seal_unwrap_kez"),  # protected, denied by policy
    ("seal_un", "seal_ux"),
]


@pytest.mark.parametrize(("hidden", "absent"), HIDDEN_AND_ABSENT)
def test_search_answers_a_hidden_name_as_one_that_does_not_exist(
    world: World, hidden: str, absent: str
) -> None:
    for limit in (1, 20):
        one = world.ok(world.narrow, "search_symbols", {"query": hidden, "limit": limit})
        other = world.ok(world.narrow, "search_symbols", {"query": absent, "limit": limit})
        assert one == other
        assert one["pruned"] == 0


@pytest.mark.parametrize(("hidden", "absent"), HIDDEN_AND_ABSENT[:1] + HIDDEN_AND_ABSENT[4:5])
def test_symbol_arguments_answer_a_hidden_name_as_one_that_does_not_exist(
    world: World, hidden: str, absent: str
) -> None:
    for tool in ("symbol_context", "symbol_relations"):
        one = world.call(world.narrow, tool, {"symbol": hidden})
        other = world.call(world.narrow, tool, {"symbol": absent})
        assert one["ok"] is False and one["error"]["error"] == "not_found"
        assert one["error"] == other["error"]
    one = world.ok(world.narrow, "change_impact", {"symbols": [hidden]})
    other = world.ok(world.narrow, "change_impact", {"symbols": [absent]})
    assert one == other == {"touched": [], "affected": [], "tests": [], "pruned": 0,
                            "truncated": False}


def test_a_qualified_name_is_not_shadowed_by_a_hidden_one(tmp_path: Path) -> None:
    """A hidden exact qualname must not change which visible definition is used."""
    files = {
        "src/open/api.py": (
            b"class Outer:\n    class Vault:\n        def rotate(self):\n            return 1\n"
        ),
        "src/hidden/vault.py": b"class Vault:\n    def rotate(self):\n        return 2\n",
    }
    w = World(tmp_path, files, policy=None)
    narrow = w.mint("narrow", "src/open/**")
    got = w.ok(narrow, "symbol_context", {"symbol": "Vault.rotate"})
    assert (got["symbol"]["symbol"], got["symbol"]["path"]) == (
        "Outer.Vault.rotate", "src/open/api.py")


def test_callees_and_parents_never_resolve_to_hidden_definitions(world: World) -> None:
    """Threat: the token stages code that calls (or subclasses) guessed names."""
    code = ("from vault.keys import VaultBase\n\n\n"
            "def probe():\n    vault_rotate_master(1)\n    vault_rotate_mistle(1)\n\n\n"
            "class Probe(VaultBase):\n    pass\n\n\n"
            "class Other(VaultBose):\n    pass\n")
    world.ok(world.narrow, "write_file", {"path": "src/open/probe.py", "content": code},
             session="probe")
    callees = world.ok(world.narrow, "symbol_relations",
                       {"symbol": "probe", "kinds": ["callees"]}, session="probe")
    assert callees["pruned"] == 0
    assert {(r["symbol"]["symbol"], r["symbol"]["kind"]) for r in callees["relations"]} == {
        ("vault_rotate_master", "unresolved"), ("vault_rotate_mistle", "unresolved")}
    for cls, base in [("Probe", "VaultBase"), ("Other", "VaultBose")]:
        parents = world.ok(world.narrow, "symbol_relations",
                           {"symbol": cls, "kinds": ["parents"]}, session="probe")
        assert parents["pruned"] == 0
        assert [(r["symbol"]["symbol"], r["symbol"]["kind"], r["symbol"]["path"])
                for r in parents["relations"]] == [(base, "unresolved", "src/open/probe.py")]


def test_uses_of_a_visible_name_in_hidden_files_are_counted_never_named(world: World) -> None:
    """What pruned is for: a visible helper has callers the token cannot see."""
    relations = world.ok(world.narrow, "symbol_relations", {"symbol": "helper"})
    text = str(relations)
    assert "vault" not in text and "seal" not in text and "secret" not in text
    shown = {(r["kind"], r["symbol"]["path"]) for r in relations["relations"]}
    assert ("callers", "src/open/app.py") in shown and ("imports", "src/open/app.py") in shown
    # keys.py and seal.py each import it and call it once: two callers, two imports.
    assert relations["pruned"] == 4
    impact = world.ok(world.narrow, "change_impact", {"symbols": ["helper"]})
    assert [a["symbol"] for a in impact["affected"]] == ["handle_request"]
    assert impact["pruned"] == 2  # one call in each hidden file


def test_folders_count_hidden_files_once_each(world: World) -> None:
    """A hidden file under a named folder counts once, whatever it defines."""
    briefing = world.ok(world.narrow, "project_context", {"paths": ["src/open"]})
    assert {s["path"] for s in briefing["symbols"]} == {"src/open/app.py", "src/open/util.py"}
    assert briefing["pruned"] == 1  # src/open/secret/seal.py
    impact = world.ok(world.narrow, "change_impact", {"paths": ["src/open"]})
    assert impact["pruned"] >= 1
    assert "seal" not in str(impact)


def test_hidden_names_never_crowd_visible_ones_out_of_fuzzy_search(tmp_path: Path) -> None:
    """Fuzzy search compares a bounded number of candidates: hidden names take none of them."""
    hidden = "".join(f"def handle_request{i:03d}():\n    pass\n\n\n" for i in range(300))
    files = {
        "src/open/app.py": b"def handle_requestz():\n    pass\n",
        "src/hidden/many.py": hidden.encode(),
    }
    w = World(tmp_path, files, policy=None)
    narrow = w.mint("narrow", "src/open/**")
    found = w.ok(narrow, "search_symbols", {"query": "hndle_requst"})
    assert [s["symbol"] for s in found["symbols"]] == ["handle_requestz"]
    assert found["pruned"] == 0


def test_peers_are_compared_by_name_only_on_paths_the_caller_may_see(world: World) -> None:
    """Threat: a token defines a guessed name in its own file to learn a peer's hidden one."""
    wide = world.mint("wide-peer", "src/**")
    world.ok(wide, "write_file", {"path": "src/vault/new.py",
                                  "content": "def peer_secret_fn():\n    pass\n"},
             session="peer")
    world.ok(wide, "project_context", {"paths": ["src/vault/new.py"]}, session="peer")
    mine = {"path": "src/open/guess.py", "content": "def peer_secret_fn():\n    pass\n"}
    world.ok(world.narrow, "write_file", mine, session="guess")
    one = world.ok(world.narrow, "project_context", {"paths": ["src/open/guess.py"]},
                   session="guess")
    assert "vault" not in str(one["peers"]) and one["pruned"] == 0
    # The same session of the peer, declaring a folder the caller may name, is shown.
    world.ok(wide, "project_context", {"paths": ["src/open"]}, session="peer")
    two = world.ok(world.narrow, "project_context", {"paths": ["src/open/guess.py"]},
                   session="guess")
    assert {"agent": "wide-peer", "paths": ["src/open"]} in two["peers"]
    assert "vault" not in str(two["peers"]) and two["pruned"] == 0


def test_hidden_modules_never_decide_which_visible_uses_are_shown(tmp_path: Path) -> None:
    """Threat: learning whether a hidden module exists, or what it imports, from relations.

    Two visible files import ``helper`` from hidden-side modules: one that exists
    (and re-exports the visible helper), one that exists nowhere. Judged on
    visible files only, both are imports from outside the caller's tree.
    """
    files = {
        "src/open/util.py": b"def helper(x):\n    return x\n",
        "src/open/a.py": b"from vault.reexport import helper\n\n\ndef a():\n    return helper(1)\n",
        "src/open/b.py": b"from vault.nothere import helper\n\n\ndef b():\n    return helper(1)\n",
        "src/vault/__init__.py": b"",
        "src/vault/reexport.py": b"from open.util import helper\n",
    }
    w = World(tmp_path, files, policy=None)
    narrow = w.mint("narrow", "src/open/**")
    relations = w.ok(narrow, "symbol_relations", {"symbol": "helper", "kinds": ["callers"]})
    shown = {r["symbol"]["symbol"] for r in relations["relations"]}
    assert ("a" in shown) == ("b" in shown)
    # A token that sees everything follows the re-export.
    wide = w.mint("wide", "src/**")
    relations = w.ok(wide, "symbol_relations", {"symbol": "helper", "kinds": ["callers"]})
    assert {r["symbol"]["symbol"] for r in relations["relations"]} == {"a"}


# -- the bounds: files a caller cannot see decide nothing it is told -----------------


def test_a_file_cut_where_the_caller_cannot_see_does_not_say_truncated(tmp_path: Path) -> None:
    """Threat: one hidden file over a bound sets ``truncated`` for every caller.

    A file over 1 MB out of the narrow token's scope, and one over the
    extractor's bound on definitions in its scope but denied to it by a rule: the narrow
    token's answers are those of the same repository without them, byte for
    byte; a token that may see them is told its results were cut.
    """
    files = dict(FILES)
    files["src/vault/big.py"] = b"x = 1\n" * 200_000
    files["src/open/secret/many.py"] = b"".join(b"def d%d(): pass\n" % i for i in range(10_001))
    plain = World(tmp_path / "plain")
    other = World(tmp_path / "cut", files)
    asks: list[tuple[str, dict[str, Any]]] = [
        ("search_symbols", {"query": "helper"}),
        ("change_impact", {"symbols": ["helper"]}),
        ("project_context", {"paths": ["src/open/util.py"]}),
    ]
    for tool, args in asks:
        seen = other.ok(other.narrow, tool, args, session="cut")
        assert seen["truncated"] is False, tool
        assert seen == plain.ok(plain.narrow, tool, args, session="cut"), tool
    wide = other.mint("wide", "src/**")
    assert other.ok(wide, "search_symbols", {"query": "helper"})["truncated"] is True
    vault = other.mint("vault", "src/vault/**")
    assert other.ok(vault, "search_symbols", {"query": "x"})["truncated"] is True
    # The deny rule alone hides the cut file from a token whose scope has it.
    narrow_two = other.mint("narrow-2", "src/open/**")
    assert other.ok(narrow_two, "search_symbols", {"query": "helper"})["truncated"] is False


def _many(count: int) -> dict[str, bytes]:
    files = {f"a/m{i:03d}.py": f"def f{i}():\n    pass\n".encode() for i in range(count)}
    files["z/target.py"] = b"def zeta_visible_function():\n    pass\n"
    files["z/use.py"] = (
        b"from target import zeta_visible_function\n\n\n"
        b"def caller():\n    return zeta_visible_function()\n"
    )
    return files


def test_files_a_caller_cannot_see_do_not_decide_which_of_its_files_are_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat (a wrong answer): the file bound, taken over the whole tree in path order.

    With more files in a known language than the bound, those the caller's
    scope matches are indexed first: a token scoped to ``z/**`` finds its own
    function although ``a/`` alone fills the bound, and is not told its
    results were cut; a token whose own files exceed the bound is.
    """
    from engine.semantic import indexer as index

    monkeypatch.setattr(index, "LIMITS", replace(LIMITS, indexed_files=20))
    files = _many(25)
    files["a/caller.py"] = (
        b"from target import zeta_visible_function\n\n\n"
        b"def hidden_caller():\n    return zeta_visible_function()\n"
    )
    world = World(tmp_path, files, policy="version = 1\n")
    z = world.mint("zed", "z/**", "read,write")
    found = world.ok(z, "search_symbols", {"query": "zeta_visible_function"})
    assert found == {"symbols": [{"symbol": "zeta_visible_function", "kind": "function",
                                  "path": "z/target.py", "line": 1}],
                     "pruned": 0, "truncated": False}
    context = world.ok(z, "symbol_context", {"symbol": "zeta_visible_function"})
    assert context["symbol"]["path"] == "z/target.py"
    relations = world.ok(z, "symbol_relations",
                         {"symbol": "zeta_visible_function", "kinds": ["callers"]})
    assert [(r["kind"], r["symbol"]["symbol"]) for r in relations["relations"]] == [
        ("callers", "caller")]
    # main (indexed for the same scope) holds the definition: its hidden caller is counted.
    assert relations["pruned"] == 1 and "hidden_caller" not in str(relations)
    briefing = world.ok(z, "project_context", {"paths": ["z"]})
    assert {s["symbol"] for s in briefing["symbols"]} >= {"zeta_visible_function", "caller"}
    assert briefing["truncated"] is False
    # A staged edit in a view over the bound: indexed for this scope too.
    world.ok(z, "write_file", {"path": "z/new.py", "content": "def brand_new_fn():\n    pass\n"},
             session="edit")
    staged = world.ok(z, "search_symbols", {"query": "brand_new_fn"}, session="edit")
    assert [s["path"] for s in staged["symbols"]] == ["z/new.py"]
    assert staged["truncated"] is False
    assert world.ok(z, "change_impact", {}, session="edit")["truncated"] is False
    # A token whose own files exceed the bound is told so.
    a = world.mint("ay", "a/**", "read")
    assert world.ok(a, "search_symbols", {"query": "f1"})["truncated"] is True
    everything = world.mint("all", "**", "read")
    assert world.ok(everything, "search_symbols", {"query": "f1"})["truncated"] is True


def test_views_differ_by_scope_only_over_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import git as vcs
    from engine.semantic import indexer as index

    monkeypatch.setattr(index, "LIMITS", replace(LIMITS, indexed_files=20))
    create_repository(tmp_path / "small", _many(5))
    create_repository(tmp_path / "large", _many(25))
    small = vcs.Repository(tmp_path / "small")
    indexer = index.Indexer()
    z, y = (("z/**",),), (("y/**",),)
    assert indexer.view(small, "a", None, z) is indexer.view(small, "a", None, y)
    assert indexer.view(small, "a", None, z) is indexer.view(small, "a", None)
    large = vcs.Repository(tmp_path / "large")
    for_z = indexer.view(large, "a", None, z)
    for_y = indexer.view(large, "a", None, y)
    assert for_z is not for_y and for_z is indexer.view(large, "a", None, [["z/**"]])
    assert {"z/target.py", "z/use.py"} <= set(for_z.indexed) and len(for_z.indexed) == 20
    assert set(for_y.indexed) == {f"a/m{i:03d}.py" for i in range(20)}
    # Cut paths are those a caller of the view may see: none for these scopes;
    # without a scope, every file beyond the bound.
    assert for_z.cut == for_y.cut == ()
    unscoped = indexer.view(large, "a", None)
    assert unscoped.cut == ("a/m020.py", "a/m021.py", "a/m022.py", "a/m023.py", "a/m024.py",
                            "z/target.py", "z/use.py")
    assert unscoped.truncated_for(lambda path: path.startswith("z/"))
    assert not unscoped.truncated_for(lambda path: path.startswith("b/"))


def test_a_staged_view_within_the_bound_is_never_derived_from_a_cut_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import git as vcs
    from engine.semantic import indexer as index

    monkeypatch.setattr(index, "LIMITS", replace(LIMITS, indexed_files=20))
    create_repository(tmp_path / "repo", _many(19))  # 21 files in a known language
    repo = vcs.Repository(tmp_path / "repo")
    indexer = index.Indexer()
    base = indexer.view(repo, "a", None)
    assert not base.complete and "z/use.py" not in base.indexed
    staged = vcs.StagedChange()
    repo.stage_delete("a", staged, "a/m000.py")
    view = indexer.view(repo, "a", staged, (("z/**",),))
    assert view.complete and "z/use.py" in view.indexed and "a/m000.py" not in view.indexed
    assert len(view.indexed) == 20 and view.cut == ()


def test_rust_impls_in_hidden_files_are_counted_never_named(tmp_path: Path) -> None:
    """Threat: `impl HiddenTrait for VisibleType` in a hidden file spells the trait's name."""
    w = World(tmp_path, {
        "src/api/types.rs": b"pub struct Invoice;\npub trait Render {}\n",
        "src/internal/billing.rs": (
            b"pub trait StripeWebhookRotation {}\n"
            b"impl StripeWebhookRotation for Invoice {}\nimpl Render for Invoice {}\n"
        ),
    })
    spy = w.mint("spy", "src/api/**")
    parents = w.ok(spy, "symbol_relations", {"symbol": "Invoice", "kinds": ["parents"]})
    assert "Stripe" not in str(parents) and "billing" not in str(parents)
    assert parents["relations"] == [] and parents["pruned"] == 2
    children = w.ok(spy, "symbol_relations", {"symbol": "Render", "kinds": ["children"]})
    assert children["relations"] == [] and children["pruned"] == 1
    assert "billing" not in str(children)
    # A type the spy stages itself is not on main: hidden impls of it are not even counted.
    w.ok(spy, "write_file", {"path": "src/api/probe.rs", "content": "pub struct Receipt;\n"},
         session="p")
    probe = w.ok(spy, "symbol_relations", {"symbol": "Receipt", "kinds": ["parents"]},
                 session="p")
    assert probe == {"symbol": "Receipt", "relations": [], "pruned": 0, "truncated": False}


def test_path_arguments_the_policy_refuses_are_refused_not_counted(world: World) -> None:
    """Threat: testing whether an exact hidden path exists through a count."""
    for tool in ("change_impact", "project_context"):
        answers = [world.call(world.narrow, tool, {"paths": [path]})
                   for path in ("src/open/secret/seal.py", "src/open/secret/nothere.py")]
        assert answers[0] == answers[1]
        assert answers[0]["ok"] is False and answers[0]["error"]["error"] == "policy_denied"
        # A folder holding hidden files is named as any folder: counted, never listed.
        folder = world.ok(world.narrow, tool, {"paths": ["src/open/secret"]})
        assert folder["pruned"] == 1 and "seal" not in str(folder)


def test_staged_names_are_not_counted_against_hidden_uses(tmp_path: Path) -> None:
    """Threat: defining many guessed names in one staged file, then one change_impact."""
    w = World(tmp_path, {
        "src/open/util.py": b"def helper():\n    pass\n",
        "src/vault/job.py": (
            b"from open.util import *\n\n\ndef job():\n    rotate_kek_now()\n    helper()\n"
        ),
    })
    spy = w.mint("spy", "src/open/**")
    guesses = "".join(f"def guess_{k}():\n    pass\n\n\n" for k in range(20))
    code = guesses + "def rotate_kek_now():\n    pass\n"
    w.ok(spy, "write_file", {"path": "src/open/guesses.py", "content": code}, session="many")
    impact = w.ok(spy, "change_impact", {}, session="many")
    assert impact["pruned"] == 0 and "rotate_kek_now" in str(impact["touched"])
    relations = w.ok(spy, "symbol_relations", {"symbol": "rotate_kek_now"}, session="many")
    assert relations["pruned"] == 0
    # A definition main holds still has its hidden uses counted.
    relations = w.ok(spy, "symbol_relations", {"symbol": "helper"}, session="many")
    assert relations["relations"] == [] and relations["pruned"] == 2  # its import and call


def test_peers_never_name_a_file_outside_a_pattern_scope(tmp_path: Path) -> None:
    """Threat: a `src/**/*.py` token shown a peer's `src/api/launch_codes.txt`."""
    w = World(tmp_path, {"src/api/app.py": b"def app():\n    pass\n",
                                "src/api/notes.txt": b"notes\n"})
    peer = w.mint("peer", "src/**")
    w.ok(peer, "write_file", {"path": "src/api/launch_codes.txt", "content": "x"}, session="p")
    w.ok(peer, "project_context", {"paths": ["src/api/notes.txt", "src/api"]}, session="p")
    py = w.mint("py", "src/**/*.py")
    answer = w.ok(py, "project_context", {"paths": ["src/api"]}, session="q")
    assert "launch_codes" not in str(answer) and "notes.txt" not in str(answer)
    assert answer["peers"] == [{"agent": "peer", "paths": ["src/api"]}]
    assert answer["pruned"] >= 2


def test_hostile_shapes_of_arguments(world: World) -> None:
    many = world.call(world.narrow, "symbol_relations",
                      {"symbol": "helper", "kinds": ["references"] * 7})
    assert many["error"]["error"] == "invalid_argument"
    once = world.ok(world.narrow, "symbol_relations", {"symbol": "helper", "kinds": ["callers"]})
    twice = world.ok(world.narrow, "symbol_relations",
                     {"symbol": "helper", "kinds": ["callers", "callers"]})
    assert once == twice
    for query in (" ", "\n\t"):
        blank = world.call(world.narrow, "search_symbols", {"query": query})
        assert blank["error"]["error"] == "invalid_argument"
    long = world.call(world.narrow, "change_impact", {"symbols": ["x" * 513]})
    assert long["error"]["error"] == "invalid_argument"
    # A deep made-up path under a real folder: conventions found, nothing else.
    deep = "src/open/" + "/".join(["d"] * 1500) + "/x.py"
    briefing = world.ok(world.narrow, "project_context", {"paths": [deep]}, session="deep")
    assert briefing["symbols"] == [] and briefing["conventions"] == []


def test_an_intent_keeps_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    """Threat: long made-up paths filling the intents every peer's project_context reads."""
    w = World(tmp_path, {"src/open/app.py": b"def app():\n    pass\n"})
    spy = w.mint("spy", "src/open/**")
    long_paths = [f"src/open/{k:03d}/" + "/".join(["segment"] * 100) for k in range(256)]
    w.ok(spy, "project_context", {"paths": long_paths}, session="big")
    stored = SQLiteStore(w.home / "state.db").intents(
        os.path.realpath(w.repo / ".git"), now=int(time.time()))
    assert len(stored) == 1
    kept = stored[0].paths
    assert 0 < len(kept) < 256 and kept == tuple(long_paths[: len(kept)])
    assert sum(len(p.encode()) for p in kept) <= LIMITS.intent_paths_bytes


def test_a_peers_folder_is_named_only_if_it_holds_a_file_the_caller_may_read(
    world: World,
) -> None:
    """Threat: a deny rule on `secret/**` leaves the folder name `secret` itself allowed."""
    wide = world.mint("wide-folder", "src/**")
    world.ok(wide, "project_context", {"paths": ["src/open/secret", "src/open/util.py"]},
             session="fold")
    answer = world.ok(world.narrow, "project_context", {"paths": ["src/open"]},
                      session="fold-narrow")
    named = [p for peer in answer["peers"] for p in peer["paths"]]
    assert "src/open/util.py" in named
    assert not any("secret" in p for p in named)
