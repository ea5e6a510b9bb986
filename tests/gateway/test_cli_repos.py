"""``chit repos list|status`` and ``chit lanes list`` on real repositories."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pygit2
import pytest

from engine.admin.seed import create_repository
from engine.git import Repository
from engine.service import Engine
from tests.conftest import FILES, World
from tests.engine.engine_calls import land
from tests.engine.git.remote_helpers import clone, make_origin, open_engine_repo, refs_of
from tests.engine.git.remote_helpers import land as land_on

LANE_KEYS = {"repo", "lane", "agent", "commit", "time", "subject", "ahead", "behind"}
REPO_KEYS = {"name", "path", "base", "base_commit", "remote", "lanes", "odd_refs", "error"}


def run(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def commit(repo: pygit2.Repository, ref: str, parent: pygit2.Oid | None, message: str,
           when: int) -> pygit2.Oid:
    sig = pygit2.Signature("op", "op@example.org", when, 0)
    blob = repo.create_blob(message.encode())
    tb = repo.TreeBuilder()
    tb.insert("f.txt", blob, pygit2.enums.FileMode.BLOB)
    return repo.create_commit(ref, sig, sig, message, tb.write(), [parent] if parent else [])


class Site:
    """A home serving ``app`` (base ``main``, lanes made by the engine) and ``legacy`` (base
    ``master``, the repository's HEAD, lanes made by pygit2)."""

    def __init__(self, world: World, tmp_path: Path) -> None:
        self.world = world
        self.app = tmp_path / "app"
        create_repository(self.app, FILES)
        with Engine(world.home, self.app) as engine:
            land(engine, world.mint(agent="alice", repos=["app"]), "A = 1\n", message="alice's",
                 session="a")
            bob = world.mint(agent="bob", repos=["app"])
            land(engine, bob, "B = 1\n", message="bob one", session="b1")
            land(engine, bob, "B = 2\n", message="bob two", session="b2")
        self.legacy = tmp_path / "legacy.git"
        repo = pygit2.init_repository(str(self.legacy), bare=True, initial_head="master")
        root = commit(repo, "refs/heads/master", None, "root", 1_700_000_000)
        self.carol = commit(repo, "refs/heads/agent/carol", root,
                            "carol's change\n\nthe body", 1_700_000_100)
        self.carol = commit(repo, "refs/heads/agent/carol", self.carol, "carol again",
                            1_700_000_200)
        commit(repo, "refs/heads/master", root, "master moves on", 1_700_000_300)
        (world.home / "engine.toml").write_text(
            f'[[repo]]\nname = "app"\npath = "{self.app}"\n\n'
            f'[[repo]]\npath = "{self.legacy}"\nremote = "http://deploy-tok@127.0.0.1:9/l.git"\n'
        )

    def json(self, *args: str) -> dict[str, object]:
        out = run(self.world, *args, "--json")
        assert out.returncode == 0, out.stderr
        doc: dict[str, object] = json.loads(out.stdout)
        return doc


@pytest.fixture
def site(world: World, tmp_path: Path) -> Site:
    return Site(world, tmp_path)


def test_repos_list_shows_each_repository_base_and_lanes(site: Site) -> None:
    doc = site.json("repos", "list")
    repos = doc["repositories"]
    assert isinstance(repos, list) and [r["name"] for r in repos] == ["app", "legacy"]
    app, legacy = repos
    assert set(app) == REPO_KEYS and app["base"] == "main" and app["error"] is None
    assert app["remote"] is None and app["odd_refs"] == []
    assert [(lane["agent"], lane["ahead"], lane["behind"]) for lane in app["lanes"]] == [
        ("alice", 1, 0), ("bob", 2, 0)]
    assert legacy["base"] == "master"  # the repository's HEAD branch, not main
    assert legacy["base_commit"] == str(
        pygit2.Repository(str(site.legacy)).references["refs/heads/master"].target)
    [carol] = legacy["lanes"]
    assert carol["lane"] == "agent/carol" and carol["commit"] == str(site.carol)
    assert (carol["ahead"], carol["behind"]) == (2, 1)


def test_repos_list_never_shows_remote_credentials(site: Site) -> None:
    """Threat: a token in a remote URL's userinfo leaks through the operator's listing."""
    for args in (("repos", "list"), ("repos", "list", "--json"), ("repos", "status", "--json")):
        out = run(site.world, *args)
        assert "deploy-tok" not in out.stdout + out.stderr
        assert "http://***@127.0.0.1:9/l.git" in out.stdout


def test_repos_list_human_output_is_aligned(site: Site) -> None:
    out = run(site.world, "repos", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("LANE"))
    table = lines[head:head + 3]
    for column in ("AGENT", "AHEAD", "BEHIND", "LAST COMMIT"):
        at = table[0].index(column)
        assert all(row[at - 2:at] == "  " and row[at] != " " for row in table[1:]), table
    assert "base master at" in out.stdout and "base main at" in out.stdout


def test_lanes_list_json_shape_and_commit_details(site: Site) -> None:
    doc = site.json("lanes", "list")
    lanes = doc["lanes"]
    assert isinstance(lanes, list) and doc["odd_refs"] == [] and doc["errors"] == []
    assert [(lane["repo"], lane["agent"]) for lane in lanes] == [
        ("app", "alice"), ("app", "bob"), ("legacy", "carol")]
    for lane in lanes:
        assert set(lane) == LANE_KEYS
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lane["time"])
        assert re.fullmatch(r"[0-9a-f]{40}", lane["commit"])
    bob = lanes[1]
    assert bob["subject"] == "bob two" and bob["ahead"] == 2
    carol = lanes[2]
    assert carol["time"] == "2023-11-14T22:16:40Z"  # 1_700_000_200, UTC
    assert carol["subject"] == "carol again"


