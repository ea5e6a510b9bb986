"""The operator's home and what it serves: find it, create it, check it is usable.

``chit init`` creates the home (keyring and default policy), every other
operator command first checks it holds a keyring, ``chit init --repo`` and
``chit audit graph`` open the repository (any base branch), ``chit policy check`` checks a policy
file. The home's layout is in keys/README.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import policy
from engine import git
from engine.admin.state import state_store
from engine.auth.rootkeys import create_keyring
from engine.auth.sealkeys import create_sealing_key
from engine.auth.signkeys import create_signing_key
from engine.errors import ConfigurationError
from engine.service.approvals import unknown_approvers
from engine.service.policyfile import check_file, load_policy

__all__ = ["check_policy", "ensure_home", "init_home", "open_repository", "resolve_home"]


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    """Return ``home``, else ``$CHIT_HOME``, else ``~/.chit`` (keys/README.md)."""
    if home:
        return Path(home)
    env = os.environ.get("CHIT_HOME")
    return Path(env) if env else Path.home() / ".chit"


def init_home(home: str | os.PathLike[str]) -> dict[str, Any]:
    """Create the keyring (root, signing and sealing keys, 0700/0600) and the default policy.

    Keeps whatever exists, and adds only what is missing (an older home gets
    its Ed25519 signing key and its sealing key this way).

    Args:
        home: The chit home directory.

    Returns:
        ``{"home", "key_id", "signing_key_id", "sealing_key_id", "policy",
        "created_policy"}``.

    Raises:
        ConfigurationError: If an existing keyring or policy is unusable.
    """
    key = create_keyring(home)
    signing = create_signing_key(home)
    sealing = create_sealing_key(home)
    policy_path = Path(home) / "policy.toml"
    created = False
    if not policy_path.exists():
        fd = os.open(policy_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(policy.DEFAULT_POLICY_TOML)
        created = True
    load_policy(home)
    return {
        "home": str(home),
        "key_id": key.key_id,
        "signing_key_id": signing.key_id,
        "sealing_key_id": sealing.key_id,
        "policy": str(policy_path),
        "created_policy": created,
    }


def ensure_home(home: Path) -> None:
    """Raise :class:`ConfigurationError` unless ``home`` holds a keyring."""
    if not (home / "keys" / "root").is_dir():
        raise ConfigurationError(f"no chit home at {home}; run `chit init --home {home}`")


def open_repository(path: str | os.PathLike[str], *, base: str | None = None) -> git.Repository:
    """Open the repository at ``path`` as an engine would serve it (without its remote).

    Args:
        path: The repository's git directory or working directory.
        base: Its base branch; default the branch its ``HEAD`` names.

    Returns:
        The repository, for :func:`engine.admin.provenance_graph` and
        ``chit init --repo`` (which shows :attr:`~engine.git.Repository.base`).

    Raises:
        ConfigurationError: If ``path`` is not a git repository or its base
            branch (given, or ``HEAD``'s) has no commit.
    """
    return git.Repository(path, base=base)


def check_policy(
    path: str | os.PathLike[str],
    home: str | os.PathLike[str] | None = None,
    *,
    state: str | None = None,
) -> dict[str, object]:
    """Check a policy file for ``chit policy check`` (docs/policy.md).

    With ``home``, a policy with ``[[approval]]`` tables is also checked
    against the operators of the home's state store, as an engine checks it
    when it loads the policy: an approver or group no operator is, is an error.

    Args:
        path: The file to check.
        home: The chit home whose store holds the operators, or ``None``.
        state: A state URL (``--state``); ``None``: the home's.

    Returns:
        ``{"ok", "file", "errors": [{"location", "line", "message"}],
        "policy_hash", "rules", "rate_limits"}``; ``policy_hash`` (and the counts)
        only when ``ok``: the ``chit-det/1`` hash its commits would record.

    Raises:
        OSError: If the file cannot be read.
    """
    report = check_file(path)
    if home is None or not report["ok"]:
        return report
    text = Path(path).read_text(encoding="utf-8")
    loaded = policy.load(text)
    if not loaded.approval:
        return report
    try:
        with state_store(home, state, must_exist=True) as store:
            operators = store.operators()
    except ConfigurationError:
        operators = []  # no store yet: it knows no operator
    problems = unknown_approvers(loaded, operators)
    if not problems:
        return report
    errors = [{"location": where, "line": policy.locate(text, where), "message": message}
              for where, message in problems]
    return {"ok": False, "file": report["file"], "errors": errors}
