"""``chit audit export`` and ``chit audit attest-lane``: attestations for supply-chain tools.

What they write and how anyone verifies it without chit: docs/attestations.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine import git
from engine.audit import export, laneattest
from engine.auth.signkeys import active_signing_key
from engine.errors import ConfigurationError
from engine.service.repos import repos_from_engine_toml

__all__ = ["attest_lane", "export_attestations", "resolve_audit_repo"]

_BUNDLE_FILES = (export.INTOTO_FILE, export.JSON_FILE, export.KEYS_FILE)


def resolve_audit_repo(
    home: str | os.PathLike[str], repo: str | None
) -> tuple[str, str | None]:
    """The repository ``--repo NAME|PATH`` names: its path and base branch.

    A name of a ``[[repo]]`` table of ``<home>/engine.toml`` wins (its path
    and base); otherwise ``repo`` is a path (base: what its ``HEAD`` names).
    Without ``repo``, the home's one ``[[repo]]``.

    Args:
        home: The chit home.
        repo: ``--repo``'s value, or ``None``.

    Returns:
        ``(path, base or None)``.

    Raises:
        ValueError: If ``repo`` is ``None`` and the home does not serve
            exactly one repository (the message lists them).
        ConfigurationError: If ``repo`` is neither a name in ``engine.toml``
            nor an existing path.
    """
    try:
        specs = repos_from_engine_toml(home)
    except ConfigurationError:
        if repo is None:
            raise ValueError("--repo is required: the home has no [[repo]] in engine.toml") \
                from None
        specs = []
    if repo is None:
        if len(specs) != 1:
            raise ValueError("--repo is required: the home serves "
                             + ", ".join(s.name for s in specs))
        return os.fspath(specs[0].path), specs[0].base
    for spec in specs:
        if spec.name == repo:
            return os.fspath(spec.path), spec.base
    if os.path.exists(repo):
        return repo, None
    raise ConfigurationError(
        "--repo: no [[repo]] of engine.toml has that name, and no such path exists")


def _write_bundle(out: Path, files: Mapping[str, bytes], force: bool) -> None:
    """Write ``files`` into ``out`` (created); refuse an earlier export unless ``force``."""
    out.mkdir(parents=True, exist_ok=True)
    present = sorted(name for name in {*_BUNDLE_FILES, *files}
                     if os.path.lexists(out / name))
    if present and not force:
        raise ValueError(f"--out: {out} holds an export already ({', '.join(present)}); "
                         "use --force to replace it")
    for name in _BUNDLE_FILES:  # one bundle per folder: drop the other format's file
        if name not in files and os.path.lexists(out / name):
            os.remove(out / name)
    for name, data in files.items():
        temporary = out / f".{name}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temporary, out / name)


def export_attestations(
    repo_path: str | os.PathLike[str],
    range_text: str,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    form: export.Format,
    out: str | os.PathLike[str],
    base: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Write a range's verified attestations and their public keys into ``out``.

    Args:
        repo_path: The repository (the engine's, or a mirror clone).
        range_text: ``agent/NAME``, ``REV..agent/NAME`` or ``REV..REV``
            (:func:`engine.audit.export.parse_range`).
        public_keys: Trusted key id to Ed25519 public key.
        form: ``"in-toto"`` or ``"json"``.
        out: The folder to write (created).
        base: The base branch; default the one ``HEAD`` names.
        force: Replace an earlier export in ``out``.

    Returns:
        ``{"ok": no commit unattested, "range", "format", "out", "files":
        [names], "exported": [{"commit", "lane", "digest", "kid"}],
        "unattested": [{"commit", "lane", "reason"}]}``.

    Raises:
        ValueError: For a bad range, a range past ``LIMITS.export_commits``
            or ``LIMITS.export_bytes``, or ``out`` holding an export without
            ``force``.
        InvalidRequestError, RepositoryError: If a revision or lane does not
            resolve.
        ConfigurationError: If ``repo_path`` is not a repository with a base.
    """
    spec = export.parse_range(range_text)
    repo = git.Repository(repo_path, base=base)
    try:
        found = export.collect(repo, spec, public_keys)
    finally:
        repo.close()
    files = export.bundle(found, public_keys, form)
    _write_bundle(Path(out), files, force)
    return {
        "ok": not found.unattested,
        "range": range_text,
        "format": form,
        "out": os.fspath(out),
        "files": sorted(files),
        "exported": [{"commit": e.commit, "lane": e.lane, "digest": e.digest, "kid": e.kid}
                     for e in found.exported],
        "unattested": [{"commit": u.commit, "lane": u.lane, "reason": u.reason}
                       for u in found.unattested],
    }


def attest_lane(
    home: str | os.PathLike[str],
    repo_path: str | os.PathLike[str],
    lane: str,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    base: str | None = None,
) -> dict[str, Any]:
    """Audit a lane and sign its summary with the home's active signing key.

    Args:
        home: The chit home (its active signing key signs).
        repo_path: The repository.
        lane: ``agent/NAME``.
        public_keys: Trusted key id to Ed25519 public key, for the audit.
        base: The base branch; default the one ``HEAD`` names.

    Returns:
        :func:`engine.audit.laneattest.attest_lane`'s answer.

    Raises:
        ConfigurationError: If the home holds no active signing key.
        ValueError, RepositoryError: As :func:`engine.audit.laneattest.attest_lane`.
    """
    key = active_signing_key(home)
    return laneattest.attest_lane(repo_path, lane, public_keys=public_keys, key=key,
                                  time=int(time.time()), base=base)
