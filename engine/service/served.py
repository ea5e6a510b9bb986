"""The repositories one engine serves, each with its git repository, index and sessions.

:class:`ServedRepos` opens every :class:`~engine.service.repos.RepoSpec` the
engine was given and answers, for a verified token and the name a call or offer
gives, which repository it acts on: step 3 of the ordered check begins here
(``repo_outside_scope``, docs/architecture.md). One state store, call log,
keyring and policy serve them all (engine/service/interface.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine import git
from engine.auth.reponames import validate_repo_name
from engine.auth.sealing import Sealing
from engine.auth.verify import VerifiedToken
from engine.catalog.declarations import CATALOG_STORE_REF
from engine.errors import (
    AccessDeniedError,
    ConfigurationError,
    InvalidRequestError,
    RepositoryError,
)
from engine.git.refs import SharedLock
from engine.semantic.indexer import indexer_for
from engine.semantic.persist import PersistedIndex
from engine.service import coherence
from engine.service.expiry import SessionSweeper
from engine.service.placement import Placement
from engine.service.repos import RepoSpec, check_specs, name_for_path
from engine.service.sessions import Sessions

__all__ = ["Served", "ServedRepos", "specs_of"]


@dataclass(eq=False)
class Served:
    """One repository the engine serves.

    Attributes:
        spec: How the operator configured it.
        repo: Its git repository.
        index: Its persisted semantic index.
        sessions: Its open sessions, saved under its ``refs/chit/sessions/``
            (a session id names a session in one repository only).
        sweeper: Sweeps its expired sessions' saved references.
    """

    spec: RepoSpec
    repo: git.Repository = field(repr=False)
    index: PersistedIndex | None = field(default=None, repr=False)
    sessions: Sessions = field(init=False, repr=False)
    sweeper: SessionSweeper = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self.repo)
        self.sweeper = SessionSweeper(self.repo, self.sessions)

    @property
    def name(self) -> str:
        """The repository's name."""
        return self.spec.name


def specs_of(repo: str | os.PathLike[str] | Sequence[RepoSpec]) -> list[RepoSpec]:
    """What :class:`~engine.service.Engine` was given, as repository specs.

    Args:
        repo: A path (one repository, named after its folder) or the specs.

    Raises:
        ConfigurationError: If the folder's name is not a repository name, or
            the specs are empty or repeat a name or path.
    """
    if isinstance(repo, str | os.PathLike):
        return [RepoSpec(name_for_path(repo), Path(os.fspath(repo)))]
    if not all(isinstance(spec, RepoSpec) for spec in repo):
        raise ConfigurationError("repositories are given as a path or a list of RepoSpec")
    return check_specs(repo)


