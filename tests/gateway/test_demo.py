"""``chit demo``, the README's first command: it runs end to end on the embedded default.

A real subprocess: the installed starlette package as the repository, the
official MCP client over stdio, delegation, commits, the audit and the call log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_runs_every_step(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "demo"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "HOME": str(tmp_path), "CHIT_HOME": str(tmp_path / "unused")},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.rstrip().endswith("demo complete: every step behaved as expected")
    for step in range(1, 15):
        assert f"\n[{step}] " in out.stdout
    assert "verified: 3/3 commits" in out.stdout
    # The protected commit waited, an operator approved it, the audit names the approver.
    assert "input required (approval_required)" in out.stdout
    assert "approved by ops-lead" in out.stdout
    assert "by ops-lead at " in out.stdout and "-->|approved|" in out.stdout
    assert "chit/call-log/" in out.stdout and "in the tree of" in out.stdout
    # It speaks to its user: scopes as the intersection they grant, nothing unfinished.
    assert "later work" not in out.stdout
    assert "paths {src/starlette/middleware/**} ∩ {src/starlette/middleware/gzip.py}" in (
        out.stdout)
    assert not (tmp_path / "unused").exists() and not (tmp_path / ".chit").exists()


def test_the_demo_refuses_a_home_it_would_not_use(tmp_path: Path) -> None:
    for args in (["--home", str(tmp_path / "h"), "demo"], ["--state", "sqlite:///x.db", "demo"]):
        out = subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 2
        assert "temporary home" in out.stderr and out.stdout == ""
    assert not (tmp_path / "h").exists()
