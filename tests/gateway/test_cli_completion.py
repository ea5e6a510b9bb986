"""``chit completion``: the scripts complete this version's commands in a real shell."""

from __future__ import annotations

import subprocess
import sys

CHIT = [sys.executable, "-m", "gateway.cli"]


def _script(shell: str) -> str:
    done = subprocess.run([*CHIT, "completion", shell], capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` after ``chit``."""
    array = " ".join(f"'{w}'" for w in ("chit", *words))
    program = f"""{script}
COMP_WORDS=({array}); COMP_CWORD={len(words)}; _chit; printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True,
                          text=True, check=True, timeout=60)
    return done.stdout.split()


def test_bash_completes_commands_subcommands_and_options() -> None:
    script = _script("bash")
    assert _complete(script, "au") == ["audit"]
    assert set(_complete(script, "")) >= {"mint", "revoke", "keys", "mcp", "index", "doctor"}
    assert _complete(script, "keys", "ret") == ["retire"]
    assert set(_complete(script, "keys", "r")) == {"rotate", "retire"}
    assert "--delegable" in _complete(script, "mint", "--de")
    assert "--json" in _complete(script, "audit", "verify", "--j")
    # Options of one command are not offered for another.
    assert "--delegable" not in _complete(script, "revoke", "--")


def test_zsh_gets_the_same_function_through_bashcompinit() -> None:
    zsh, bash = _script("zsh"), _script("bash")
    assert zsh.startswith("#compdef chit\n") and "bashcompinit" in zsh
    assert zsh.split("\n", 2)[2] == bash.split("\n", 1)[1]
    done = subprocess.run(["bash", "-n"], input=bash, text=True, capture_output=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
