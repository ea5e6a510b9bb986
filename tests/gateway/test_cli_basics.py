"""What a new user types first: ``chit``, ``chit --version``, ``chit --help``."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from gateway import __version__
from tests.conftest import World

CHIT = [sys.executable, "-m", "gateway.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CHIT, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_bare_chit_prints_the_help_and_succeeds() -> None:
    out = _run()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: chit")
    assert "Capability gateway for coding agents." in out.stdout
    assert "demo" in out.stdout and "doctor" in out.stdout
    assert out.stderr == ""
    assert out.stdout == _run("--help").stdout


def test_version_names_the_installed_distribution() -> None:
    out = _run("--version")
    assert out.returncode == 0
    assert out.stdout == f"chit {__version__}\n"
    assert __version__ != "0.0.0"  # the installed package's metadata was found


def test_an_unknown_command_is_a_usage_error() -> None:
    out = _run("no-such-command")
    assert out.returncode == 2
    assert "invalid choice" in out.stderr and out.stdout == ""


def test_errors_exit_by_cause_and_json_covers_them(world: World, tmp_path: Path) -> None:
    """Scripts tell usage, refusal, not found and internal apart, and read one stream."""
    def chit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*world.cli(), *args], capture_output=True, text=True,
                              check=False, timeout=120)

    usage = chit("mint", "--agent", "a", "--ops", "read", "--paths", "**", "--repos", "r",
                 "--ttl", "soon", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout)["error"] == "usage"
    assert "durations" in json.loads(usage.stdout)["message"]
    assert chit("mint", "--nonsense").returncode == 2  # argparse's own
    graph = chit("audit", "graph", "nope", "--repo", str(world.repo))
    assert graph.returncode == 4 and graph.stderr.startswith("chit: not_found: ")
    assert not graph.stdout
    unknown = chit("approvals", "show", "apr_" + "b" * 26, "--json")
    assert unknown.returncode == 4
    assert json.loads(unknown.stdout)["error"] == "unknown_approval"
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute("CREATE TABLE chit_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO chit_schema VALUES (99)")
    internal = chit("revoke", "a" * 32, "--state", f"sqlite://{newer}", "--json")
    assert internal.returncode == 5, internal.stderr
    assert json.loads(internal.stdout)["error"] == "store_unavailable"
    for done in (usage, unknown, internal):  # with --json, nothing on stderr
        assert not done.stderr.strip()

