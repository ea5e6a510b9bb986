"""A repository's remote: what it holds (``ls-remote``), fetching refs, atomic pushes.

Each operation is one ``git`` command (engine/git/transport.py). Fetched refs
land under ``refs/chit/upstream/`` and never on a branch; a push names object
ids and full reference names, is atomic (every ref of it moves, or none) and
fast-forward only (docs/architecture.md, "Lanes on the organisation's remote").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pygit2

from engine.git.base import tracking_ref
from engine.git.handle import Handle, reference
from engine.git.transport import GitRun, RemoteURL, run_git

__all__ = ["PushOutcome", "PushResult", "Remote", "RemoteError"]

_MOVED = (
    "non-fast-forward",
    "fetch first",
    "stale info",
    "reference already exists",
    "but expected",
)
"""What git says when it refuses an update because the remote's ref moved: the
client's ``[rejected] (...)``, or the server's ``cannot lock ref`` when another
push created or moved the ref between the two sides' checks. A ``File exists``
lock (a push in flight, or one that died) or ``Permission denied`` is a failure."""


class RemoteError(Exception):
    """A command to the remote failed; ``reason`` is git's scrubbed explanation.

    Args:
        reason: Safe to keep and show: userinfo and the URL's secrets removed.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PushOutcome(enum.Enum):
    """How a push ended."""

    PUSHED = "pushed"
    """Every ref now holds what was pushed (or already did)."""
    MOVED = "moved"
    """Refused because a ref moved on the remote: fetch, merge onto it, push again."""
    FAILED = "failed"
    """Anything else: unreachable, refused, timed out. Nothing moved on the remote."""


@dataclass(frozen=True)
class PushResult:
    """A push's outcome and, unless it was pushed, why (scrubbed)."""

    outcome: PushOutcome
    reason: str | None = None


class Remote:
    """The remote of one repository, reached by the ``git`` command.

    Args:
        handle: The local repository.
        url: The remote's URL (:class:`~engine.git.transport.RemoteURL`).
    """

    def __init__(self, handle: Handle, url: RemoteURL) -> None:
        self.url = url
        self._handle = handle
        self._git_dir = handle.commondir

    def __repr__(self) -> str:
        return f"Remote({self.url.shown!r})"

    def _run(self, args: list[str]) -> GitRun:
        return run_git(self._git_dir, args, config=self.url.config())

    def _failure(self, run: GitRun, what: str) -> RemoteError:
        if run.timed_out:
            return RemoteError(f"{what} timed out")
        text = self.url.scrub(run.stderr) or f"git exited with status {run.returncode}"
        return RemoteError(f"{what} failed: {text}")

    def heads(self, patterns: list[str]) -> dict[str, pygit2.Oid]:
        """What the remote's references matching ``patterns`` point at.

        Args:
            patterns: Full reference names, or prefixes ending in ``/*``.

        Returns:
            ``{reference name: id}`` for each existing reference whose name is
            one of ``patterns`` or under one of its prefixes.

        Raises:
            RemoteError: If the remote cannot be listed.
        """
        run = self._run(["ls-remote", "--", self.url.name, *patterns])
        if not run.ok:
            raise self._failure(run, "listing the remote")
        exact = {p for p in patterns if not p.endswith("/*")}
        prefixes = tuple(p[:-1] for p in patterns if p.endswith("/*"))
        found: dict[str, pygit2.Oid] = {}
        for line in run.stdout.splitlines():
            oid, _, name = line.partition("\t")
            if (name in exact or name.startswith(prefixes)) and len(oid) == 40:
                try:
                    found[name] = pygit2.Oid(hex=oid)
                except ValueError:
                    continue
        return found

    def fetch(self, refs: list[str]) -> dict[str, pygit2.Oid]:
        """Fetch ``refs`` into their tracking references (:func:`~engine.git.base.tracking_ref`).

        Each is fetched with ``+`` (a tracking reference follows the remote
        wherever it goes); no tag, no ``FETCH_HEAD``, no submodule.

        Args:
            refs: Full reference names that exist on the remote.

        Returns:
            ``{reference name: id}`` as fetched, read back from the tracking
            references.

        Raises:
            RemoteError: If the fetch fails (a missing reference included).
        """
        if not refs:
            return {}
        specs = [f"+{ref}:{tracking_ref(ref)}" for ref in refs]
        run = self._run(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                         "--no-recurse-submodules", "--", self.url.name, *specs])
        if not run.ok:
            raise self._failure(run, "fetching from the remote")
        repo = self._handle.repo
        fetched: dict[str, pygit2.Oid] = {}
        for ref in refs:
            found = reference(repo, tracking_ref(ref))
            if found is not None and isinstance(found.target, pygit2.Oid):
                fetched[ref] = found.target
        return fetched

    def push(self, updates: dict[str, pygit2.Oid], *, dry_run: bool = False) -> PushResult:
        """Push ``updates`` atomically and fast-forward only: all of them move, or none.

        Args:
            updates: Full reference name on the remote to the local object
                id it must point at.
            dry_run: Only ask whether the remote would take it (``git push
                --dry-run``: authentication and fast-forward are checked, the
                remote's disk is not).

        Returns:
            :class:`PushResult`: ``PUSHED``; ``MOVED`` if a reference moved on
            the remote (the push is refused as not a fast-forward); else
            ``FAILED`` with git's scrubbed reason.
        """
        specs = [f"{oid}:{ref}" for ref, oid in sorted(updates.items())]
        flags = ["--dry-run"] if dry_run else []
        run = self._run(["push", "--porcelain", "--atomic", "--no-verify", *flags,
                         "--", self.url.name, *specs])
        rejected = []
        for line in run.stdout.splitlines():
            flag, _, rest = line.partition("\t")
            if flag == "!":
                rejected.append(rest)
        if run.ok and not rejected:
            return PushResult(PushOutcome.PUSHED)
        if run.timed_out:
            return PushResult(PushOutcome.FAILED, "pushing to the remote timed out")
        said_moved = [*rejected, *run.stderr.splitlines()]
        if any(reason in line for line in said_moved for reason in _MOVED):
            return PushResult(PushOutcome.MOVED, "a reference moved on the remote")
        said = [line.split("\t", 1)[-1] for line in rejected if "atomic push failed" not in line]
        text = self.url.scrub("; ".join([*said, run.stderr.strip()]).strip("; "))
        return PushResult(
            PushOutcome.FAILED,
            "pushing to the remote failed: " + (text or f"git exited with status {run.returncode}"),
        )