def test_lanes_list_by_repository_name(site: Site) -> None:
    doc = site.json("lanes", "list", "--repo", "legacy")
    assert [lane["agent"] for lane in doc["lanes"]] == ["carol"]
    human = run(site.world, "lanes", "list", "--repo", "app")
    assert human.returncode == 0
    assert "alice" in human.stdout and "carol" not in human.stdout
    assert "+2/-0" in human.stdout


def test_repos_status_one_repository_without_remote_exits_zero(site: Site) -> None:
    doc = site.json("repos", "status", "app")
    assert doc["ok"] is True
    [app] = doc["repositories"]
    assert app["name"] == "app" and app["remote_status"] is None
    assert all(lane["remote"] is None for lane in app["lanes"])


@pytest.mark.parametrize("args", [
    ("lanes", "list", "--repo", "nope"),
    ("repos", "status", "nope"),
    ("repos", "list", "--repo", "nope"),
])
def test_unknown_repository_name_is_refused(site: Site, args: tuple[str, ...]) -> None:
    out = run(site.world, *args)
    assert out.returncode == 2
    assert "no repository named nope" in out.stderr and "known: app, legacy" in out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("name", ["..", ".", "-x", "a b", "\x1b[31mred"])
def test_invalid_repository_name_is_refused(site: Site, name: str) -> None:
    """Threat: a name that walks out of the configured repositories or writes to the terminal."""
    out = run(site.world, "lanes", "list", f"--repo={name}")
    assert out.returncode == 2
    assert "a repository name is" in out.stderr and "\x1b" not in out.stderr


def test_unusable_engine_toml_is_refused(site: Site) -> None:
    toml = site.world.home / "engine.toml"
    toml.write_text('[[repo]]\nname = ".."\npath = "/tmp"\n')
    out = run(site.world, "repos", "list")
    assert out.returncode == 2 and "repository name" in out.stderr
    toml.write_text("[[repo]\n")
    out = run(site.world, "lanes", "list")
    assert out.returncode == 2 and out.stderr.startswith("chit: ")
    toml.write_text("")
    out = run(site.world, "repos", "status")
    assert out.returncode == 2 and "no repository" in out.stderr


