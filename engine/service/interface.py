"""The engine's narrow interface: :class:`Engine` with ``offer`` and ``invoke``.

Every call re-presents the token and re-runs the whole ordered check
(docs/architecture.md); no decision is cached across calls. Listing and calling
share :meth:`Engine._check`, so a tool that is not offered to a token cannot be
called by it under any spelling. Answers are typed (``engine.service.answers``)
and serialise to the JSON of docs/engine-api.md. A frozen engine or one serving a
read-only edge offers only tools marked read-only; every call, allowed or
refused, is appended to the signed call log first (``engine.service.recording``).
One engine serves one or several repositories by name (``engine.service.served``)
with one store, call log, keyring and policy; offers and calls name theirs.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import policy
from engine.audit import calllog
from engine.auth import sealing, signkeys
from engine.auth import verify as tokens
from engine.auth.rootkeys import Keyring
from engine.auth.sealkeys import SealingKeyring
from engine.catalog.confirmation import confirmed
from engine.catalog.declarations import CATALOG_ENCODING, CATALOG_STORE_REF, ToolSpec, tool_by_name
from engine.errors import AccessDeniedError, ChitError, ConfigurationError, StoreError, denied
from engine.semantic.persist import derive_key
from engine.service import coherence, vitals, warm
from engine.service.answers import (
    CallAnswer,
    Called,
    OfferAnswer,
    Offered,
    OfferedTool,
    Refused,
    warning_of,
)
from engine.service.approvals import ApprovalGate, approver_check
from engine.service.arguments import parse_arguments, scoped_paths
from engine.service.check import Checked, check_catalog, check_policy, offered_tool
from engine.service.logwriter import LogWriter
from engine.service.placement import Placement, SessionElsewhere
from engine.service.policyfile import PolicyFile, PolicySnapshot
from engine.service.presence import ROLES, PresenceNotes
from engine.service.ratelimit import RateLimiter
from engine.service.recording import CallFacts, Recorder
from engine.service.repos import RepoSpec
from engine.service.served import Served, ServedRepos, specs_of
from engine.service.sessions import check_session_id
from engine.service.watch import LocalChanges
from engine.state import FreezeState, Store, open_store, refuse_left_behind, resolve_state_url
from engine.tools.context import CallContext, Session
from engine.tools.offer import offer_for
from engine.tools.preview import confirmation_required
from engine.tools.semantic.intents import share_staged_paths, staged_paths
from engine.tools.table import handler_for
from policy.paths import deny_matches

__all__ = ["Engine"]

logger = logging.getLogger("chit.engine")

_CONFIG_ERROR = Refused(
    "internal_error", "the engine's configuration is unusable; the operator has been told"
)
_FAILED = Refused("internal_error", "the engine failed; nothing was changed")
_STORE_ERROR = Refused(
    "internal_error", "the engine's state store is unavailable; retry later"
)


class Engine:
    """The authority behind every edge, embedded in-process or served remotely.

    Args:
        home: The chit home (keyring and ``policy.toml``).
        repo: The repositories the engine serves: a path (one repository,
            named after its folder without ``.git``), or a sequence of
            :class:`~engine.service.repos.RepoSpec` (names and paths distinct).
        clock: Returns the current time in unix seconds (injected for tests).
        read_only: Serve this edge read-only (``chit mcp --read-only``): offer
            only read-only tools and refuse the rest with ``engine_frozen``,
            whatever the operator's freeze says.
        state: The state URL (``--state``); ``None`` resolves it from
            ``$CHIT_STATE``, ``<home>/engine.toml`` or ``<home>/state.db``
            (docs/deployment.md).
        role: What this process is, for the engines ``chit doctor`` lists:
            ``engine`` (``chit engine serve``), ``worker`` (one of its
            workers) or ``embedded`` (an edge's own engine).

    Raises:
        ConfigurationError: If the keyring, policy, a repository, the role or
            the state URL is unusable, two repositories share a name or a path, or the
            store holds no revocation, delegation or call log
            while ``<home>/state.db`` does (docs/deployment.md, "Switching stores").
        StoreError: If the state store cannot be opened, or its schema is newer
            than this chit knows (``SchemaError``).
    """

    def __init__(
        self,
        home: str | os.PathLike[str],
        repo: str | os.PathLike[str] | Sequence[RepoSpec],
        *,
        clock: Callable[[], float] = time.time,
        read_only: bool = False,
        state: str | None = None,
        role: str = "engine",
    ) -> None:
        self._home = Path(home)
        self._read_only = read_only
        if role not in ROLES:
            raise ConfigurationError(f"an engine's role is one of {sorted(ROLES)}")
        specs = specs_of(repo)  # names and paths checked before anything opens
        self._log_signer = calllog.LogSigner(home)
        self._keyring = Keyring(home)
        signkeys.active_signing_key(home)  # refuse to start without a signing key
        # Protected content is sealed in the commit path and opened on reads
        # (docs/sealing.md); protection follows whichever policy is current.
        self._sealing_keys = SealingKeyring(home)
        url = resolve_state_url(home, state)
        self._store = open_store(home, url)
        try:
            # An engine on a new store must not forget what <home>/state.db holds.
            refuse_left_behind(home, url, self._store)
            # Re-read on every call when the file changes; fail closed if it turns
            # invalid, or names an approver the store does not know.
            self._policies = PolicyFile(self._home / "policy.toml", approver_check(self._store))
        except BaseException:
            self._store.close()
            raise
        self._rates = RateLimiter(self._store)
        self._approvals = ApprovalGate(self._store)
        try:
            # Each repository has its own git handle, semantic index (protected
            # files are never kept there) and sessions.
            self._repos = ServedRepos(
                specs,
                sealing=sealing.Sealing(self._sealing_keys, self._protects),
                shared_lock=self._store.lane_lock,
                index_key=self._semantic_index_key,
                key_ids=self._key_ids,
            )
        except BaseException:
            self._store.close()
            raise
        # Whose the store is: recorded by its first engine, compared by each.
        self._repos.store_sign = vitals.store_sign(
            self._store, [self._repos.identity_of(r.name, r.repo) for r in self._repos],
            record=not read_only)
        # Lanes a failed push left behind go to each remote in the background.
        self._repos.start()
        self._clock = clock
        # Who was seen: this process and the edges it serves (docs/vital-signs.md).
        self._presence = PresenceNotes(self._store, role, clock)
        self._presence.start()
        self._changes = LocalChanges(self._store, self._home, self._now)
        # Sessions are saved under refs/chit/sessions/ of their repository as
        # they change; expired ones are swept now and then (docs/engine-api.md,
        # "Sessions that survive").
        for served in self._repos:
            served.sweeper.maybe_sweep(self._clock())
        self._placement: Placement | None = None
        self._log = LogWriter(self._store, self._log_signer, self._now)
        self._recorder = Recorder(
            self._log, self._protects, lambda: self._policy_hash, self._now
        )

    def __repr__(self) -> str:
        return "Engine()"

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Make every queued call-log entry durable, sign a last checkpoint, close the store.

        Edges call it when they stop; it also runs at interpreter exit. The
        engine answers no call after it (each would be ``internal_error``).
        Idempotent.
        """
        placement, self._placement = self._placement, None
        if placement is not None:  # a worker that stops lets its sessions go
            placement.release()
        self._changes.close()
        self._presence.close()
        self._repos.close()
        self._log.close()
        self._store.close()

    @property
    def repos(self) -> list[str]:
        """The names of the repositories this engine serves, sorted."""
        return self._repos.names

    @property
    def store(self) -> Store:
        """The engine's state store (for the token exchange and workers on the same engine)."""
        return self._store

    def place_sessions(self, *, group: str, owner: str) -> Placement:
        """Serve as one of several workers of ``chit engine serve`` on one socket.

        From now on, each session this engine opens is placed with ``owner`` in
        the store, unless another worker of ``group`` holds it: then
        :meth:`invoke` raises :class:`SessionElsewhere` naming that worker, and
        the caller forwards the call there (docs/engine-api.md, "Sessions
        across workers"). Sessions this engine forgets, and all of them when it
        closes, are released. Rows left by an earlier worker of the same
        ``owner`` (one that died) are released first.

        Args:
            group: Names this ``chit engine serve`` (host and private run folder).
            owner: This worker (its private socket path).

        Returns:
            The placement, for taking over a session whose worker is gone.

        Raises:
            StoreError: If the store cannot be written.
        """
        placement = Placement(self._store, group=group, owner=owner, clock=self._clock)
        self._store.release_sessions(owner)
        self._placement = placement
        self._repos.place_with(placement)
        return placement

    def note_edge(self, label: object) -> None:
        """Note an edge whose call this engine serves, for ``chit doctor`` (signal-only).

        Args:
            label: What the edge sent in its ``chit-edge`` header (untrusted:
                escaped and cut to ``presence_label_chars``; anything but a
                string is ignored). Never refuses or delays the call.
        """
        self._presence.note_edge(label)

    def wait_change(self, after: int, timeout: float) -> int:
        """Wait until something that can change an offer changed, on any engine of the store.

        Revocations, freeze changes, key rotation or retirement and policy
        changes are announced on the store's change feed (this engine announces
        the key and policy files it notices changed); an edge that waits here
        asks again for the offers of the tokens it holds when it answers, and
        sends ``tools/list_changed`` where one changed (docs/deployment.md,
        "The change feed").

        Args:
            after: The last position the caller saw (``-1``: answer at once).
            timeout: Seconds to wait at most (capped at ``LIMITS.change_wait_seconds``).

        Returns:
            The feed's newest position; greater than ``after`` unless it timed out.

        Raises:
            StoreError: If the store cannot be read.
        """
        self._changes.watch()
        return self._store.wait_change(after, timeout)

    def flush_log(self) -> bool:
        """Wait until every call answered so far is durable in the call log.

        Returns:
            False if that took longer than ``calllog_wait_seconds``.
        """
        return self._log.flush()

    @property
    def _policy(self) -> policy.Policy:
        """The newest policy that loaded (a call uses its own :class:`Checked` snapshot)."""
        return self._policies.last_good.policy

    @property
    def _policy_hash(self) -> str:
        return self._policies.last_good.hash

    def _semantic_index_key(self) -> bytes:
        """The HMAC key of the persisted semantic index (from the newest sealing key)."""
        return derive_key(self._sealing_keys.sealing_key()[1])

    def _key_ids(self) -> list[str]:
        """The home's provenance signing key ids (part of a repository's identity)."""
        return [key.key_id for key in signkeys.signing_keys(self._home)]

    def _protects(self, path: str) -> bool:
        """Whether the current policy lists ``path`` under ``[paths] protected``."""
        return deny_matches(path, self._policy.paths.protected)

    def _public_keys(self) -> dict[str, Any]:
        """The engine's own signing keys' public halves (for provenance_graph)."""
        return signkeys.load_public_keys(signkeys.export_public_keys(self._home))

    # --- the interface -------------------------------------------------------

    def offer(self, token: str, *, repo: str | None = None) -> OfferAnswer:
        """Return the tools a token unlocks on one repository.

        Args:
            token: The token's text form.
            repo: The repository's name; ``None`` only on an engine serving
                exactly one (``repo_required`` otherwise).

        Returns:
            :class:`Offered` (the tools with their schemas and annotations, the
            catalog hash and encoding, how many are withheld), or
            :class:`Refused` if the token is refused, or is not good for the
            repository (``repo_outside_scope``; ``not_found`` for a name in
            its scope that is not served).
        """
        try:
            checked = self._check(token, repo)
        except ChitError as exc:
            return Refused.of(exc)
        except ConfigurationError:
            logger.error("the engine's configuration is unusable; see `chit keys list`")
            return _CONFIG_ERROR
        except StoreError as exc:
            logger.error("%s; the offer was refused", exc.message)
            return _STORE_ERROR
        return Offered(
            tuple(_offered(t) for t in checked.offer.tools),
            checked.offer.catalog_hash,
            CATALOG_ENCODING,
            checked.offer.withheld,
        )

    def index_base(self, repo: str | None = None) -> dict[str, Any]:
        """Index a repository's base branch ahead of any call (``chit index``).

        See :func:`engine.service.warm.index_base` for the answer and errors.
        """
        return warm.index_base(self._repos, repo)

    def warning(self, token: str, *, repo: str | None = None) -> str | None:
        """The vital-sign line an edge adds to its MCP instructions, on a mismatch only.

        The same line ``effective_scope`` carries as ``warning``
        (docs/vital-signs.md): the engine is serving an artefact made for
        something else, and what to do. Signal-only: it changes nothing, is
        not in the call log, and never raises.

        Args:
            token: The token's text form (only a token good for ``repo`` is told).
            repo: The repository's name, as for :meth:`offer`.

        Returns:
            The line, or ``None``: no mismatch, a refused token or repository,
            or a sign that cannot be read.
        """
        try:
            served = self._check(token, repo).repo
            if served is None:
                return None
            return warning_of(coherence.foreign_line(self._repos.coherence(served)))
        except Exception:  # a sign that cannot be read is silent, whatever the reason
            logger.debug("the vital signs could not be read for the instructions")
            return None

    def invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        *,
        session: str,
        offered_catalog_hash: str | None = None,
        repo: str | None = None,
        approval: str | None = None,
    ) -> CallAnswer:
        """Run one tool call through the ordered check and, if it passes, the handler.

        Args:
            token: The token's text form, re-presented on every call.
            tool: The tool name exactly as the client sent it.
            arguments: The JSON arguments object.
            session: The session: the edge's id for this connection, or one a
                client resumes (its staged change is read back from
                ``refs/chit/sessions/<session>``, for its token identity only).
            offered_catalog_hash: The catalog hash the edge listed to the agent,
                or ``None`` if it listed none. Tools that are not read-only
                refuse with ``catalog_changed`` unless it equals the engine's.
            repo: The repository's name, as for :meth:`offer`; the session
                belongs to that repository (its call-log entry names it).
            approval: The approval id the client echoed (a 2026-07-28 retry's
                request state), or ``None``. Only a hint: the approval is found
                by the call's own request hash (docs/approvals.md).

        Returns:
            :class:`Called` with the tool's result, or :class:`Refused` (a tool
            that is not offered gives the code ``tool_not_offered`` with
            ``offered``). Either way the call is in the call log first; if it
            cannot be recorded the answer is ``internal_error`` (the call's
            effect, if any, stands).

        Raises:
            SessionElsewhere: Only on an engine that places its sessions
                (:meth:`place_sessions`): another worker holds ``session``. The
                call was checked but neither ran nor was recorded here.
        """
        facts = CallFacts()
        answer: CallAnswer
        try:
            answer = Called(
                self._invoke(
                    token, tool, arguments, session, offered_catalog_hash, repo, facts, approval
                )
            )
        except ChitError as exc:
            answer = Refused.of(exc)
        except ConfigurationError:
            logger.error("the engine's configuration is unusable; see `chit keys list`")
            answer = _CONFIG_ERROR
        except StoreError as exc:
            # The store is down or refused: fail closed, one line (no traceback
            # per call while a database is away); the message has no password.
            logger.error("%s; the call was refused", exc.message)
            answer = _STORE_ERROR
        except SessionElsewhere:
            raise  # the worker that holds the session decides and records the call
        except Exception:
            # Never forward exception text: it can carry paths or secrets.
            logger.exception("tool %s failed unexpectedly", tool if tool_by_name(tool) else "?")
            answer = _FAILED
        return self._recorder.record(
            answer, facts, tool, arguments, session, repo=self._repos.label(repo), asked=repo
        )

    # --- the ordered check ---------------------------------------------------

    def _now(self) -> int:
        return int(self._clock())

    def _check(self, token: str, repo: object) -> Checked:
        # 1-2. validity and chain: MAC, engine-made delegation blocks, depth,
        # expiry, revocation of any block (so of every ancestor).
        self._keyring.refresh()
        try:
            current = self._policies.current()  # this call's policy, start to end
            unusable: AccessDeniedError | None = None
        except AccessDeniedError as exc:
            # An invalid policy file refuses every call, but only after the token
            # is verified: a forged token learns nothing of the engine's state.
            current, unusable = self._policies.last_good, exc
        modes: list[FreezeState] = []

        def is_revoked(block_ids: Iterable[str]) -> bool:
            # Revocation and the operator's mode come from the store together:
            # one statement per call (one round trip to PostgreSQL).
            revoked, mode = self._store.call_state(block_ids)
            modes.append(mode)
            return revoked

        verified = tokens.verify_at_time(
            token,
            self._keyring.lookup,
            self._now(),
            is_revoked=is_revoked,
            depth_limit=current.policy.limits.delegation_depth,
        )
        # 3, first: the repository, which the token's repos caveats must cover.
        served = self._repos.resolve(verified, repo)
        if unusable is not None:
            raise unusable
        # 4. the operations and the flag decide the offer; a frozen engine (the
        # operator's mode, read on every call) or a read-only edge offers only
        # the read-only tools among them.
        mode = modes[-1] if modes else self._store.freeze_state()
        frozen = self._read_only or mode.frozen
        # The policy's [confirm] adds the confirm argument to the tools it lists.
        confirm = frozenset(current.policy.confirm.tools)
        return Checked(
            verified,
            offer_for(verified.operations, verified.delegable, frozen, confirm),
            frozen,
            current,
            served,
        )

    def _invoke(
        self,
        token: str,
        tool: str,
        arguments: dict[str, Any] | None,
        session_id: str,
        offered_catalog_hash: str | None,
        repo: str | None,
        facts: CallFacts,
        approval: str | None = None,
    ) -> dict[str, Any]:
        check_session_id(session_id)
        checked = self._check(token, repo)
        facts.checked = checked
        spec = offered_tool(checked, tool, read_only_edge=self._read_only)
        args = parse_arguments(spec, arguments)
        paths = scoped_paths(spec, args, checked.token)  # 3. scope
        current = checked.policy or self._policies.current()
        check_policy(current.policy, checked.token, spec, paths)  # 5. policy
        check_catalog(spec, offered_catalog_hash, checked)
        served = checked.repo
        if served is None:  # unreachable: _check resolves the repository or raises
            raise ConfigurationError("no repository resolved")
        session = served.sessions.bind(session_id, checked.token)
        served.sweeper.maybe_sweep(self._clock())
        if current.policy.confirm.covers(spec.name) and not confirmed(args):
            # Before the rate limit: a call that changes nothing uses none of it.
            with session.lock:
                self._follow_lane(served, session, checked.token, spec)
                ctx = self._context(checked, served, session, current, spec)
                raise confirmation_required(ctx, args)
        handler = handler_for(spec.name)
        if handler is None:  # unreachable: offers hold only tools with handlers
            raise AccessDeniedError(
                "tool_not_offered", "tool withheld", offered=checked.offer.names()
            )
        with session.lock:
            self._follow_lane(served, session, checked.token, spec)
            ctx = self._context(checked, served, session, current, spec)
            # After the policy, the catalog and the confirmation, on the final
            # staged change: an [[approval]] table holds the call until an
            # operator approved exactly it (put back if the call then fails).
            with self._approvals.hold(
                current.policy, checked.token, spec, args, paths, session, served.name,
                now=ctx.now, hint=approval,
            ) as approved:
                # Rate limits count only calls that get this far (docs/policy.md):
                # a call waiting for an approval, like one asking for
                # confirmation, uses none of it.
                limited = self._rates.admit(
                    current.policy, checked.token.agent, spec.name, self._clock()
                )
                if limited is not None:
                    raise denied(limited)
                ctx.approval = approved
                before = () if spec.read_only else staged_paths(session)
                # A change to the staged change is saved before the call is answered.
                with served.sessions.saving(
                    session, checked.token, ctx.now, write=not spec.read_only
                ):
                    result: BaseModel = handler(ctx, args)
                if not spec.read_only:
                    share_staged_paths(ctx, before)
        dumped: dict[str, Any] = result.model_dump(mode="json")
        return dumped

    @staticmethod
    def _follow_lane(
        served: Served, session: Session, token: tokens.VerifiedToken, spec: ToolSpec
    ) -> None:
        """Bring the session up to date before a call acts on it (under its lock)."""
        if not spec.read_only:  # built on the saved staged change, never a stale copy
            served.sessions.check_current(session)
        # The session's view follows its lane as far as it can without
        # changing what the staged change means: fully when nothing is
        # staged, else onto the lane head when no staged path moved there.
        if session.staged.is_empty():
            session.staged.base = None
        else:
            served.repo.rebase_if_clean(token.agent, session.staged)

    def _context(
        self,
        checked: Checked,
        served: Served,
        session: Session,
        current: PolicySnapshot,
        spec: ToolSpec,
    ) -> CallContext:
        """What the call's handler (or its preview) is given."""
        return CallContext(
            token=checked.token,
            session=session,
            repo=served.repo,
            repo_name=served.name,
            policy=current.policy,
            now=self._now(),
            offer=checked.offer,
            catalog_store=CATALOG_STORE_REF,
            keys=self._keyring.lookup,
            store=self._store,
            policy_hash=current.hash,
            tool=spec.name,
            signing_key=functools.partial(signkeys.active_signing_key, self._home),
            public_keys=self._public_keys,
            coherence=lambda: vitals.signs_for_status(
                self._repos, served, self._store, agent=checked.token.agent, now=self._clock()),
        )


def _offered(spec: ToolSpec) -> OfferedTool:
    """A declared tool as an offer lists it, with schemas of its own (callers may keep them)."""
    encoded = spec.encoded()
    return OfferedTool(
        spec.name,
        spec.description,
        copy.deepcopy(encoded["input_schema"]),
        copy.deepcopy(encoded["output_schema"]),
        spec.read_only,
        spec.destructive,
    )
