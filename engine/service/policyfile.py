"""The running engine's policy: ``<home>/policy.toml``, reloaded when it changes.

Every call takes one ``stat`` of the file and reads it again when it changed. An
invalid, unreadable or missing file makes :meth:`PolicyFile.current` refuse every
call (``policy_denied``, rule ``policy``) until it is fixed; the engine never
serves the previous policy instead (docs/policy.md, "Changing the policy").
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import policy
from engine.audit import provenance
from engine.errors import AccessDeniedError, ConfigurationError
from engine.limits import LIMITS

__all__ = [
    "INVALID_POLICY_MESSAGE",
    "PolicyFile",
    "PolicySnapshot",
    "check_file",
    "load_policy",
]

logger = logging.getLogger("chit.engine")

INVALID_POLICY_MESSAGE = (
    "the organisation policy file is invalid; every call is refused until the operator fixes it"
)

_Signature = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class PolicySnapshot:
    """One loaded version of the policy: what a call is decided under, start to end.

    Attributes:
        policy: The frozen policy.
        hash: Its ``chit-det/1`` hash (``sha256:<hex>``), recorded with commits.
    """

    policy: policy.Policy
    hash: str


@dataclass(frozen=True)
class _State:
    signature: _Signature | None
    snapshot: PolicySnapshot | None  # None: the file at ``signature`` is unusable


def _signature(st: os.stat_result) -> _Signature:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class PolicyFile:
    """``<home>/policy.toml`` for a running engine (thread-safe).

    Args:
        path: The policy file.
        check: Checks a policy that loaded against what is outside the file
            (the approvers the store knows); returns why it is unusable, or
            ``None``. It may raise :class:`~engine.errors.StoreError`: the
            version is then not taken, and the next call tries again.

    Raises:
        ConfigurationError: If the file is missing, unreadable or invalid at
            start: the engine refuses to start.
        StoreError: If ``check`` could not read the store at start.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        check: Callable[[policy.Policy], str | None] | None = None,
    ) -> None:
        self._path = Path(path)
        self._check = check
        self._lock = threading.Lock()
        signature, loaded = self._read()
        if isinstance(loaded, str):
            raise ConfigurationError(loaded)
        self._state = _State(signature, loaded)
        self._last_good = loaded

    def __repr__(self) -> str:
        return f"PolicyFile({str(self._path)!r})"

    @property
    def last_good(self) -> PolicySnapshot:
        """The newest version that loaded (for start-up facts; calls use :meth:`current`)."""
        return self._last_good

    def current(self) -> PolicySnapshot:
        """The policy to decide this call under, reloading the file if it changed.

        Returns:
            The current snapshot.

        Raises:
            AccessDeniedError: ``policy_denied`` (rule ``policy``) while the file
                is invalid, unreadable or missing.
        """
        try:
            signature: _Signature | None = _signature(os.stat(self._path))
        except OSError:
            signature = None
        state = self._state
        if signature != state.signature or signature is None:
            state = self._reload(signature)
        if state.snapshot is None:
            raise AccessDeniedError("policy_denied", INVALID_POLICY_MESSAGE, rule="policy")
        return state.snapshot

    def _reload(self, seen: _Signature | None) -> _State:
        with self._lock:
            state = self._state
            if seen is not None and seen == state.signature:
                return state  # another thread reloaded this version meanwhile
            signature, loaded = self._read()
            if isinstance(loaded, str):
                if state.snapshot is not None or signature != state.signature:
                    logger.error("%s; every call is refused until it is fixed", loaded)
                state = _State(signature, None)
            else:
                if state.snapshot is None:
                    logger.warning("policy %s is valid again (%s)", self._path, loaded.hash)
                elif loaded.hash != state.snapshot.hash:
                    logger.warning("policy %s reloaded (%s)", self._path, loaded.hash)
                state = _State(signature, loaded)
                self._last_good = loaded
            self._state = state
            return state

    def _read(self) -> tuple[_Signature | None, PolicySnapshot | str]:
        """Read and load the file: its signature and a snapshot, or why it is unusable."""
        try:
            with open(self._path, "rb") as fh:
                signature = _signature(os.fstat(fh.fileno()))
                raw = fh.read(LIMITS.policy_file_bytes + 1)
        except FileNotFoundError:
            return None, f"no policy at {self._path}; run `chit init` first"
        except OSError as exc:
            return None, f"the policy {self._path} cannot be read ({exc.strerror})"
        if len(raw) > LIMITS.policy_file_bytes:
            most = LIMITS.policy_file_bytes
            return signature, f"the policy {self._path} is larger than {most} bytes"
        if not _states_anything(raw):
            # An emptied file (a truncating write caught half-way, a mistaken
            # `> policy.toml`) would otherwise load as the permissive default.
            return signature, f"the policy {self._path} is empty; write at least `version = 1`"
        try:
            loaded = policy.load(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return signature, f"the policy {self._path} is not UTF-8"
        except policy.PolicyError as exc:
            return signature, f"invalid policy {self._path}: {exc}"
        problem = self._check(loaded) if self._check is not None else None
        if problem is not None:
            return signature, f"invalid policy {self._path}: {problem}"
        return signature, PolicySnapshot(loaded, provenance.policy_hash(loaded))


def _states_anything(raw: bytes) -> bool:
    """False for a file of only blank lines and comments: the engine refuses it."""
    return any(
        line.strip() and not line.strip().startswith(b"#") for line in raw.splitlines()
    )


def load_policy(home: str | os.PathLike[str]) -> policy.Policy:
    """Load ``<home>/policy.toml``.

    Raises:
        ConfigurationError: If it is missing or invalid (the engine will not start).
    """
    path = Path(home) / "policy.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise ConfigurationError(f"no policy at {path}; run `chit init` first") from None
    try:
        return policy.load(text)
    except policy.PolicyError as exc:
        raise ConfigurationError(f"invalid policy {path}: {exc}") from None


def check_file(path: str | os.PathLike[str]) -> dict[str, object]:
    """Check a policy file for ``chit policy check``.

    Args:
        path: The file to check.

    Returns:
        ``{"ok", "file", "errors": [{"location", "line", "message"}],
        "policy_hash", "rules", "rate_limits"}``; ``policy_hash`` (and the counts)
        only when ``ok``: the ``chit-det/1`` hash its commits would record.

    Raises:
        OSError: If the file cannot be read.
    """
    with open(path, "rb") as fh:
        raw = fh.read(LIMITS.policy_file_bytes + 1)
    report: dict[str, object] = {"ok": False, "file": str(path), "errors": []}
    if len(raw) > LIMITS.policy_file_bytes:
        problem = {"location": "file", "line": None, "message": "larger than 4 MiB"}
        return report | {"errors": [problem]}
    if not _states_anything(raw):
        problem = {"location": "file", "line": None,
                   "message": "empty (no key set); write at least `version = 1`"}
        return report | {"errors": [problem]}
    try:
        loaded = policy.load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        problem = {"location": "file", "line": None, "message": "not UTF-8"}
        return report | {"errors": [problem]}
    except policy.PolicyError as exc:
        errors = [
            {"location": loc, "line": line, "message": msg}
            for (loc, msg), line in zip(exc.problems, exc.lines, strict=True)
        ]
        return report | {"errors": errors}
    return report | {
        "ok": True,
        "policy_hash": provenance.policy_hash(loaded),
        "rules": len(loaded.rules),
        "rate_limits": len(loaded.rate_limits),
    }