def test_repo_paths_on_the_command_line(site: Site, tmp_path: Path) -> None:
    (site.world.home / "engine.toml").unlink()
    doc = site.json("lanes", "list", "--repo", f"old={site.legacy}")
    assert [(lane["repo"], lane["agent"]) for lane in doc["lanes"]] == [("old", "carol")]
    doc = site.json("repos", "list", "--repo", str(site.app), "--repo", str(site.legacy))
    assert [r["name"] for r in doc["repositories"]] == ["app", "legacy"]
    # A path and a name together: the name picks among the paths given.
    doc = site.json("lanes", "list", "--repo", str(site.app), "--repo", str(site.legacy),
                    "--repo", "legacy")
    assert [lane["agent"] for lane in doc["lanes"]] == ["carol"]


def test_missing_repository_is_reported_not_fatal(site: Site, tmp_path: Path) -> None:
    doc = site.json("repos", "list", "--repo", f"gone={tmp_path / 'gone'}",
                    "--repo", str(site.app))
    gone, app = doc["repositories"]
    assert gone["error"] == "not a git repository" and gone["lanes"] == []
    assert len(app["lanes"]) == 2
    out = run(site.world, "repos", "status", "--repo", f"gone={tmp_path / 'gone'}")
    assert out.returncode == 1 and "not a git repository" in out.stdout


def test_odd_lane_refs_made_behind_chits_back_do_not_break_listing(site: Site) -> None:
    """Threat: refs written outside chit (nested, non-ASCII, bidi, not UTF-8, symbolic, a blob)
    break the operator's view or smuggle control characters into the terminal."""
    repo = pygit2.Repository(str(site.legacy))
    master = repo.references["refs/heads/master"].target
    blob = repo.create_blob(b"not a commit")
    refs = site.legacy / "refs" / "heads" / "agent"
    (refs / "x").mkdir()
    (refs / "x" / "y").write_text(f"{master}\n")
    (refs / "caf\u00e9").write_text(f"{master}\n")
    (refs / "evil\u202egpj.exe").write_text(f"{master}\n")
    (refs / "blob").write_text(f"{blob}\n")
    (refs / "sym").write_text("ref: refs/heads/master\n")
    with open(bytes(refs) + b"/bad\xff", "w") as fh:
        fh.write(f"{master}\n")
    doc = site.json("lanes", "list", "--repo", "legacy")
    assert [lane["agent"] for lane in doc["lanes"]] == ["carol"]
    odd = sorted(o["ref"] for o in doc["odd_refs"])
    assert odd == sorted(f"refs/heads/agent/{n}" for n in
                         ("x/y", "caf\u00e9", "evil\u202egpj.exe", "blob", "sym", "bad\udcff"))
    human = run(site.world, "lanes", "list")
    assert human.returncode == 0, human.stderr
    assert "\u202e" not in human.stdout and "\\u202e" in human.stdout
    assert "carol" in human.stdout
    listed = run(site.world, "repos", "list")
    assert listed.returncode == 0 and "\u202e" not in listed.stdout


def test_listing_changes_nothing(site: Site) -> None:
    """Threat: an operator's look at the repositories moves or creates a reference."""
    def state() -> dict[str, dict[str, str]]:
        out = {}
        for path in (site.app, site.legacy):
            repo = pygit2.Repository(str(path))
            out[str(path)] = {n: str(repo.references[n].target) for n in repo.references}
        return out

    before = state()
    files = sorted(p for p in site.legacy.rglob("*"))
    for args in (("repos", "list"), ("repos", "status"), ("lanes", "list")):
        run(site.world, *args)
    assert state() == before
    assert sorted(p for p in site.legacy.rglob("*")) == files


def test_help_texts_name_the_commands(world: World) -> None:
    for args in (("repos", "list"), ("repos", "status"), ("lanes", "list")):
        out = run(world, *args, "--help")
        assert out.returncode == 0 and "--json" in out.stdout and "--repo" in out.stdout
    assert "Exit 1" in run(world, "repos", "status", "--help").stdout.replace("\n", " ")


