"""Pure policy evaluation: a ``Request`` in, a ``Decision`` out. No I/O, no clock.

:func:`evaluate` applies the policy in the order docs/policy.md ("Evaluation")
gives, the first refusal winning; :func:`enforce` raises it. Rate limits are
counted by the engine: :func:`rate_limits_for` only says which apply. What is
memoised (never a decision): docs/policy.md, "What evaluation remembers".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from policy._agents import agent_matches
from policy._pathindex import DenyIndex
from policy._pattern import MAX_SUBJECT_CHARS
from policy.decision import Decision, Request
from policy.errors import PolicyDeniedError
from policy.model import Policy, RateLimit, Rule
from policy.paths import PathError, _is_valid_path, in_scope, validate_path

__all__ = ["enforce", "evaluate", "rate_limits_for"]

_ALLOWED_BY_DEFAULT = Decision(allowed=True, rule="default")
_FORBIDDEN = -1  # the key of ``paths.forbidden`` among the deny rules' indices
_MAX_SELECTIONS = 8192


def _selects(patterns: tuple[str, ...] | None, value: str) -> bool:
    return patterns is None or value in patterns


def _selects_agent(patterns: tuple[str, ...] | None, agent: str) -> bool:
    return patterns is None or any(agent_matches(p, agent) for p in patterns)


@dataclass
class _Index:
    """Rules split by effect, and memoised selections by (agent, tool, operation)."""

    policy: Policy
    deny: tuple[tuple[int, Rule], ...] = ()
    allow: tuple[tuple[int, Rule], ...] = ()
    allowed: dict[int, Decision] = field(default_factory=dict)
    selections: dict[
        tuple[str, str, str], tuple[tuple[tuple[int, Rule], ...], tuple[tuple[int, Rule], ...]]
    ] = field(default_factory=dict)
    rate_selections: dict[tuple[str, str], tuple[tuple[int, RateLimit], ...]] = field(
        default_factory=dict
    )
    path_denials: DenyIndex[int] = field(init=False)

    def __post_init__(self) -> None:
        rules = tuple(enumerate(self.policy.rules))
        self.deny = tuple((i, r) for i, r in rules if r.effect == "deny")
        self.allow = tuple((i, r) for i, r in rules if r.effect == "allow")
        self.allowed = {i: Decision(allowed=True, rule=f"rules[{i}]") for i, _ in self.allow}
        # Which of paths.forbidden (key -1) and the deny rules' paths (key i) deny a
        # path: exactly deny_matches, only cheaper (policy/_pathindex.py).
        groups = {i: r.paths for i, r in self.deny if r.paths is not None}
        groups[_FORBIDDEN] = self.policy.paths.forbidden
        self.path_denials = DenyIndex(groups)

    def select(
        self, agent: str, tool: str, operation: str
    ) -> tuple[tuple[tuple[int, Rule], ...], tuple[tuple[int, Rule], ...]]:
        key = (agent, tool, operation)
        found = self.selections.get(key)
        if found is None:

            def applies(rule: Rule) -> bool:
                return (
                    _selects(rule.tools, tool)
                    and _selects(rule.operations, operation)
                    and _selects_agent(rule.agents, agent)
                )

            found = (
                tuple((i, r) for i, r in self.deny if applies(r)),
                tuple((i, r) for i, r in self.allow if applies(r)),
            )
            _remember(self.selections, key, found)
        return found

    def select_rates(self, agent: str, tool: str) -> tuple[tuple[int, RateLimit], ...]:
        key = (agent, tool)
        found = self.rate_selections.get(key)
        if found is None:
            found = tuple(
                (i, r)
                for i, r in enumerate(self.policy.rate_limits)
                if _selects(r.tools, tool) and _selects_agent(r.agents, agent)
            )
            _remember(self.rate_selections, key, found)
        return found


_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(cache: dict[_K, _V], key: _K, value: _V) -> None:
    if len(cache) >= _MAX_SELECTIONS:
        cache.clear()  # bounded: agents x tools is small, so this is rare
    cache[key] = value


def _index(policy: Policy) -> _Index:
    # Read from the model's private storage: ``policy._index`` goes through
    # pydantic's __getattr__, which costs more than the rest of an evaluation.
    private = policy.__pydantic_private__
    index = private.get("_index") if private is not None else None
    if not isinstance(index, _Index):
        index = _Index(policy)
        policy._index = index
    return index


def _refuse(code: str, rule: str, reason: str) -> Decision:
    return Decision(allowed=False, code=code, rule=rule, reasons=(reason,))


def _builtin(paths: tuple[str, ...]) -> Decision | None:
    for path in paths:
        if not _is_valid_path(path):
            try:
                validate_path(path)
            except PathError as exc:
                return _refuse(exc.code, "builtin.paths", exc.message)
    return None


def _path_rules(paths: tuple[str, ...], denials: list[frozenset[int]]) -> Decision | None:
    # ``paths.protected`` is not a refusal: protection is at rest (docs/sealing.md).
    for path, denied_by in zip(paths, denials, strict=True):
        if _FORBIDDEN in denied_by:
            return _refuse(
                "path_forbidden",
                "paths.forbidden",
                f"{path!r} is forbidden by the organisation policy",
            )
    return None


def _limits(policy: Policy, request: Request) -> Decision | None:
    limits = policy.limits
    if (
        request.content_bytes <= limits.file_bytes
        and request.staged_bytes <= limits.staged_bytes
        and request.staged_files <= limits.staged_files
        and request.commit_files <= limits.files_per_commit
    ):
        return None  # within every limit: what follows would find nothing
    checks = (
        ("limits.file_bytes", request.content_bytes, limits.file_bytes, "the file is", "bytes"),
        ("limits.staged_bytes", request.staged_bytes, limits.staged_bytes, "staged", "bytes"),
        ("limits.staged_files", request.staged_files, limits.staged_files, "staged", "paths"),
        (
            "limits.files_per_commit",
            request.commit_files,
            limits.files_per_commit,
            "the commit changes",
            "paths",
        ),
    )
    for rule, value, limit, what, unit in checks:
        if value > limit:
            return _refuse(
                "limit_exceeded", rule, f"{what} {value} {unit}, over the limit of {limit}"
            )
    return None


def _message(policy: Policy, message: str) -> Decision | None:
    rules = policy.commit
    if len(message) < rules.message_min_length:
        return _refuse(
            "policy_denied",
            "commit.message_min_length",
            f"the commit message must be at least {rules.message_min_length} characters",
        )
    subject = message.split("\n", 1)[0]
    if rules.subject_max_length is not None and len(subject) > rules.subject_max_length:
        return _refuse(
            "policy_denied",
            "commit.subject_max_length",
            f"the commit message's first line must be at most {rules.subject_max_length} "
            "characters",
        )
    pattern = rules.compiled_pattern
    if pattern is not None:
        if len(subject) > MAX_SUBJECT_CHARS:
            return _refuse(
                "policy_denied",
                "commit.message_pattern",
                f"the policy requires a pattern for the first line, which is matched only "
                f"when it is at most {MAX_SUBJECT_CHARS} characters",
            )
        if pattern.fullmatch(subject) is None:
            return _refuse(
                "policy_denied",
                "commit.message_pattern",
                f"the commit message's first line must match {pattern.pattern!r}",
            )
    return None


def evaluate(policy: Policy, request: Request) -> Decision:
    """Decide a request. Never raises on a refusal.

    Evaluation order (the first refusal wins; docs/policy.md, "Evaluation"): built-in
    path rules, ``paths.forbidden``, deny rules, allow rules
    under ``default = "deny"``, limits, commit message requirements.

    Matching: a rule applies when each of its selectors it has matches (absent
    selectors match everything): ``agents`` by pattern (:mod:`policy._agents`),
    ``tools`` and ``operations`` by name. A deny rule's ``paths`` match when *any*
    path of the request is matched by one of its globs, with the same case- and
    spelling-folding as ``paths.forbidden``, including everything below a matched
    folder; a request without paths does not match a deny rule that has
    ``paths``. An allow rule's ``paths`` match when *every* path of the request
    is in one of its globs (exact, case-sensitive, as token scopes), so a request
    without paths matches.

    Args:
        policy: The organisation policy.
        request: The call being decided.

    Returns:
        The :class:`Decision`: allowed with the allow rule that matched (or
        ``default``), or refused with the code, the rule and the reason.
    """
    paths = request.paths
    refusal = _builtin(paths)
    if refusal is not None:
        return refusal
    index = _index(policy)
    denials = [index.path_denials.hits(p) for p in paths]
    refusal = _path_rules(paths, denials)
    if refusal is not None:
        return refusal
    deny, allow = index.select(request.agent, request.tool, request.operation)
    for i, rule in deny:
        if rule.paths is not None and not any(i in denied_by for denied_by in denials):
            continue
        return _refuse(
            "policy_denied",
            f"rules[{i}]",
            rule.reason or "a deny rule of the organisation policy matches this call",
        )
    decision = _ALLOWED_BY_DEFAULT
    if policy.default == "deny":
        for i, rule in allow:
            rule_paths = rule.paths
            if rule_paths is None or all(in_scope(p, rule_paths) for p in paths):
                decision = index.allowed[i]
                break
        else:
            return _refuse(
                "policy_denied",
                "default",
                f"no rule of the organisation policy allows {request.tool} here for this agent",
            )
    refusal = _limits(policy, request)
    if refusal is None and request.message is not None:
        refusal = _message(policy, request.message)
    return refusal or decision


def rate_limits_for(policy: Policy, agent: str, tool: str) -> tuple[tuple[int, RateLimit], ...]:
    """The ``[[rate_limits]]`` entries that count a call, with their indices.

    Args:
        policy: The organisation policy.
        agent: The calling agent.
        tool: The tool called.

    Returns:
        ``(index, limit)`` pairs in file order; empty if none applies.
    """
    return _index(policy).select_rates(agent, tool)


def enforce(policy: Policy, request: Request) -> Decision:
    """Like :func:`evaluate`, but raise on a refusal.

    Args:
        policy: The organisation policy.
        request: The call being decided.

    Returns:
        The allowing :class:`Decision`.

    Raises:
        PolicyDeniedError: Carrying the refusing Decision.
    """
    decision = evaluate(policy, request)
    if not decision.allowed:
        raise PolicyDeniedError(decision)
    return decision
