"""One engine, two real repositories: each offer and call on the repository it names.

Tokens name the repositories they are good for (the ``repos`` caveat); every
path by which a token for one repository could act on the other is tried here,
at the engine's interface (the edges' paths: tests/gateway/test_repos_edges.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pygit2
import pytest

from engine import admin
from engine.admin.seed import create_repository
from engine.auth import signkeys
from engine.auth import token as tokens
from engine.errors import ConfigurationError
from engine.service import Engine
from engine.service.repos import (
    RepoSpec,
    name_for_path,
    parse_repo_option,
    repos_from_engine_toml,
    resolve_repo_specs,
)
from tests.conftest import FILES, World
from tests.engine.engine_calls import error, ok, refusal

APP_FILES = {**FILES, "src/app.py": b"APP = 'app'\n"}
LIB_FILES = {**FILES, "src/app.py": b"LIB = 'lib'\n"}


class Two:
    """A home and two repositories, ``app`` and ``lib``, served by one engine."""

    def __init__(self, world: World, tmp_path: Path) -> None:
        self.world = world
        self.home = world.home
        self.app = tmp_path / "app"
        self.lib = tmp_path / "lib.git"  # named "lib": the folder without .git
        create_repository(self.app, APP_FILES)
        create_repository(self.lib, LIB_FILES)
        self.engine = Engine(self.home, [RepoSpec("app", self.app), RepoSpec("lib", self.lib)])

    def mint(self, repos: list[str] | None, **kw: Any) -> str:
        return self.world.mint(repos=repos, **kw)

    def call(self, token: str, tool: str, args: dict[str, Any] | None = None, *,
             repo: str | None, session: str = "s1") -> Any:
        listed = self.engine.offer(token, repo=repo).get("catalog_hash")
        return self.engine.invoke(token, tool, args or {}, session=session,
                                  offered_catalog_hash=listed, repo=repo)

    def lane(self, path: Path, agent: str = "alice") -> str | None:
        refs = pygit2.Repository(str(path)).references
        name = f"refs/heads/agent/{agent}"
        return str(refs[name].target) if name in refs else None


@pytest.fixture
def two(world: World, tmp_path: Path) -> Two:
    made = Two(world, tmp_path)
    yield made
    made.engine.close()


def test_each_call_acts_on_the_repository_it_names(two: Two) -> None:
    token = two.mint(["app", "lib"])
    assert ok(two.call(token, "read_file", {"path": "src/app.py"}, repo="app"))[
        "content"] == "APP = 'app'\n"
    assert ok(two.call(token, "read_file", {"path": "src/app.py"}, repo="lib"))[
        "content"] == "LIB = 'lib'\n"
    scope = ok(two.call(token, "effective_scope", repo="lib"))
    assert scope["repo"] == "lib" and scope["repo_scopes"] == [["app", "lib"]]
    assert two.engine.repos == ["app", "lib"]


def test_sessions_and_commits_stay_in_their_repository(two: Two) -> None:
    """Threat: a change staged for one repository landing in the other, through a shared
    session id."""
    token = two.mint(["*"])
    assert ok(two.call(token, "write_file", {"path": "src/new.py", "content": "x = 1\n"},
                       repo="app"))
    # The same session id in the other repository is another session: nothing staged.
    assert ok(two.call(token, "status", repo="lib"))["staged"] == []
    assert error(two.call(token, "commit", {"message": "empty"}, repo="lib")) == (
        "invalid_argument")
    landed = ok(two.call(token, "commit", {"message": "add new"}, repo="app"))["commit"]
    assert two.lane(two.app) == landed and two.lane(two.lib) is None


def test_a_token_for_one_repository_is_refused_on_the_other(two: Two) -> None:
    """Threat: a token minted for `app` reading or writing `lib`, which shares the engine's
    keyring and holds the same paths."""
    token = two.mint(["app"])
    refused = two.engine.offer(token, repo="lib")
    assert refusal(refused)["error"] == "repo_outside_scope"
    for tool, args in [("read_file", {"path": "src/app.py"}),
                       ("write_file", {"path": "src/app.py", "content": "pwned"}),
                       ("effective_scope", {})]:
        answer = two.engine.invoke(token, tool, args, session="s1", repo="lib")
        assert error(answer) == "repo_outside_scope", tool
    assert two.lane(two.lib) is None


def test_names_are_matched_exactly_and_globs_only_as_written(two: Two) -> None:
    """Threat: case differences, glob characters or traversal in a repository name reaching
    a repository the token does not name."""
    token = two.mint(["app"])
    for name in ["App", "APP", "app ", "ap?", "a*", "*", "../app", "app/..", "app\x00",
                 "./app", "lib/../app"]:
        answer = two.engine.offer(token, repo=name)
        assert refusal(answer)["error"] in ("repo_outside_scope", "invalid_argument"), name
    globbed = two.mint(["l?b"])
    assert ok(two.call(globbed, "status", repo="lib"))
    assert error(two.call(globbed, "status", repo="app")) == "repo_outside_scope"


def test_scope_is_checked_before_the_name_is_looked_up(two: Two) -> None:
    """Threat: a token probing which repositories an engine serves."""
    token = two.mint(["app"])
    outside = [refusal(two.engine.offer(token, repo=name)) for name in ("lib", "secret-repo")]
    assert outside[0] == outside[1]  # the same refusal, served or not
    assert outside[0]["error"] == "repo_outside_scope"
    wide = two.mint(["*"])
    assert refusal(two.engine.offer(wide, repo="secret-repo"))["error"] == "not_found"
    # An invalid token learns nothing either: its own refusal comes first.
    assert refusal(two.engine.offer("chit_garbage", repo="lib"))["error"] == "token_malformed"


def test_a_token_without_repos_is_good_only_on_a_one_repository_engine(
    two: Two, world: World
) -> None:
    """Threat: a token minted before repositories had names acting on every repository of
    an engine that now serves several."""
    legacy = two.mint(None)
    for repo in ("app", "lib", None):
        answer = two.engine.offer(legacy, repo=repo)
        assert refusal(answer)["error"] == ("repo_required" if repo is None
                                            else "repo_outside_scope")
    with Engine(world.home, two.app) as single:
        assert single.offer(legacy)["ok"] is True
        assert single.offer(legacy, repo="app")["ok"] is True
        assert refusal(single.offer(legacy, repo="lib"))["error"] == "repo_outside_scope"


def test_an_attenuation_cannot_lift_the_one_repository_rule(two: Two) -> None:
    """Threat: a crafted attenuation adding ["repos", ["*"]] to a token that names no
    repository, to make it good on a two-repository engine."""
    legacy = two.mint(None)
    crafted = tokens.attenuate(legacy, repos=["*"])
    assert refusal(two.engine.offer(crafted, repo="app"))["error"] == "repo_outside_scope"
    # Nor can one widen a token that names repositories: caveats intersect.
    scoped = two.mint(["app"])
    widened = tokens.attenuate(scoped, repos=["*", "lib"])
    assert refusal(two.engine.offer(widened, repo="lib"))["error"] == "repo_outside_scope"
    assert two.engine.offer(widened, repo="app")["ok"] is True
    narrowed = tokens.attenuate(two.mint(["*"]), repos=["lib"])
    assert refusal(two.engine.offer(narrowed, repo="app"))["error"] == "repo_outside_scope"


def test_issue_sub_token_names_only_repositories_within_the_parents(two: Two) -> None:
    """Threat: a delegating agent handing its helper a token for repositories it does not
    hold itself."""
    lead = two.mint(["app", "lib-*"], agent="lead", ops="read,write,sub-token:issue",
                    delegable=True)
    base = {"agent": "lead.helper", "ops": ["read"], "paths": ["src/**"], "ttl_seconds": 60}
    for asked in (["lib"], ["*"], ["app", "lib"], ["App"], ["lib-*", "x"], ["l*"]):
        refused = two.call(lead, "issue_sub_token", {**base, "repos": asked}, repo="app")
        assert error(refused) == "delegation_widens", asked
        assert refusal(refused)["held"] == [["app", "lib-*"]]
    for bad in ([], ["a/b"], [".."], ["a**"], ["x" * 65]):
        refused = two.call(lead, "issue_sub_token", {**base, "repos": bad}, repo="app")
        assert error(refused) == "invalid_argument", bad
    child = ok(two.call(lead, "issue_sub_token", {**base, "repos": ["lib-a?"]}, repo="app"))
    assert refusal(two.engine.offer(child["token"], repo="app"))["error"] == (
        "repo_outside_scope")
    # Without repos the helper keeps the lead's repositories.
    kept = ok(two.call(lead, "issue_sub_token", base, repo="app"))["token"]
    assert two.engine.offer(kept, repo="app")["ok"] is True
    assert refusal(two.engine.offer(kept, repo="lib"))["error"] == "repo_outside_scope"


def test_a_one_repository_token_delegates_only_that_repository(world: World) -> None:
    """Threat: a token without repos (good on a one-repository engine) delegating a helper
    token for other names, as a stepping stone."""
    lead = world.mint(agent="lead", ops="read,sub-token:issue", delegable=True)
    with Engine(world.home, world.repo) as engine:
        base = {"agent": "lead.helper", "ops": ["read"], "paths": ["src/**"],
                "ttl_seconds": 60}
        listed = engine.offer(lead).get("catalog_hash")
        asked = engine.invoke(lead, "issue_sub_token", {**base, "repos": ["*"]}, session="s",
                              offered_catalog_hash=listed)
        assert error(asked) == "delegation_widens"
        fine = engine.invoke(lead, "issue_sub_token", {**base, "repos": ["repo"]}, session="s",
                             offered_catalog_hash=listed)
        assert ok(fine)["agent"] == "lead.helper"


def test_no_repository_named_is_refused_on_a_two_repository_engine(two: Two) -> None:
    token = two.mint(["*"])
    assert refusal(two.engine.offer(token))["error"] == "repo_required"
    answer = two.engine.invoke(token, "status", {}, session="s1")
    assert error(answer) == "repo_required"


def test_the_call_log_names_each_calls_repository(two: Two) -> None:
    token = two.mint(["app"])
    ok(two.call(token, "status", repo="app"))
    two.call(token, "status", repo="lib")
    two.engine.invoke(token, "status", {}, session="s1", repo="..")
    two.engine.invoke("chit_garbage", "status", {}, session="s1", repo="lib")
    two.engine.invoke(token, "status", {}, session="s1")
    assert two.engine.flush_log()
    entries = [e for e in admin.call_log_entries(two.home) if e["tool"] == "status"]
    assert [(e.get("repo"), e["code"]) for e in entries] == [
        ("app", None), ("lib", "repo_outside_scope"), ("..", "invalid_argument"),
        ("lib", "token_malformed"), (None, "repo_required")]
    keys = signkeys.load_public_keys(admin.export_public(two.home))
    assert admin.verify_call_log(two.home, keys)["findings"] == []


def test_one_repository_engines_record_their_repository(world: World) -> None:
    with Engine(world.home, world.repo) as engine:
        token = world.mint()
        engine.invoke(token, "status", {}, session="s1")
        assert engine.flush_log()
    (entry,) = list(admin.call_log_entries(world.home))
    assert entry["repo"] == "repo"


# --- configuration ---------------------------------------------------------------


def test_names_come_from_folders_without_git(tmp_path: Path) -> None:
    assert name_for_path(tmp_path / "app.git") == "app"
    assert name_for_path(tmp_path / "app") == "app"
    assert name_for_path(tmp_path / "app" / ".git") == "app"
    with pytest.raises(ConfigurationError, match="NAME=PATH"):
        name_for_path(tmp_path / "my repo")


def test_repo_options(tmp_path: Path) -> None:
    spec = parse_repo_option(f"docs={tmp_path}/handbook.git")
    assert (spec.name, spec.path) == ("docs", tmp_path / "handbook.git")
    # An "=" after a "/" is part of the path; such a folder's name is no name.
    assert parse_repo_option(f"y={tmp_path}/x=y").path == tmp_path / "x=y"
    with pytest.raises(ConfigurationError, match="NAME=PATH"):
        parse_repo_option(f"{tmp_path}/x=y")
    for bad in ["a b=/srv/a", "=/srv/a", "x=", ".hidden=/srv/a", "a*=/srv/a",
                "x\x00=/srv/a", "-x=/srv/a", "a" * 65 + "=/srv/a"]:
        with pytest.raises(ConfigurationError):
            parse_repo_option(bad)


@pytest.mark.parametrize("names", [("app", "app"), ("app", "App"), ("Lib", "LIB")])
def test_repeated_names_are_refused(world: World, tmp_path: Path, names: tuple[str, str]) -> None:
    """Threat: two repositories one name could stand for (a URL, a token glob)."""
    create_repository(tmp_path / "one", FILES)
    create_repository(tmp_path / "two", FILES)
    specs = [RepoSpec(names[0], tmp_path / "one"), RepoSpec(names[1], tmp_path / "two")]
    with pytest.raises(ConfigurationError, match="names must differ"):
        Engine(world.home, specs)


def test_one_repository_under_two_names_is_refused(world: World, tmp_path: Path) -> None:
    """Threat: one git repository served under two names, so a token for one name acts on
    the lanes of the other."""
    create_repository(tmp_path / "one", FILES)
    (tmp_path / "link").symlink_to(tmp_path / "one")
    for other in (tmp_path / "one", tmp_path / "link", tmp_path / "one" / ".git"):
        with pytest.raises(ConfigurationError, match="same path|one git repository"):
            Engine(world.home, [RepoSpec("a", tmp_path / "one"), RepoSpec("b", other)])


def test_invalid_specs_are_refused(tmp_path: Path) -> None:
    for name in ("", ".", "..", "a/b", "a\x00", "a b", "*", "-a", ".git", "x" * 65):
        with pytest.raises(ConfigurationError):
            RepoSpec(name, tmp_path)
    for base in ("", "-x", "refs/heads/x", "a..b", "a b", "x.lock", "a~1", "HEAD@{1}", "/x"):
        with pytest.raises(ConfigurationError, match="base"):
            RepoSpec("a", tmp_path, base=base)
    for remote in ("-oProxyCommand=x", "ext::sh -c x", "fd::7", "https://u:pw@host/r.git",
                   "a\nb", "a\x00b", ""):
        with pytest.raises(ConfigurationError):
            RepoSpec("a", tmp_path, remote=remote)
    kept = RepoSpec("a", tmp_path, base="release/2026", remote="ssh://git@host:22/org/a.git")
    assert (kept.base, kept.remote) == ("release/2026", "ssh://git@host:22/org/a.git")


def test_engine_toml_repo_tables(world: World, tmp_path: Path) -> None:
    create_repository(tmp_path / "app", FILES)
    (world.home / "engine.toml").write_text(
        '[[repo]]\nname = "web"\npath = "%s"\nbase = "main"\n'
        '[[repo]]\npath = "%s"\nremote = "/srv/mirror.git"\n'
        % (tmp_path / "app", tmp_path / "lib.git"))
    specs = repos_from_engine_toml(world.home)
    assert [(s.name, s.path, s.base, s.remote) for s in specs] == [
        ("web", tmp_path / "app", "main", None),
        ("lib", tmp_path / "lib.git", None, "/srv/mirror.git")]
    # --repo options win over the tables.
    assert [s.name for s in resolve_repo_specs(world.home, [str(tmp_path / "app")])] == ["app"]
    for bad in ['[[repo]]\nname = "x"\n', '[[repo]]\npath = "a"\nowner = "me"\n',
                '[[repo]]\npath = 1\n', 'repo = "x"\n', '[[repo]]\npath = "a"\nname = "a/b"\n',
                '[[repo]]\npath = "a"\n[[repo]]\npath = "b/a"\n']:
        (world.home / "engine.toml").write_text(bad)
        with pytest.raises(ConfigurationError):
            resolve_repo_specs(world.home, None)
    (world.home / "engine.toml").write_text("")
    with pytest.raises(ConfigurationError, match="no repository"):
        resolve_repo_specs(world.home, None)


def test_an_engine_that_cannot_open_a_repository_names_it(world: World, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="repository ghost"):
        Engine(world.home, [RepoSpec("ghost", tmp_path / "nothing-here")])


def test_exchange_mappings_can_name_repositories(world: World) -> None:
    import policy

    text = (world.home / "policy.toml").read_text()
    rules = policy.load(text + '''
[[issuers]]
issuer = "https://idp.example"
audience = "chit"
algorithms = ["RS256"]
jwks_file = "idp.jwks"

[[issuers.mappings]]
agent = "ci"
ops = ["read"]
paths = ["src/**"]
repos = ["app", "lib-*"]
max_ttl_seconds = 60
''')
    assert rules.issuers[0].mappings[0].repos == ("app", "lib-*")
    for bad in ('["a/b"]', '["**"]', "[]", '["a", "a"]'):
        with pytest.raises(policy.PolicyError):
            policy.load(text + f'''
[[issuers]]
issuer = "https://idp.example"
audience = "chit"
algorithms = ["RS256"]
jwks_file = "idp.jwks"

[[issuers.mappings]]
agent = "ci"
ops = ["read"]
paths = ["src/**"]
repos = {bad}
max_ttl_seconds = 60
''')
    json.dumps(rules.model_dump(mode="json"))


def test_names_one_identity_apart_are_refused_together(tmp_path: Path) -> None:
    """Threat: ``my-repo`` and ``My_Repo`` served side by side, one taken for the other."""
    from engine.service.repos import RepoSpec, check_specs

    with pytest.raises(ConfigurationError, match="names must differ"):
        check_specs([RepoSpec("my-repo", tmp_path / "a"), RepoSpec("My_Repo", tmp_path / "b")])
