"""provenance_graph and ``chit audit graph``: real engine commits, real signatures."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pygit2
import pytest

from engine import git as vcs
from engine.audit import graph
from engine.auth import signkeys
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import Caller, land, ok

call = Caller(session=lambda token: "read-" + token[-12:]).call  # one session per token


@pytest.fixture
def story(world: World) -> dict[str, Any]:
    """A lead agent commits in src/api and src/ui, delegates src/api to a helper
    that commits too; an unrelated agent commits in docs."""
    engine = Engine(world.home, world.repo)
    lead = world.mint(agent="lead", ops="read,write,commit,sub-token:issue",
                      paths="src/**,docs/**", ttl=3600, delegable=True)
    c1 = land(engine, lead, {"src/api/a.py": "a\n", "src/ui/b.py": "b\n"}, session="lead-s1",
              message="lead one", list_each=True)
    c2 = land(engine, lead, {"src/ui/c.py": "c\n"}, session="lead-s1", message="lead two",
              list_each=True)
    issued = ok(call(engine, lead, "issue_sub_token",
                     {"agent": "lead.helper", "ops": ["read", "write", "commit"],
                      "paths": ["src/api/**"], "ttl_seconds": 600}, "lead-s2"))
    helper = str(issued["token"])
    c3 = land(engine, helper, {"src/api/d.py": "d\n"}, session="helper-s1", message="helper one",
              list_each=True)
    other = world.mint(agent="docs", paths="docs/**")
    c4 = land(engine, other, {"docs/guide.md": "new\n"}, session="docs-s1", message="docs one",
              list_each=True)
    lead_id = ok(call(engine, lead, "effective_scope"))["token_id"]
    return {"engine": engine, "lead": lead, "helper": helper, "other": other,
            "c1": c1, "c2": c2, "c3": c3, "c4": c4, "lead_id": lead_id,
            "helper_id": issued["token_id"]}


def kinds(found: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for node in found["nodes"]:
        out.setdefault(node["kind"], set()).add(node["id"].split(":", 1)[1])
    return out


def test_graph_of_a_token_covers_its_delegations(story: dict[str, Any]) -> None:
    """A token id names its own commits and those of every token delegated from it."""
    found = ok(call(story["engine"], story["lead"], "provenance_graph",
                    {"handle": story["lead_id"]}))
    k = kinds(found)
    assert k["commit"] == {story["c1"], story["c2"], story["c3"]}
    assert k["token"] == {story["lead_id"], story["helper_id"]}
    assert k["session"] == {"lead-s1", "helper-s1"}
    assert k["file"] == {"src/api/a.py", "src/ui/b.py", "src/ui/c.py", "src/api/d.py"}
    edges = {(e["source"], e["target"], e["kind"]) for e in found["edges"]}
    assert (f"token:{story['lead_id']}", f"token:{story['helper_id']}", "delegated") in edges
    assert (f"token:{story['helper_id']}", "session:helper-s1", "opened") in edges
    assert ("session:lead-s1", f"commit:{story['c2']}", "made") in edges
    assert (f"commit:{story['c2']}", f"commit:{story['c1']}", "parent") in edges
    assert (f"commit:{story['c3']}", "file:src/api/d.py", "changed") in edges
    assert found["pruned"] == 0
    # The unrelated agent's commit is not part of this derivation.
    assert story["c4"] not in k["commit"]


def test_graph_is_pruned_to_the_callers_scope(story: dict[str, Any]) -> None:
    """Threat: provenance_graph reveals paths (or commits touching only paths)
    outside the caller's scope."""
    found = ok(call(story["engine"], story["helper"], "provenance_graph",
                    {"handle": story["lead_id"]}))
    k = kinds(found)
    assert k["file"] == {"src/api/a.py", "src/api/d.py"}
    # c2 changed only src/ui/c.py: the helper may not see it, so the commit is gone too.
    assert k["commit"] == {story["c1"], story["c3"]}
    assert found["pruned"] == 3  # src/ui/b.py, src/ui/c.py and commit c2
    text = json.dumps(found)
    assert "src/ui" not in text and story["c2"] not in text


