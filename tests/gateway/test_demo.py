"""``chit demo``, the README's first command: it runs end to end on the embedded default.

A real subprocess: the installed starlette package as the repository, the
official MCP client over stdio, delegation, commits, the audit and the call log.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_runs_every_step(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--home", str(tmp_path / "home"), "demo"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
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
