"""`chit policy check`: every error with its line and field, exit 1 if any (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import policy
from engine.audit import provenance
from tests.conftest import World

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

BAD = """version = 1
default = "allow"
surprise = true
[limits]
file_bytes = 0
[[rules]]
effect = "deny"
tools = ["rad_file"]
agents = []
[[rules]]
effect = "allow"
"""


def run(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*world.cli(), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_check_reports_every_error_with_line_and_field_and_exits_1(
    world: World, tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(BAD)
    out = run(world, "policy", "check", str(path))
    assert out.returncode == 1, out
    lines = out.stdout.splitlines()
    assert lines == [
        f"{path}:3: surprise: unknown key",
        f"{path}:5: limits.file_bytes: Input should be greater than 0",
        f"{path}:8: rules[0].tools[0]: unknown tool 'rad_file'; known: "
        + ", ".join(sorted(policy.TOOL_OPERATIONS)),
        f"{path}:9: rules[0].agents: must not be empty; leave the key out to match everything",
    ]
    assert "invalid (4 errors)" in out.stderr


def test_check_json(world: World, tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('default = "allow"\n[[rules]]\neffect = "allow"\n')
    out = run(world, "policy", "check", str(path), "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout) == {
        "ok": False,
        "file": str(path),
        "errors": [
            {
                "location": "rules[0].effect",
                "line": 3,
                "message": 'an allow rule takes effect only with default = "deny" (everything '
                "not denied is already allowed); set default, or remove the rule",
            }
        ],
    }


def test_a_valid_policy_exits_0_with_the_hash_commits_will_record(world: World) -> None:
    for example in sorted(EXAMPLES.glob("*.toml")):
        out = run(world, "policy", "check", str(example), "--json")
        assert out.returncode == 0, out
        report = json.loads(out.stdout)
        loaded = policy.load(example.read_text(encoding="utf-8"))
        assert report["policy_hash"] == provenance.policy_hash(loaded)
        assert report["errors"] == [] and report["rules"] == len(loaded.rules)
    # Without FILE: the home's policy.
    out = run(world, "policy", "check")
    assert out.returncode == 0 and "valid (0 rules, 0 rate limits)" in out.stdout


def test_a_syntax_error_and_an_unreadable_file(world: World, tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("version = 1\n[limits\n")
    out = run(world, "policy", "check", str(path))
    assert out.returncode == 1 and out.stdout.startswith(f"{path}:2: toml: ")
    path.write_bytes(b"version = 1\n# \xff\n")
    out = run(world, "policy", "check", str(path))
    assert out.returncode == 1 and "file: not UTF-8" in out.stdout
    out = run(world, "policy", "check", str(tmp_path / "missing.toml"))
    assert out.returncode == 4 and "No such file" in out.stderr  # not found


def test_a_bad_issuer_setting_is_reported_with_its_line_and_field(
    world: World, tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[[issuers]]\nissuer = "https://ci.example.com"\naudience = "chit://acme"\n'
        'algorithms = ["RS256"]\njwks_file = "ci.jwks"\nrequire_jti = "yes"\n'
    )
    out = run(world, "policy", "check", str(path))
    assert out.returncode == 1, out
    assert out.stdout.splitlines() == [
        f"{path}:6: issuers[0].require_jti: Input should be a valid boolean"
    ]


def test_an_unknown_confirm_tool_is_reported_with_its_line(world: World, tmp_path: Path) -> None:
    """``[confirm]`` with a misspelt tool: the file is invalid, never half applied."""
    path = tmp_path / "policy.toml"
    path.write_text('version = 1\n[confirm]\ntools = ["commit", "delete"]\n')
    out = run(world, "policy", "check", str(path))
    assert out.returncode == 1, out
    assert out.stdout.splitlines() == [
        f"{path}:3: confirm.tools[1]: unknown tool 'delete'; known: "
        + ", ".join(sorted(policy.TOOL_OPERATIONS))
    ]