def test_graph_by_commit_and_by_session(story: dict[str, Any]) -> None:
    engine = story["engine"]
    by_commit = ok(call(engine, story["lead"], "provenance_graph", {"handle": story["c3"][:10]}))
    assert kinds(by_commit)["commit"] == {story["c3"]}
    assert kinds(by_commit)["token"] == {story["lead_id"], story["helper_id"]}
    by_session = ok(call(engine, story["lead"], "provenance_graph", {"handle": "lead-s1"}))
    assert kinds(by_session)["commit"] == {story["c1"], story["c2"]}


def test_unknown_or_invisible_handles(story: dict[str, Any]) -> None:
    engine = story["engine"]
    for handle in ("no-such-session", "f" * 40, "0" * 32):
        answer = call(engine, story["lead"], "provenance_graph", {"handle": handle})
        assert answer["error"]["error"] == "not_found", handle
    # A commit or session wholly outside the caller's scope: the same answer as an
    # unknown handle, so the graph is no oracle for what exists out of scope.
    for handle in (story["c4"], "docs-s1"):
        hidden = call(engine, story["helper"], "provenance_graph", {"handle": handle})
        unknown = call(engine, story["helper"], "provenance_graph", {"handle": "no-such"})
        assert hidden["error"] == unknown["error"], handle
    for bad in ({"handle": ""}, {"handle": "x" * 300}, {"handle": 5}, {}):
        answer = call(engine, story["lead"], "provenance_graph", bad)
        assert answer["error"]["error"] == "invalid_argument", bad


def test_commits_with_forged_provenance_never_enter_the_graph(
    story: dict[str, Any], world: World
) -> None:
    """Threat: a commit pushed onto a lane with copied trailers shows up in the
    graph as if the engine had made it."""
    repo = pygit2.Repository(str(world.repo))
    ref = vcs.lane_ref("lead")
    head = repo[repo.references[ref].target]
    sig = pygit2.Signature("lead", "lead@agents.chit.invalid", 1_800_000_000, 0)
    forged = repo.create_commit(ref, sig, sig, head.message, head.tree.id, [head.id])
    entries, unverified, truncated = graph.collect(
        vcs.Repository(world.repo),
        signkeys.load_public_keys(signkeys.export_public_keys(world.home)),
    )
    assert not truncated
    assert unverified == 1
    assert str(forged) not in {e.commit for e in entries}
    answer = call(story["engine"], story["lead"], "provenance_graph", {"handle": str(forged)})
    assert answer["error"]["error"] == "not_found"


def test_cli_audit_graph_formats(story: dict[str, Any], world: World, tmp_path: Any) -> None:
    public = tmp_path / "engine-keys.json"
    exported = subprocess.run([*world.cli(), "keys", "export-public", "--out", str(public)],
                              capture_output=True, text=True, check=False)
    assert exported.returncode == 0, exported.stderr
    assert "seed" not in public.read_text()

    def run(fmt: str, handle: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", "audit", "graph", handle, "--repo",
             str(world.repo), "--keys", str(public), "--format", fmt],
            capture_output=True, text=True, check=False,
        )

    as_json = run("json", story["lead_id"])
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert kinds(doc)["commit"] == {story["c1"], story["c2"], story["c3"]}
    assert doc["unverified"] == 0
    mermaid = run("mermaid", story["lead_id"]).stdout
    assert mermaid.startswith("flowchart LR\n") and "-->|delegated|" in mermaid
    assert mermaid.count("-->") == len(doc["edges"])
    dot = run("dot", story["lead_id"]).stdout
    assert dot.startswith("digraph provenance {") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(doc["edges"])
    missing = run("json", "nope")
    assert missing.returncode == 4 and "not_found" in missing.stderr  # not found


def test_renderers_escape_labels() -> None:
    """Threat: a label (a commit summary is agent-written) breaks out of its
    quoting and injects Mermaid or DOT syntax."""
    nasty = 'x"]; evil -> n0; click n0 "javascript:alert(1)" \\ \n'
    found = {"nodes": [{"id": "commit:1", "kind": "commit", "label": nasty}], "edges": []}
    mermaid = graph.to_mermaid(found)
    assert '"' not in mermaid.split('n0["', 1)[1].rsplit('"]', 1)[0]
    assert "\n" not in mermaid.strip().split("\n", 1)[1]
    dot = graph.to_dot(found)
    label = dot.split('label="', 1)[1].rsplit('", shape', 1)[0]
    assert all(label[i - 1] == "\\" for i, c in enumerate(label) if c == '"')
    assert len(dot.strip().splitlines()) == 4
