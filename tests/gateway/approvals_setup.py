"""A home whose policy holds commits under ``src/`` for the operator ``ops``'s approval."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import World

OPERATOR = "ops"
RULE = (
    "[[approval]]\ntools = ['commit']\npaths = ['src/**']\n"
    f"approvers = ['{OPERATOR}']\nttl = 600\nreason = 'src needs a review'\n"
)


def chit(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``chit --home HOME ARGS`` as an operator would; fail the test if it fails."""
    done = subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def require_approval(world: World, folder: Path) -> Path:
    """Register ``ops`` (its key written under ``folder``), then hold commits for it.

    Returns:
        The operator's private key file.
    """
    key = folder / f"{OPERATOR}.key"
    chit(world, "operators", "add", OPERATOR, "--key-out", str(key))
    policy = world.home / "policy.toml"
    policy.write_text(policy.read_text(encoding="utf-8") + "\n" + RULE, encoding="utf-8")
    return key


def decide(world: World, key: Path, approval_id: str, *, deny: bool = False,
           note: str = "") -> None:
    """``chit approve|deny ID --as ops --key KEY [--note NOTE]``."""
    chit(world, "deny" if deny else "approve", approval_id, "--as", OPERATOR,
         "--key", str(key), *(["--note", note] if note else []))
