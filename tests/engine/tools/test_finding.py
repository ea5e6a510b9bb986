"""list_files, search_text and read_file's line range, on a real repository and engine.

Threat covered throughout: a token limited to part of a repository (by its
scope, or kept out of a protected folder by a deny rule) learns the names or
the content of what it may not read by listing or searching: by the entries
named, by a count it can steer with a glob, a cursor or a query, or by a
pattern that makes the engine backtrack for ever.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pygit2
import pytest

from engine import admin
from engine.admin.seed import create_repository
from engine.auth.sealing import is_sealed
from engine.limits import LIMITS
from engine.service import Engine
from engine.tools import search
from tests.engine.engine_calls import EngineCalls, error, refusal

POLICY = """version = 1
[paths]
protected = ["src/open/secret/**"]

[limits]
file_bytes = 4096

[[rules]]
effect = "deny"
agents = ["narrow*"]
paths = ["src/open/secret/**"]
reason = "key handling is for the vault team"
"""

BIG = "".join(f"line {n} of the big file\n" for n in range(1, 1001)).encode()

FILES = {
    "README.md": b"# needle at the root\n",
    "src/open/app.py": b"import os\n\ndef handle():\n    return 'needle one'\n",
    "src/open/util.py": b"def helper(x):\n    return x  # Needle two\n",
    "src/open/deep/a/b.txt": b"deep\nneedle three\n",
    "src/open/big.txt": BIG,
    "src/open/blob.bin": b"needle\0binary",
    # In the narrow token's scope, but protected and denied to it by policy.
    "src/open/secret/seal.py": b"KEK = 'needle hidden kek'\n",
    # Out of the narrow token's scope.
    "src/vault/keys.py": b"MASTER = 'needle hidden master'\n",
}
HIDDEN = ("secret", "seal", "kek", "vault", "master", "README")


class World(EngineCalls):
    """A home with the policy, a repository of FILES, an engine, a narrow and a wide token."""

    def __init__(self, tmp: Path) -> None:
        self.home, self.repo = tmp / "home", tmp / "repo"
        admin.init_home(self.home)
        (self.home / "policy.toml").write_text(POLICY)
        create_repository(self.repo, FILES)
        self.engine = Engine(self.home, self.repo)
        self.narrow = self.mint("narrow-1", "src/open/**")
        self.wide = self.mint("wide", "**")

    def mint(self, agent: str, paths: str, ops: str = "read,write,commit") -> str:
        info = admin.mint_token(self.home, agent=agent, operations=ops.split(","),
                                paths=paths.split(","), ttl_seconds=900)
        return str(info["token"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("finding"))


def _names_nothing_hidden(answer: Any) -> None:
    text = json.dumps(answer).lower()
    for word in HIDDEN:
        assert word.lower() not in text, word


def _pages(world: World, token: str, tool: str, args: dict[str, Any],
           session: str | None = None) -> list[dict[str, Any]]:
    pages = [world.ok(token, tool, args, session)]
    while pages[-1]["truncated"]:
        assert len(pages) < 100
        pages.append(world.ok(token, tool, {**args, "cursor": pages[-1]["cursor"]}, session))
    return pages


# --- list_files --------------------------------------------------------------------


def test_a_wide_token_lists_every_file(world: World) -> None:
    """The hidden files are real: a token that may read them is shown them."""
    listed = world.ok(world.wide, "list_files", {})
    files = {e["path"] for e in listed["entries"] if e["kind"] == "file"}
    assert files == set(FILES)
    assert listed["pruned"] == 0 and not listed["truncated"] and listed["cursor"] is None


def test_listing_names_only_what_the_caller_may_read_and_counts_the_rest(world: World) -> None:
    listed = world.ok(world.narrow, "list_files", {})
    assert [(e["path"], e["kind"]) for e in listed["entries"]] == [
        ("src", "folder"),
        ("src/open", "folder"),
        ("src/open/app.py", "file"),
        ("src/open/big.txt", "file"),
        ("src/open/blob.bin", "file"),
        ("src/open/deep", "folder"),
        ("src/open/deep/a", "folder"),
        ("src/open/deep/a/b.txt", "file"),
        ("src/open/util.py", "file"),
    ]
    sizes = {e["path"]: e.get("size") for e in listed["entries"]}
    assert sizes["src/open/app.py"] == len(FILES["src/open/app.py"])
    assert sizes["src/open"] is None
    # README.md (out of scope), src/vault (a folder with nothing in scope: once),
    # src/open/secret/seal.py (in scope, denied by policy).
    assert listed["pruned"] == 3
    _names_nothing_hidden(listed)


@pytest.mark.parametrize("glob", ["**/*.py", "**/seal*", "src/open/secret/**", "**/s*", "*"])
def test_a_glob_never_changes_what_is_counted(world: World, glob: str) -> None:
    """A glob the caller chooses cannot spell out hidden names through ``pruned``."""
    listed = world.ok(world.narrow, "list_files", {"glob": glob})
    assert listed["pruned"] == 3
    _names_nothing_hidden(listed)


def test_a_glob_filters_below_the_path(world: World) -> None:
    listed = world.ok(world.narrow, "list_files", {"path": "src/open", "glob": "*.py"})
    assert [e["path"] for e in listed["entries"]] == ["src/open/app.py", "src/open/util.py"]
    listed = world.ok(world.narrow, "list_files", {"path": "src/open", "glob": "**/*.txt"})
    assert [e["path"] for e in listed["entries"]] == ["src/open/big.txt", "src/open/deep/a/b.txt"]
    assert listed["pruned"] == 1  # the denied file under src/open


def test_an_argument_out_of_bounds_names_the_bound_not_the_value(world: World) -> None:
    """An agent told only "invalid" cannot correct itself; echoing the value could leak it."""
    huge = 10**30
    answer = refusal(world.call(world.narrow, "list_files", {"limit": huge, "glob": 7}))
    assert answer["error"] == "invalid_argument" and answer["fields"] == ["glob", "limit"]
    assert f"limit: Input should be less than or equal to {LIMITS.list_entries}" in (
        answer["message"])
    assert "glob: Input should be a valid string" in answer["message"]
    assert str(huge) not in answer["message"]
    answer = refusal(world.call(world.narrow, "read_file", {"path": "src/open/app.py",
                                                            "start_line": 0}))
    assert answer["message"].endswith("start_line: Input should be greater than or equal to 1")


def test_a_bad_glob_is_invalid(world: World) -> None:
    answer = refusal(world.call(world.narrow, "list_files", {"glob": "src/**x"}))
    assert answer["error"] == "invalid_argument" and answer["fields"] == ["glob"]


def test_a_path_filter_outside_the_scope_or_denied_is_refused(world: World) -> None:
    assert error(world.call(world.narrow, "list_files", {"path": "src/vault"})) == (
        "path_outside_scope")
    assert error(world.call(world.narrow, "list_files", {"path": "README.md"})) == (
        "path_outside_scope")
    code = error(world.call(world.narrow, "list_files", {"path": "src/open/secret/seal.py"}))
    assert code in ("policy_denied", "path_forbidden")


def test_a_path_naming_a_file_lists_it_alone(world: World) -> None:
    listed = world.ok(world.narrow, "list_files", {"path": "src/open/app.py"})
    assert [e["path"] for e in listed["entries"]] == ["src/open/app.py"]
    assert world.ok(world.narrow, "list_files", {"path": "src/open/nothing"})["entries"] == []


def test_pages_add_up_to_the_whole_listing_with_the_same_count(world: World) -> None:
    whole = world.ok(world.narrow, "list_files", {})["entries"]
    pages = _pages(world, world.narrow, "list_files", {"limit": 2})
    assert [e for page in pages for e in page["entries"]] == whole
    assert len(pages) == 5
    assert {page["pruned"] for page in pages} == {3}
    assert pages[-1]["cursor"] is None


def test_a_crafted_cursor_changes_no_count(world: World) -> None:
    """A cursor placed inside the hidden folder neither names nor counts differently."""
    for cursor in ("src/open/secret/", "src/open/secret/s", "src/open/secret/z", "~"):
        listed = world.ok(world.narrow, "list_files", {"cursor": cursor})
        assert listed["pruned"] == 3
        _names_nothing_hidden(listed)


def test_staged_changes_are_listed_in_their_session_only(world: World) -> None:
    token = world.mint("narrow-stager", "src/open/**")
    world.ok(token, "write_file", {"path": "src/open/new/fresh.py", "content": "x = 1\n"}, "st")
    world.ok(token, "read_file", {"path": "src/open/util.py"}, "st")
    world.ok(token, "delete_file", {"path": "src/open/util.py"}, "st")
    listed = [e["path"] for e in world.ok(token, "list_files", {"path": "src/open"}, "st")[
        "entries"]]
    assert "src/open/new" in listed and "src/open/new/fresh.py" in listed
    assert "src/open/util.py" not in listed
    other = [e["path"] for e in world.ok(token, "list_files", {"path": "src/open"}, "other")[
        "entries"]]
    assert "src/open/new/fresh.py" not in other and "src/open/util.py" in other
    found = world.ok(token, "search_text", {"query": "x = 1"}, "st")["matches"]
    assert [(m["path"], m["line"]) for m in found] == [("src/open/new/fresh.py", 1)]


def test_a_folder_emptied_by_staged_deletions_is_not_listed(world: World) -> None:
    token = world.mint("narrow-emptier", "src/open/**")
    world.ok(token, "read_file", {"path": "src/open/deep/a/b.txt"}, "em")
    world.ok(token, "delete_file", {"path": "src/open/deep/a/b.txt"}, "em")
    listed = [e["path"] for e in world.ok(token, "list_files", {}, "em")["entries"]]
    assert not any(p.startswith("src/open/deep") for p in listed)


# --- search_text -------------------------------------------------------------------


def test_search_finds_lines_in_visible_files_only(world: World) -> None:
    found = world.ok(world.narrow, "search_text", {"query": "needle"})
    assert [(m["path"], m["line"], m["column"], m["text"]) for m in found["matches"]] == [
        ("src/open/app.py", 4, 13, "    return 'needle one'"),
        ("src/open/deep/a/b.txt", 2, 1, "needle three"),
    ]
    assert found["skipped"] == 1  # blob.bin is binary
    assert not found["truncated"] and found["cursor"] is None
    _names_nothing_hidden(found)


def test_a_wide_token_finds_the_hidden_lines(world: World) -> None:
    paths = {m["path"] for m in world.ok(world.wide, "search_text", {"query": "needle hidden"})[
        "matches"]}
    assert paths == {"src/open/secret/seal.py", "src/vault/keys.py"}


@pytest.mark.parametrize(("hidden", "absent"), [
    ("needle hidden kek", "needle hidden kez"),
    ("KEK", "KEZ"),
    ("needle hidden master", "needle hidden mister"),
    ("needle at the root", "needle at the rook"),
])
def test_search_answers_hidden_text_as_text_that_exists_nowhere(
    world: World, hidden: str, absent: str
) -> None:
    for args in ({}, {"regex": True}, {"case": False}, {"limit": 1}):
        one = world.ok(world.narrow, "search_text", {"query": hidden, **args})
        other = world.ok(world.narrow, "search_text", {"query": absent, **args})
        assert one == other
        assert one["matches"] == []


def test_search_paths_are_checked_like_any_read(world: World) -> None:
    assert error(world.call(world.narrow, "search_text", {"query": "x", "paths": ["src/vault"]})
                 ) == "path_outside_scope"
    code = error(world.call(world.narrow, "search_text",
                            {"query": "x", "paths": ["src/open/secret/seal.py"]}))
    assert code in ("policy_denied", "path_forbidden")
    # The folder itself is not denied (the rule is for what is inside it): nothing there
    # is searched, and the answer is that of a folder holding nothing.
    inside = world.ok(world.narrow, "search_text", {"query": "needle",
                                                    "paths": ["src/open/secret"]})
    empty = world.ok(world.narrow, "search_text", {"query": "needle",
                                                   "paths": ["src/open/nothing"]})
    assert inside == empty and inside["matches"] == []
    found = world.ok(world.narrow, "search_text", {"query": "needle", "paths": ["src/open/deep"]})
    assert [m["path"] for m in found["matches"]] == ["src/open/deep/a/b.txt"]


def test_case_and_literal_and_regex(world: World) -> None:
    def lines(**args: Any) -> list[tuple[str, int]]:
        found = world.ok(world.narrow, "search_text", args)["matches"]
        return [(m["path"], m["line"]) for m in found]

    assert lines(query="Needle") == [("src/open/util.py", 2)]
    assert lines(query="Needle", case=False) == [
        ("src/open/app.py", 4), ("src/open/deep/a/b.txt", 2), ("src/open/util.py", 2)]
    assert lines(query="x)") == [("src/open/util.py", 1)]  # literal: no pattern
    assert lines(query="^def \\w+\\(", regex=True) == [
        ("src/open/app.py", 3), ("src/open/util.py", 1)]
    assert lines(query="line 1000 of", paths=["src/open/big.txt"]) == [("src/open/big.txt", 1000)]


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)b", r"(?<!a)b", r"a{1001}", r"(a"])
def test_patterns_rre2_refuses_are_invalid_arguments(world: World, pattern: str) -> None:
    """Backreferences and lookaround need backtracking: refused, never run."""
    answer = refusal(world.call(world.narrow, "search_text", {"query": pattern, "regex": True}))
    assert answer["error"] == "invalid_argument" and answer["fields"] == ["query"]


def test_a_pathological_pattern_is_answered(tmp_path: Path) -> None:
    """Threat: ``(a+)+$`` over a long run of ``a`` hangs a backtracking engine for ever.

    RE2 answers it in time linear in the text; the test asserts that the
    search completes with the right answer, not how long it took.
    """
    home, repo = tmp_path / "home", tmp_path / "repo"
    admin.init_home(home)
    run = b"a" * 200_000
    create_repository(repo, {"src/run.txt": run + b"b\n", "src/ok.txt": b"xx\n" + run + b"\n"})
    engine = Engine(home, repo)
    token = str(admin.mint_token(home, agent="p", operations=["read"], paths=["src/**"],
                                 ttl_seconds=900)["token"])
    calls = EngineCalls()
    calls.engine = engine
    found = calls.ok(token, "search_text", {"query": "(a+)+$", "regex": True})
    assert [(m["path"], m["line"], m["column"], m["cut"]) for m in found["matches"]] == [
        ("src/ok.txt", 2, 1, True)]
    assert len(found["matches"][0]["text"]) == LIMITS.search_line_chars
    assert search.compile_query("(a+)+$", regex=True, case=True).__class__.__module__ == "re2"


def test_search_pages_by_limit(world: World) -> None:
    whole = world.ok(world.narrow, "search_text", {"query": "line", "limit": 500})
    assert len(whole["matches"]) == 500 and whole["truncated"]
    pages = _pages(world, world.narrow, "search_text", {"query": "of the big", "limit": 300})
    got = [m["line"] for page in pages for m in page["matches"]]
    assert got == list(range(1, 1001))
    assert [len(p["matches"]) for p in pages] == [300, 300, 300, 100]


@pytest.mark.parametrize("budget", [{"search_scan_files": 1}, {"search_scan_bytes": 1},
                                    {"search_seconds": 1e-9}])
def test_search_stops_at_its_budget_and_goes_on(
    world: World, monkeypatch: pytest.MonkeyPatch, budget: dict[str, Any]
) -> None:
    """Past a budget (files, bytes, time) the answer says so, and the cursor goes on from there.

    Each call searches at least one file, so a search always makes progress.
    """
    monkeypatch.setattr(search, "LIMITS", replace(LIMITS, **budget))
    pages = _pages(world, world.narrow, "search_text", {"query": "needle"})
    assert [p["files_searched"] for p in pages] == [1, 1, 1, 1]
    assert [(m["path"], m["line"]) for p in pages for m in p["matches"]] == [
        ("src/open/app.py", 4), ("src/open/deep/a/b.txt", 2)]
    for page in pages:
        _names_nothing_hidden(page)


def test_a_bad_cursor_is_invalid(world: World) -> None:
    for cursor in ("nope", "x:src/a", ":src/a", "1:"):
        answer = refusal(world.call(world.narrow, "search_text",
                                    {"query": "needle", "cursor": cursor}))
        assert answer["error"] == "invalid_argument" and answer["fields"] == ["cursor"]


def test_a_crafted_search_cursor_reads_nothing_hidden(world: World) -> None:
    for cursor in ("0:src/open/secret/seal.py", "0:src/vault/keys.py", "0:README.md"):
        found = world.ok(world.narrow, "search_text", {"query": "needle", "cursor": cursor})
        _names_nothing_hidden(found)


def test_protected_files_are_searched_for_a_token_that_may_read_them(world: World) -> None:
    """A protected file sealed at rest is searched in plaintext by a token allowed to read it."""
    token = world.mint("sealer", "src/**")
    world.ok(token, "write_file",
             {"path": "src/open/secret/new.py", "content": "TOKEN = 'sealed needle'\n"}, "se")
    world.ok(token, "commit", {"message": "add a protected file"}, "se")
    lane = pygit2.Repository(str(world.repo)).revparse_single("agent/sealer")
    stored = lane.peel(pygit2.Tree)["src/open/secret/new.py"].peel(pygit2.Blob).data
    assert is_sealed(stored) and b"sealed needle" not in stored
    found = world.ok(token, "search_text", {"query": "sealed needle"}, "se2")["matches"]
    assert [m["path"] for m in found] == ["src/open/secret/new.py"]


# --- read_file's line range --------------------------------------------------------


def test_a_line_range_reads_part_of_a_large_file(world: World) -> None:
    assert error(world.call(world.narrow, "read_file", {"path": "src/open/big.txt"})) == (
        "limit_exceeded")
    part = world.ok(world.narrow, "read_file",
                    {"path": "src/open/big.txt", "start_line": 10, "end_line": 12})
    assert part["content"] == "line 10 of the big file\nline 11 of the big file\n" \
        "line 12 of the big file\n"
    assert (part["start_line"], part["end_line"], part["total_lines"]) == (10, 12, 1000)
    assert part["size"] == len(BIG)
    tail = world.ok(world.narrow, "read_file", {"path": "src/open/big.txt", "start_line": 999})
    assert tail["content"] == "line 999 of the big file\nline 1000 of the big file\n"
    head = world.ok(world.narrow, "read_file", {"path": "src/open/app.py", "end_line": 1})
    assert head["content"] == "import os\n" and head["start_line"] == 1


def test_a_range_past_the_end_is_empty_and_a_reversed_one_invalid(world: World) -> None:
    past = world.ok(world.narrow, "read_file", {"path": "src/open/app.py", "start_line": 50})
    assert (past["content"], past["start_line"], past["end_line"], past["total_lines"]) == (
        "", 50, 49, 4)
    answer = refusal(world.call(world.narrow, "read_file",
                                {"path": "src/open/app.py", "start_line": 3, "end_line": 2}))
    assert answer["error"] == "invalid_argument"
    assert error(world.call(world.narrow, "read_file",
                            {"path": "src/open/app.py", "start_line": 0})) == "invalid_argument"


def test_too_many_lines_are_still_over_the_policy_limit(world: World) -> None:
    answer = refusal(world.call(world.narrow, "read_file",
                                {"path": "src/open/big.txt", "start_line": 1, "end_line": 900}))
    assert answer["error"] == "limit_exceeded" and answer["rule"] == "limits.file_bytes"


def test_a_whole_read_keeps_its_shape(world: World) -> None:
    whole = world.ok(world.narrow, "read_file", {"path": "src/open/app.py"})
    assert set(whole) == {"path", "ref", "encoding", "content", "size"}


def test_a_range_of_a_protected_file_is_refused_as_a_whole_read_is(world: World) -> None:
    code = error(world.call(world.narrow, "read_file",
                            {"path": "src/open/secret/seal.py", "start_line": 1}))
    assert code in ("policy_denied", "path_forbidden")
