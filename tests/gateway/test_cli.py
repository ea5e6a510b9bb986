"""The `chit` CLI as operators and auditors use it: real subprocesses, real keys."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pygit2
import pytest

from engine.auth import token as tokens
from engine.auth.rootkeys import Keyring
from engine.service import Engine
from tests.conftest import World
from tests.engine.engine_calls import call, land


def run(world: World, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*world.cli(), *args], capture_output=True, text=True, input=stdin, timeout=60, check=False
    )


def test_init_creates_private_keyring_and_policy(tmp_path: Path) -> None:
    """Threat: key files readable by other local users."""
    home = tmp_path / "h"
    world = World(home=home, repo=tmp_path, main_id="")
    out = run(world, "init", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    key_file = home / "keys" / "root" / f"{info['key_id']}.json"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for d in (home, home / "keys", home / "keys" / "root"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert (home / "policy.toml").exists()
    # Idempotent: a second init keeps the key.
    again = json.loads(run(world, "init", "--json").stdout)
    assert again["key_id"] == info["key_id"] and not again["created_policy"]


def test_engine_refuses_group_readable_key(world: World) -> None:
    key_file = next((world.home / "keys" / "root").glob("*.json"))
    key_file.chmod(0o640)
    out = run(world, "mint", "--agent", "a", "--ops", "read", "--paths", "**", "--repos", "repo",
              "--ttl", "5m")
    assert out.returncode == 2
    assert "chmod 600" in out.stderr
    assert "secret" not in out.stderr


def test_mint_and_inspect(world: World) -> None:
    out = run(
        world,
        "mint",
        "--agent",
        "bot-1",
        "--ops",
        "read,write",
        "--paths",
        "src/**",
        "docs/**",
        "--repos",
        "app",
        "app-*",
        "--ttl",
        "2h",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    minted = json.loads(out.stdout)
    text = minted["token"]
    assert text.startswith("chit_")
    shown = run(world, "inspect", "-", "--json", stdin=text)
    assert shown.returncode == 0
    info = json.loads(shown.stdout)
    assert info["id"] == minted["token_id"] and info["verified"] is False
    caveats = dict((k, v) for k, v in info["blocks"][0]["caveats"])
    assert caveats["ops"] == ["read", "write"] and caveats["paths"] == ["src/**", "docs/**"]
    assert caveats["repos"] == ["app", "app-*"]
    tag = tokens.parse(text)._tag
    assert tag.hex() not in shown.stdout and text not in shown.stdout
    plain = run(world, "inspect", text)
    assert "unverified" in plain.stdout and text not in plain.stdout
    assert '["repos", ["app", "app-*"]]' in plain.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "repo", "--ttl", "0"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "repo", "--ttl", "forever"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "repo", "--ttl", "30d"],
        ["--agent", "a", "--ops", "admin", "--paths", "**", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "../x", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "Bad/Name", "--ops", "read", "--paths", "**", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "src/a**", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "a", "--ops", "", "--paths", "**", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read,sub-token:issue", "--paths", "**", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", ".git/**", "--repos", "repo", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "repo", "--ttl", "\u0665m"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--ttl", "5m"],  # no --repos
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "..", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "a/b", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "a**", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", "[ab]", "--ttl", "5m"],
        ["--agent", "a", "--ops", "read", "--paths", "**", "--repos", ",", "--ttl", "5m"],
    ],
)
def test_mint_refuses_bad_arguments(world: World, args: list[str]) -> None:
    out = run(world, "mint", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert "Traceback" not in out.stderr


def test_inspect_garbage_is_a_clean_error(world: World) -> None:
    out = run(world, "inspect", "chit_garbage!!")
    assert out.returncode == 2
    assert "token_malformed" in out.stderr and "Traceback" not in out.stderr


def _land_commit(world: World) -> str:
    engine = Engine(world.home, world.repo)
    token = world.mint()
    return land(engine, token, "y\n")


def _plain_commit(world: World, lane: str, message: str) -> str:
    repo = pygit2.Repository(str(world.repo))
    parent = repo.references[f"refs/heads/{lane}"].target
    sig = pygit2.Signature("someone", "x@example.com", 1_800_000_000, 0)
    tree = repo[parent].tree.id
    oid = repo.create_commit(f"refs/heads/{lane}", sig, sig, message, tree, [parent])
    return str(oid)


def test_audit_verify_passes_then_catches_tampering(world: World) -> None:
    good = _land_commit(world)
    ok = run(world, "audit", "verify", "--repo", str(world.repo), "--json")
    assert ok.returncode == 0, ok.stdout
    report = json.loads(ok.stdout)
    assert report["ok"] and [c["commit"] for c in report["commits"]] == [good]

    # Threat: a commit pushed straight onto a lane with plain git, no provenance.
    bare = _plain_commit(world, "agent/alice", "sneaky change\n")
    # Threat: forged trailers naming a provenance record that was never signed.
    forged = _plain_commit(
        world,
        "agent/alice",
        "forged\n\nChit-Agent: alice\nChit-Session: s\nChit-Token-Id: 00\n"
        "Chit-Catalog-Hash: sha256:" + "ab" * 32 + "\nChit-Catalog-Encoding: chit-catalog/1\n"
        "Chit-Provenance: sha256:" + "cd" * 32 + "\n",
    )
    # Threat: another agent's trailers on this lane.
    good_msg = pygit2.Repository(str(world.repo))[good].message
    stolen = _plain_commit(
        world, "agent/alice", good_msg.replace("Chit-Agent: alice", "Chit-Agent: bob")
    )
    bad = run(world, "audit", "verify", "--repo", str(world.repo), "agent/alice", "--json")
    assert bad.returncode == 1
    findings = {(f["commit"], f["check"]) for f in json.loads(bad.stdout)["findings"]}
    assert (bare, "trailers") in findings
    assert (forged, "record_missing") in findings
    assert (stolen, "lane") in findings
    assert not any(c == good for c, _ in findings)
    text = run(world, "audit", "verify", "--repo", str(world.repo))
    assert text.returncode == 1 and "FAILED" in text.stdout


def test_audit_verify_catches_a_tampered_catalog_blob(world: World) -> None:
    """Threat: rewriting the stored catalog to hide which tools were offered."""
    _land_commit(world)
    repo = pygit2.Repository(str(world.repo))
    store = repo.references["refs/chit/catalogs"]
    tree = repo[store.target].tree
    builder = repo.TreeBuilder(tree)
    for entry in tree:
        builder.insert(entry.name, repo.create_blob(b"\xa0"), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("x", "x@example.com", 1_800_000_000, 0)
    repo.create_commit("refs/chit/catalogs", sig, sig, "tamper", builder.write(), [store.target])
    out = run(world, "audit", "verify", "--repo", str(world.repo), "--json")
    assert out.returncode == 1
    assert {f["check"] for f in json.loads(out.stdout)["findings"]} == {"catalog_hash"}


def test_audit_unknown_lane_and_missing_repo(world: World, tmp_path: Path) -> None:
    out = run(world, "audit", "verify", "--repo", str(world.repo), "agent/nobody")
    assert out.returncode == 1
    missing = run(world, "audit", "verify", "--repo", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_keyring_repr_hides_secrets(world: World) -> None:
    ring = Keyring(world.home)
    key = ring.signing_key()
    assert key.secret.hex() not in repr(key) and key.secret.hex() not in repr(ring)


def test_inspect_escapes_untrusted_text(world: World) -> None:
    """Threat: terminal control sequences smuggled in a token's fields."""
    import base64
    import secrets

    from engine.auth import cbor

    block = cbor.encode(
        {
            "id": secrets.token_bytes(16),
            "agent": "x\x1b]0;pwned\x07",
            "caveats": [["note", "\x1b[2J"]],
        }
    )
    env = {"v": 1, "alg": "hmac-sha256", "kid": "k\x1b[31m", "blocks": [block], "tag": bytes(32)}
    text = "chit_" + base64.urlsafe_b64encode(cbor.encode(env)).rstrip(b"=").decode()
    out = run(world, "inspect", text)
    assert out.returncode == 0
    assert "\x1b" not in out.stdout and "\\u001b" in out.stdout


