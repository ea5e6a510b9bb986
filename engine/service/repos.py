"""Which repositories an engine serves, by name: ``[[repo]]`` tables and ``--repo`` options.

A :class:`RepoSpec` is one repository as the operator configured it; the
engine opens each (engine/service/served.py). ``chit engine serve --repo
PATH`` or ``--repo NAME=PATH`` (repeatable) names them on the command line,
else the ``[[repo]]`` tables of ``<home>/engine.toml`` do (docs/deployment.md,
"Several repositories"). Names follow :func:`engine.auth.reponames.validate_repo_name`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.auth.reponames import repo_identity, validate_repo_name
from engine.errors import ConfigurationError
from engine.limits import LIMITS
from engine.state import ENGINE_TOML, read_engine_toml

__all__ = [
    "RepoSpec",
    "check_specs",
    "name_for_path",
    "parse_repo_option",
    "repos_from_engine_toml",
    "resolve_repo_specs",
]

_TABLE_KEYS = frozenset({"name", "path", "base", "remote"})
_MAX_REMOTE_CHARS = 4096
_MAX_BASE_CHARS = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_IN_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


@dataclass(frozen=True)
class RepoSpec:
    """One repository an engine serves, as the operator configured it.

    Made only through validation: an invalid spec cannot exist.

    Attributes:
        name: The repository's name (:func:`engine.auth.reponames.validate_repo_name`).
        path: Its git directory or working directory.
        base: The branch lanes start from and merge against, or ``None`` (the
            repository's default). Validated as a git branch name.
        remote: The organisation's remote for lanes (any URL or path git
            accepts), or ``None``. Never carries a password: credentials come
            from git's own mechanisms.

    Raises:
        ConfigurationError: If a field is invalid.
    """

    name: str
    path: Path
    base: str | None = None
    remote: str | None = None

    def __post_init__(self) -> None:
        try:
            validate_repo_name(self.name)
        except ValueError as exc:
            raise ConfigurationError(f"repository name: {exc}") from None
        if not isinstance(self.path, Path) or not str(self.path) or "\x00" in str(self.path):
            raise ConfigurationError(f"repository {self.name}: the path is not a usable path")
        if self.base is not None:
            _check_base(self.name, self.base)
        if self.remote is not None:
            _check_remote(self.name, self.remote)


def _check_base(name: str, base: object) -> None:
    """A branch name as ``git check-ref-format --branch`` accepts it, a little stricter."""
    ok = (
        isinstance(base, str)
        and 0 < len(base) <= _MAX_BASE_CHARS
        and not _BAD_IN_REF.search(base)
        and not base.startswith(("-", "/", "refs/"))
        and not base.endswith(("/", ".", ".lock"))
        and ".." not in base
        and "//" not in base
        and "@{" not in base
        and base != "@"
        and not any(part.startswith(".") or part.endswith(".lock") for part in base.split("/"))
    )
    if not ok:
        raise ConfigurationError(
            f"repository {name}: base must be a branch name (master, trunk, release/2026), "
            "not a ref path, revision or option"
        )


def _check_remote(name: str, remote: object) -> None:
    """A remote git can reach, with no password in it and no command transport."""
    if (
        not isinstance(remote, str)
        or not 0 < len(remote) <= _MAX_REMOTE_CHARS
        or _CONTROL.search(remote)
        or remote.startswith("-")
    ):
        raise ConfigurationError(
            f"repository {name}: remote must be one line naming a URL or path git accepts"
        )
    scheme = remote.partition("::")[0].lower() if "::" in remote else ""
    if scheme in ("ext", "fd"):
        # git's ext:: runs a command and fd:: reads a descriptor: never a remote.
        raise ConfigurationError(f"repository {name}: remote transport {scheme}:: is refused")
    authority = remote.partition("://")[2].partition("/")[0] if "://" in remote else ""
    if ":" in authority.rpartition("@")[0]:
        raise ConfigurationError(
            f"repository {name}: the remote URL holds a password; let git supply credentials "
            "(ssh agent, credential helper)"
        )


def name_for_path(path: str | os.PathLike[str]) -> str:
    """The name a repository gets from its folder: the folder's name without ``.git``.

    ``/srv/app.git`` and ``/srv/app`` are ``app``; ``/srv/app/.git`` is ``app``.

    Raises:
        ConfigurationError: If that is not a valid name (give ``NAME=PATH``).
    """
    folder = Path(os.path.abspath(os.fspath(path)))
    base = folder.name.removesuffix(".git") or folder.parent.name
    try:
        return validate_repo_name(base)
    except ValueError:
        raise ConfigurationError(
            "the repository folder's name is not a repository name (1-"
            f"{LIMITS.repo_name_chars} of A-Z a-z 0-9 . _ -, starting with a letter or "
            "digit): name it with --repo NAME=PATH"
        ) from None


def parse_repo_option(text: str) -> RepoSpec:
    """Read one ``--repo PATH`` or ``--repo NAME=PATH``.

    It is ``NAME=PATH`` when an ``=`` comes before any ``/`` (write a path
    holding such an ``=`` as ``./a=b``); the name is then checked strictly.

    Returns:
        The spec, its path made absolute.

    Raises:
        ConfigurationError: If the name or path is invalid.
    """
    if "\x00" in text:
        raise ConfigurationError("--repo holds a NUL character")
    head, sep, tail = text.partition("=")
    if sep and "/" not in head:
        if not tail:
            raise ConfigurationError("--repo NAME=PATH needs a path")
        try:
            name = validate_repo_name(head)
        except ValueError as exc:
            raise ConfigurationError(f"--repo NAME=PATH: {exc}") from None
        return RepoSpec(name, Path(os.path.abspath(tail)))
    if not text:
        raise ConfigurationError("--repo needs a path")
    return RepoSpec(name_for_path(text), Path(os.path.abspath(text)))


def repos_from_engine_toml(home: str | os.PathLike[str]) -> list[RepoSpec]:
    """The ``[[repo]]`` tables of ``<home>/engine.toml`` (none if it has none).

    Each table holds ``path`` (relative paths are relative to the home) and
    optionally ``name`` (default: from the path, :func:`name_for_path`),
    ``base`` and ``remote``.

    Raises:
        ConfigurationError: If the file is unreadable or a table is invalid.
    """
    settings = read_engine_toml(Path(home) / ENGINE_TOML)
    tables = (settings or {}).get("repo")
    if tables is None:
        return []
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigurationError(f"{ENGINE_TOML}: repo must be [[repo]] tables")
    return [_spec_of(Path(home), i, table) for i, table in enumerate(tables)]


def _spec_of(home: Path, index: int, table: dict[str, Any]) -> RepoSpec:
    where = f"{ENGINE_TOML}: [[repo]] {index + 1}"
    unknown = sorted(set(table) - _TABLE_KEYS)
    if unknown:
        raise ConfigurationError(f"{where} holds only name, path, base and remote")
    path = table.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"{where} needs path = \"...\"")
    for key in ("name", "base", "remote"):
        if key in table and not isinstance(table[key], str):
            raise ConfigurationError(f"{where}: {key} is a string")
    full = home / os.path.expanduser(path)
    name = table["name"] if "name" in table else name_for_path(full)
    try:
        return RepoSpec(name, full, table.get("base"), table.get("remote"))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def check_specs(specs: Iterable[RepoSpec]) -> list[RepoSpec]:
    """Refuse an empty list and repeated names or paths.

    Names are compared by :func:`engine.auth.reponames.repo_identity` (``App``
    and ``app``, ``my-repo`` and ``my_repo`` are refused together: one is too
    easily taken for the other, in a URL or a glob);
    paths after resolving links.

    Returns:
        The specs, as a list.

    Raises:
        ConfigurationError: Naming the repeated name or the two names of one path.
    """
    listed = list(specs)
    if not listed:
        raise ConfigurationError(
            "no repository: pass --repo PATH (or NAME=PATH), or add [[repo]] tables to "
            f"<home>/{ENGINE_TOML}"
        )
    names: dict[str, str] = {}
    paths: dict[str, str] = {}
    for spec in listed:
        folded = repo_identity(spec.name)
        if folded in names:
            raise ConfigurationError(
                f"two repositories are named {names[folded]!r} and {spec.name!r}: "
                "names must differ, case and - or _ aside"
            )
        names[folded] = spec.name
        where = os.path.realpath(spec.path)
        if where in paths:
            raise ConfigurationError(
                f"repositories {paths[where]!r} and {spec.name!r} are the same path"
            )
        paths[where] = spec.name
    return listed


def resolve_repo_specs(
    home: str | os.PathLike[str], options: Sequence[str] | None
) -> list[RepoSpec]:
    """The repositories an engine on ``home`` serves.

    Args:
        home: The chit home.
        options: The ``--repo`` values given (each ``PATH`` or ``NAME=PATH``);
            none: the ``[[repo]]`` tables of ``<home>/engine.toml``.

    Returns:
        At least one spec, names and paths distinct.

    Raises:
        ConfigurationError: If none is configured, or one is invalid or repeated.
    """
    if options:
        return check_specs(parse_repo_option(text) for text in options)
    return check_specs(repos_from_engine_toml(home))