class Remote:
    """A bare ``origin`` on master, an engine's clone of it pushing lanes there, in engine.toml."""

    def __init__(self, world: World, tmp_path: Path) -> None:
        self.world = world
        self.origin = tmp_path / "origin.git"
        make_origin(self.origin)
        self.clone = clone(self.origin, tmp_path / "engine.git")
        (world.home / "engine.toml").write_text(
            f'[[repo]]\nname = "org"\npath = "{self.clone}"\nremote = "{self.origin}"\n')

    def repo(self) -> Repository:
        return open_engine_repo(self.clone, self.origin)

    def status(self) -> tuple[int, dict[str, object]]:
        out = run(self.world, "repos", "status", "--json")
        assert out.returncode in (0, 1), out.stderr
        return out.returncode, json.loads(out.stdout)


@pytest.fixture
def remote(world: World, tmp_path: Path) -> Remote:
    return Remote(world, tmp_path)


def test_repos_status_remote_level_then_behind_and_missing(remote: Remote) -> None:
    vcs = remote.repo()
    land_on(vcs, "alice", {"src/a.py": b"a\n"})
    code, doc = remote.status()
    [org] = doc["repositories"]
    assert code == 0 and doc["ok"] is True, doc
    assert org["base"] == "master" and org["remote"] == str(remote.origin)
    assert org["remote_status"] == {"url": str(remote.origin), "reachable": True, "error": None,
                                    "behind": [], "parked": [], "why": None}
    assert [(lane["lane"], lane["remote"]) for lane in org["lanes"]] == [("agent/alice", "level")]

    hook = remote.origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'quota exceeded' >&2\nexit 1\n")
    hook.chmod(0o755)
    land_on(vcs, "alice", {"src/b.py": b"b\n"})
    land_on(vcs, "bob", {"src/c.py": b"c\n"})
    vcs.close()
    origin_refs = refs_of(remote.origin)
    code, doc = remote.status()
    [org] = doc["repositories"]
    assert code == 1 and doc["ok"] is False
    assert [(lane["lane"], lane["remote"], lane["ahead"]) for lane in org["lanes"]] == [
        ("agent/alice", "behind", 2), ("agent/bob", "missing", 1)]
    assert org["remote_status"]["behind"] == ["agent/alice", "agent/bob"]
    assert org["remote_status"]["why"]  # the dry run's answer: it would take them now
    assert refs_of(remote.origin) == origin_refs  # the dry run pushed nothing

    human = run(remote.world, "repos", "status", "org")
    assert human.returncode == 1
    assert "remote: behind on 2 lane(s)" in human.stdout
    assert re.search(r"agent/bob +bob +1 +0 +[0-9a-f]{12} \S+ +missing", human.stdout)

    listed = run(remote.world, "repos", "list", "--json")  # never contacts the remote
    assert listed.returncode == 0
    assert "remote_status" not in json.loads(listed.stdout)["repositories"][0]


def test_repos_status_unreachable_remote_says_why(remote: Remote, tmp_path: Path) -> None:
    vcs = remote.repo()
    land_on(vcs, "alice", {"src/a.py": b"a\n"})
    vcs.close()
    remote.origin.rename(tmp_path / "gone.git")
    code, doc = remote.status()
    [org] = doc["repositories"]
    assert code == 1 and org["remote_status"]["reachable"] is False
    assert "listing the remote failed" in org["remote_status"]["error"]
    assert [lane["remote"] for lane in org["lanes"]] == [None]
    human = run(remote.world, "repos", "status")
    assert human.returncode == 1 and "unreachable: listing the remote failed" in human.stdout
    # The listing of lanes needs no remote.
    lanes = run(remote.world, "lanes", "list")
    assert lanes.returncode == 0 and "agent/alice" in lanes.stdout