class ServedRepos:
    """The engine's repositories by name.

    Args:
        specs: The repositories (names and paths distinct, see :func:`specs_of`).
        sealing: Seals and opens protected content (one keyring for all).
        shared_lock: The state store's lock by name, for lane updates.
        index_key: The persisted semantic index's key (from the sealing key).
        key_ids: The home's provenance signing key ids (part of each
            repository's identity, docs/vital-signs.md).

    Raises:
        ConfigurationError: If a repository cannot be opened, or two specs are
            one repository (the same git directory under two paths).
    """

    def __init__(
        self,
        specs: Sequence[RepoSpec],
        *,
        sealing: Sealing,
        shared_lock: SharedLock | None,
        index_key: Callable[[], bytes],
        key_ids: Callable[[], Sequence[str]] = tuple,
    ) -> None:
        self._served: dict[str, Served] = {}
        self._key_ids = key_ids
        self.store_sign: coherence.Signal | None = None  # the state store's (the engine sets it)
        common: dict[str, str] = {}
        for spec in specs:
            try:
                # With a remote, each lane commit is pushed there with its record
                # and the catalogs it depends on (engine/git/replica.py).
                repo = git.Repository(
                    spec.path,
                    base=spec.base,
                    remote=spec.remote,
                    pushed_stores=(CATALOG_STORE_REF,),
                    sealing=sealing,
                    shared_lock=shared_lock,
                )
            except ConfigurationError as exc:
                self.close()
                raise ConfigurationError(f"repository {spec.name}: {exc}") from None
            where = os.path.realpath(repo.chit_dir)
            if where in common:
                raise ConfigurationError(
                    f"repositories {common[where]!r} and {spec.name!r} are one git repository"
                )
            common[where] = spec.name
            # The semantic index keeps parsed records beside the lane locks,
            # shared by every engine of this repository, under a key derived
            # from the sealing key (engine/semantic/persist.py).
            # It records whose it is with its first rows (docs/vital-signs.md).
            index = PersistedIndex(repo.chit_dir, index_key, self._owner_of(spec.name, repo))
            indexer_for(repo).persist_to(index)
            # The catalog store records whose it is when an engine first writes it.
            repo.store_owner = self._store_owner_of(spec.name, repo)
            self._served[spec.name] = Served(spec, repo, index)

    def _owner_of(self, name: str, repo: git.Repository) -> Callable[[], object]:
        return lambda: coherence.identity_record(self.identity_of(name, repo))

    def _store_owner_of(self, name: str, repo: git.Repository) -> Callable[[], bytes | None]:
        def record() -> bytes | None:
            try:
                return coherence.record_bytes(self.identity_of(name, repo))
            except Exception:  # no record rather than a failed commit: the sign stays silent
                return None

        return record

    def identity_of(self, name: str, repo: git.Repository) -> coherence.Identity:
        """A served repository's identity: its name, its history's root, the home's keys."""
        root = repo.history_root()
        return coherence.Identity.of(name, () if root is None else (root,), self._key_ids())

    def coherence(self, served: Served) -> list[coherence.Signal]:
        """The vital signs of one repository's artefacts that are not silent.

        Signal-only (docs/vital-signs.md): reading them changes nothing and
        never fails a call; an artefact that cannot be read is silent.

        Args:
            served: One of this engine's repositories.

        Returns:
            The state store's sign (set by the engine when it opened the
            store), the semantic index's and the catalog store's (``ok`` or
            ``mismatch``), each only when its artefact records an owner.
        """
        identity = self.identity_of(served.name, served.repo)
        out: list[coherence.Signal] = [] if self.store_sign is None else [self.store_sign]
        if served.index is not None:
            recorded = coherence.parse_identity(served.index.recorded_owner())
            signal = coherence.check_recorded("semantic_index", identity, recorded)
            if signal is not None:
                out.append(signal)
        catalog = coherence.check_catalog(identity, _catalog_owner(served.repo))
        if catalog is not None:
            out.append(catalog)
        return out

    def start(self) -> None:
        """Start each remote's background pushes (lanes a failed push left, with backoff)."""
        for served in self:
            if served.repo.remote is not None:
                served.repo.remote.start()

    def close(self) -> None:
        """Stop each remote's background pushes. Idempotent."""
        for served in self._served.values():
            served.repo.close()

    def __repr__(self) -> str:
        return f"ServedRepos({sorted(self._served)})"

    def __iter__(self) -> Iterator[Served]:
        return iter(self._served.values())

    def __len__(self) -> int:
        return len(self._served)

    @property
    def names(self) -> list[str]:
        """The names served, sorted."""
        return sorted(self._served)

    def place_with(self, placement: Placement) -> None:
        """Place each repository's sessions in the store, under keys of its own."""
        for served in self:
            served.sessions.place_with(placement.for_repo(served.name))

    def label(self, name: object) -> str | None:
        """The repository a call names, for its call-log entry, before anything is checked.

        Returns:
            ``name`` if it is a valid name; the only repository's name if none
            is given and the engine serves one; ``None`` otherwise (the
            recorder then writes the name as sent, redacted).
        """
        if name is None:
            return next(iter(self._served)) if len(self._served) == 1 else None
        return name if isinstance(name, str) and _valid(name) else None

    def resolve(self, token: VerifiedToken, name: object) -> Served:
        """The repository a verified token's offer or call acts on.

        In order: a missing name is the only repository, if there is one; the
        token's ``repos`` caveats must cover the name (before the name is
        looked up, so a token learns nothing of repositories outside its
        scope); the engine must serve it.

        Args:
            token: The verified token.
            name: The repository's name as the edge sent it, or ``None``.

        Returns:
            The repository.

        Raises:
            InvalidRequestError: ``repo_required`` (several served, none named),
                ``invalid_argument`` (not a repository name, ``fields``).
            AccessDeniedError: ``repo_outside_scope``.
            RepositoryError: ``not_found`` (in scope, but not served here).
        """
        if name is None:
            if len(self._served) != 1:
                raise InvalidRequestError(
                    "repo_required",
                    "this engine serves several repositories; name one",
                )
            name = next(iter(self._served))
        if not isinstance(name, str) or not _valid(name):
            raise InvalidRequestError(
                "invalid_argument", "the repository name is not a valid name", fields=["repo"]
            )
        served = self._served.get(name)
        only = served is not None and len(self._served) == 1
        if not token.allows_repo(name, only_repo=only):
            raise AccessDeniedError(
                "repo_outside_scope", "this token is not good for that repository"
            )
        if served is None:
            raise RepositoryError("not_found", "this engine serves no repository of that name")
        return served


def _catalog_owner(repo: git.Repository) -> coherence.Identity | None:
    """Whose the catalog store says it is; ``None`` (silent) if it cannot be read."""
    try:
        return coherence.read_identity(repo.recorded_store_owner(CATALOG_STORE_REF))
    except Exception:  # a sign that cannot be read is silent
        return None


def _valid(name: str) -> bool:
    try:
        validate_repo_name(name)
    except ValueError:
        return False
    return True
