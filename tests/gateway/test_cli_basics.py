"""What a new user types first: ``chit``, ``chit --version``, ``chit --help``."""

from __future__ import annotations

import subprocess
import sys

from gateway import __version__

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