def test_mcp_token_file_errors_are_clean(world: World, tmp_path: Path) -> None:
    bad = tmp_path / "tok"
    bad.write_bytes(b"\xff\xfe not a token")
    out = run(world, "mcp", "--repo", str(world.repo), "--token-file", str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    big = tmp_path / "big"
    big.write_bytes(b"chit_" + b"A" * 100_000)
    out = run(world, "mcp", "--repo", str(world.repo), "--token-file", str(big))
    assert out.returncode == 2 and "too large" in out.stderr


def test_audit_flags_refs_no_lane_can_be(world: World) -> None:
    """Threat: hiding commits on branches the audit would not enumerate."""
    repo = pygit2.Repository(str(world.repo))
    main = repo.references["refs/heads/main"].target
    repo.references.create("refs/heads/agent/n/m", main)
    out = run(world, "audit", "verify", "--repo", str(world.repo), "--json")
    assert out.returncode == 1
    reasons = [f["reason"] for f in json.loads(out.stdout)["findings"]]
    assert any("agent/n/m" in r for r in reasons)


def test_audit_survives_odd_refs_and_flags_them(world: World) -> None:
    """Threat: refs crafted to crash or sidestep the audit."""
    repo = pygit2.Repository(str(world.repo))
    main = repo.references["refs/heads/main"].target
    repo.references.create("refs/heads/agent/Evil.Lane", main)
    repo.references.create("refs/heads/agent/tree", repo[main].tree.id)
    repo.references.create("refs/heads/agent/sym", "refs/heads/main")
    out = run(world, "audit", "verify", "--repo", str(world.repo), "--json")
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    reasons = " ".join(f["reason"] for f in json.loads(out.stdout)["findings"])
    assert "Evil.Lane" in reasons and "agent/tree" in reasons
    plain = run(world, "audit", "verify", "--repo", str(world.repo))
    assert plain.returncode == 1 and "findings" in plain.stdout


def test_mint_out_writes_a_private_file(world: World, tmp_path: Path) -> None:
    """Threat: a token file other local users can read."""
    out_file = tmp_path / "bot.token"
    args = ["mint", "--agent", "bot", "--ops", "read", "--paths", "**", "--repos", "repo",
            "--ttl", "5m"]
    out = run(world, *args, "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600
    assert out_file.read_text().startswith("chit_") and "chit_" not in out.stdout
    again = run(world, *args, "--out", str(out_file))
    assert again.returncode == 2  # never overwrites


def test_attenuate_offline_never_widens(world: World) -> None:
    token = world.mint(ops="read,write", paths="src/**")
    out = run(world, "attenuate", "-", "--ops", "read,commit", "--paths", "**", "--ttl", "1d",
              "--json", stdin=token)
    assert out.returncode == 0, out.stderr
    narrowed = json.loads(out.stdout)
    assert narrowed["blocks"] == 2
    engine = Engine(world.home, world.repo)
    granted = engine.offer(narrowed["token"])
    names = {t["name"] for t in granted["tools"]}
    assert "write_file" not in names and "commit" not in names and "read_file" in names
    scope = engine.invoke(narrowed["token"], "effective_scope", {}, session="a",
                          offered_catalog_hash=granted["catalog_hash"])["result"]
    original = call(engine, token, "effective_scope", {}, session="b")["result"]
    assert scope["expires_at"] == original["expires_at"]  # --ttl 1d cannot extend it
    assert scope["path_scopes"] == [["src/**"], ["**"]]
    nothing = run(world, "attenuate", token)
    assert nothing.returncode == 2 and "nothing to attenuate" in nothing.stderr


def test_revoke_and_keys_commands(world: World) -> None:
    token = world.mint()
    token_id = tokens.parse(token).unverified_blocks()[0]["id"]
    engine = Engine(world.home, world.repo)
    assert engine.offer(token)["ok"]
    out = run(world, "revoke", token_id, "--reason", "leaked")
    assert out.returncode == 0 and "revoked" in out.stdout
    assert engine.offer(token)["error"]["error"] == "token_revoked"
    assert run(world, "revoke", "not-an-id").returncode == 2

    listed = json.loads(run(world, "keys", "list", "--json").stdout)
    assert [k["kind"] for k in listed] == ["root", "signing", "sealing"]
    assert all(k["signing"] for k in listed)
    assert "secret" not in json.dumps(listed) and "seed" not in json.dumps(listed)
    rotated = json.loads(run(world, "keys", "rotate", "--json").stdout)
    listed = [k for k in json.loads(run(world, "keys", "list", "--json").stdout)
              if k["kind"] == "root"]
    assert [k["kid"] for k in listed if k["signing"]] == [rotated["kid"]]
    old = listed[-1]["kid"]
    survivor = world.mint()  # signed by the new key
    assert tokens.parse(survivor).key_id == rotated["kid"]
    retired = run(world, "keys", "retire", old)
    assert retired.returncode == 0
    assert engine.offer(survivor)["ok"]
    last = run(world, "keys", "retire", rotated["kid"])
    assert last.returncode == 2 and "last active key" in last.stderr
    for path in (world.home / "keys" / "root").glob("*.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_export_public_after_signing_rotation(world: World, tmp_path: Path) -> None:
    """Threat: an export that leaks the signing seed, overwrites a file, or drops a key
    old records need; a malformed keys file trusted as if it were one."""
    first = json.loads(run(world, "keys", "export-public").stdout)
    rotated = json.loads(run(world, "keys", "rotate", "--signing", "--json").stdout)
    assert rotated["kind"] == "signing" and rotated["signing"]
    out_file = tmp_path / "engine-keys.json"
    assert run(world, "keys", "export-public", "--out", str(out_file)).returncode == 0
    doc = json.loads(out_file.read_text())
    assert doc["format"] == "chit-engine-keys/1"
    assert [(k["kid"], k["status"]) for k in doc["keys"]] == [
        (rotated["kid"], "active"), (first["keys"][0]["kid"], "retired")]
    assert "seed" not in out_file.read_text()
    assert stat.S_IMODE(out_file.stat().st_mode) & ~0o644 == 0  # never writable by others
    assert run(world, "keys", "export-public", "--out", str(out_file)).returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "chit-engine-keys/1", "keys": [{"kid": "x"}]}))
    out = run(world, "audit", "verify", "--repo", str(world.repo), "--keys", str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_attenuate_narrows_repositories(world: World) -> None:
    """Threat: an attenuation used to reach a repository the token does not name."""
    token = world.mint(repos=["repo", "other-*"])
    out = run(world, "attenuate", "-", "--repos", "other-a", "--json", stdin=token)
    assert out.returncode == 0, out.stderr
    narrowed = json.loads(out.stdout)["token"]
    shown = json.loads(run(world, "inspect", "-", "--json", stdin=narrowed).stdout)
    assert [c for b in shown["blocks"] for c in b["caveats"] if c[0] == "repos"] == [
        ["repos", ["repo", "other-*"]], ["repos", ["other-a"]]]
    with Engine(world.home, world.repo) as engine:  # serves "repo" only
        assert engine.offer(token)["ok"] is True
        assert engine.offer(narrowed)["error"]["error"] == "repo_outside_scope"
    bad = run(world, "attenuate", "-", "--repos", "a/b", stdin=token)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
