"""Policy documents as frozen, validated models (pydantic), loaded from TOML.

See ``docs/policy.md`` for every field, its default and an example. Unknown keys
and unknown values (a tool, an operation, an effect) are errors, never ignored;
a model that fails validation cannot exist.
"""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from policy._fields import (
    MAX_REASON_CHARS,
    MAX_SELECTORS,
    _Agents,
    _array,
    _distinct,
    _Globs,
    _known,
    _located,
    _non_empty,
    _Operations,
    _repo_glob,
    _RuleGlobs,
    _safe_text,
    _Tools,
    check_can_match,
)
from policy._pattern import compile_message_pattern
from policy.approval import MAX_APPROVALS, ApprovalRule
from policy.confirm import Confirm
from policy.errors import PolicyError
from policy.tools import OPERATIONS, TOOL_OPERATIONS

__all__ = [
    "DEFAULT_POLICY_TOML",
    "ISSUER_ALGORITHMS",
    "MAX_LEEWAY_SECONDS",
    "MAX_RATE_LIMITS",
    "MAX_REASON_CHARS",
    "MAX_RULES",
    "MAX_SELECTORS",
    "OPERATIONS",
    "TOOL_OPERATIONS",
    "CommitRules",
    "Issuer",
    "IssuerMapping",
    "Limits",
    "PathRules",
    "Policy",
    "RateLimit",
    "Rule",
    "load",
    "locate",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True)

MAX_RULES = 4096
"""Most ``[[rules]]`` entries in one policy."""

MAX_RATE_LIMITS = 256
"""Most ``[[rate_limits]]`` entries in one policy."""

MAX_RATE_CALLS = 10_000
"""Most ``calls`` a rate limit may allow per window (each is remembered until it leaves it)."""

MAX_RATE_WINDOW_SECONDS = 86_400
"""Longest rate limit window (``per_seconds``): one day."""

MAX_ISSUERS = 64
"""Most ``[[issuers]]`` entries in one policy."""

MAX_MAPPINGS = 256
"""Most ``[[issuers.mappings]]`` entries under one issuer."""

MAX_LEEWAY_SECONDS = 300
"""Largest clock leeway an issuer may be given (five minutes)."""

ISSUER_ALGORITHMS = frozenset({"RS256", "PS256", "ES256", "EdDSA"})
"""JWT algorithms an issuer may be configured with: asymmetric only, never HS* or none."""

MAX_MESSAGE_CHARS = 16_384
"""Longest commit message the engine accepts (``engine.limits.Limits.message_chars``)."""


# --- the document ----------------------------------------------------------------


class Limits(BaseModel):
    """Size, count and lifetime limits. Bytes are bytes, times are seconds."""

    model_config = _FROZEN
    file_bytes: int = Field(default=1_048_576, gt=0)
    staged_bytes: int = Field(default=8_388_608, gt=0)
    staged_files: int = Field(default=256, gt=0)
    files_per_commit: int = Field(default=256, gt=0)
    token_lifetime_seconds: int = Field(default=7 * 24 * 3600, gt=0)
    delegation_depth: int = Field(default=3, ge=0, le=8)


class PathRules(BaseModel):
    """Path rules beyond the built-in ``.git`` rule.

    ``forbidden`` paths are never readable or writable through chit. ``protected``
    paths are sealed at rest: the engine stores them in git encrypted
    (docs/sealing.md) and serves their plaintext only to calls that the token's
    scope and operations, and this policy, allow. Evaluation does not refuse them.
    """

    model_config = _FROZEN
    forbidden: _Globs = ()
    protected: _Globs = ()


class CommitRules(BaseModel):
    """What a commit message must look like.

    ``message_pattern`` is matched with ``re.fullmatch`` against the subject (the
    first line) only, and only a bounded regular-expression subset is accepted
    (``policy/_pattern.py``): Python's ``re`` has no timeout.
    """

    model_config = _FROZEN
    message_min_length: int = Field(default=1, ge=1, le=MAX_MESSAGE_CHARS)
    subject_max_length: int | None = Field(default=None, ge=1, le=MAX_MESSAGE_CHARS)
    message_pattern: str | None = None
    _compiled: re.Pattern[str] | None = PrivateAttr(default=None)

    @field_validator("message_pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            compile_message_pattern(value)
        return value

    def model_post_init(self, context: Any, /) -> None:
        """Keep the compiled pattern beside the frozen text."""
        if self.message_pattern is not None:
            self._compiled = compile_message_pattern(self.message_pattern)

    @property
    def compiled_pattern(self) -> re.Pattern[str] | None:
        """The compiled ``message_pattern``, or None."""
        return self._compiled


class Rule(BaseModel):
    """One ``[[rules]]`` entry: who, which tools or operations, which paths, and the effect.

    An absent selector matches everything; a present one must not be empty.
    """

    model_config = _FROZEN
    effect: Literal["allow", "deny"]
    agents: _Agents = None
    tools: _Tools = None
    operations: _Operations = None
    paths: _RuleGlobs = None
    reason: Annotated[str, AfterValidator(_safe_text)] = Field(
        default="", max_length=MAX_REASON_CHARS
    )

    @model_validator(mode="after")
    def _can_match(self) -> Rule:
        check_can_match(self.tools, self.operations, "rule")
        return self


class RateLimit(BaseModel):
    """One ``[[rate_limits]]`` entry, counted per agent.

    Each matching agent may make ``calls`` calls to the listed tools (together) in
    any window of ``per_seconds`` seconds.
    """

    model_config = _FROZEN
    agents: _Agents = None
    tools: _Tools = None
    calls: int = Field(ge=1, le=MAX_RATE_CALLS)
    per_seconds: int = Field(ge=1, le=MAX_RATE_WINDOW_SECONDS)


_CLAIM_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}", re.ASCII)
_TEMPLATE_FIELD = re.compile(r"\{([^{}]*)\}")
_RELATIVE_FILE = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*", re.ASCII)


def _claim_key(value: str) -> str:
    if not _CLAIM_KEY.fullmatch(value):
        raise ValueError(
            "a claim name is letters, digits and _ (at most 64), not starting with a digit"
        )
    return value


def _home_file(value: str) -> str:
    """A file inside the chit home: relative, no ``..``, plain characters."""
    if not _RELATIVE_FILE.fullmatch(value) or any(
        part in (".", "..") for part in value.split("/")
    ):
        raise ValueError("must be a relative path inside the chit home (no '..')")
    return value


def _agent_template(value: str) -> str:
    """``ci-{repository_owner}``: literal text and ``{claim}`` fields, nothing else."""
    if not value or len(value) > 128:
        raise ValueError("must be 1 to 128 characters")
    for name in _TEMPLATE_FIELD.findall(value):
        _claim_key(name)
    if "{" in _TEMPLATE_FIELD.sub("", value) or "}" in _TEMPLATE_FIELD.sub("", value):
        raise ValueError("holds an unbalanced '{' or '}'")
    return value


class IssuerMapping(BaseModel):
    """One ``[[issuers.mappings]]`` entry: which verified claims get which token.

    Every ``claims`` entry must equal the token's claim exactly (strings only);
    the first mapping whose claims all hold wins. ``agent`` is a fixed name or a
    template whose ``{claim}`` fields are filled from verified claim values; the
    result must still be a valid agent name (the engine checks it).
    """

    model_config = _FROZEN
    claims: dict[Annotated[str, AfterValidator(_claim_key)], str] = Field(
        default_factory=dict, max_length=32
    )
    agent: Annotated[str, AfterValidator(_agent_template)]
    ops: Annotated[
        tuple[Annotated[str, AfterValidator(_known(OPERATIONS - {"none"}, "operation"))], ...],
        BeforeValidator(_array),
        AfterValidator(_distinct),
        AfterValidator(_non_empty),
        Field(max_length=MAX_SELECTORS),
    ]
    paths: Annotated[_Globs, AfterValidator(_non_empty)]
    max_ttl_seconds: int = Field(gt=0, le=366 * 86_400)
    # Left out of the dump (so of the policy hash) when not given: a policy file
    # that names no repositories keeps its hash.
    repos: Annotated[
        tuple[Annotated[str, AfterValidator(_repo_glob)], ...] | None,
        BeforeValidator(lambda v: v if v is None else _array(v)),
        AfterValidator(lambda v: v if v is None else _non_empty(_distinct(v))),
        Field(max_length=MAX_SELECTORS, exclude_if=lambda value: value is None),
    ] = None


class Issuer(BaseModel):
    """One ``[[issuers]]`` entry: an identity provider whose JWTs ``chit exchange`` accepts.

    The policy holds only names and paths; the engine reads the key file
    (``jwks_file`` or ``public_key_pem_file``, relative to the chit home).
    ``require_jti`` (default true) refuses a JWT without a ``jti`` claim: the
    engine exchanges each ``(issuer, jti)`` once (RFC 7519 section 4.1.7), so a
    JWT without one could be replayed until it expires.
    """

    model_config = _FROZEN
    issuer: Annotated[str, AfterValidator(_safe_text)] = Field(min_length=1, max_length=512)
    audience: Annotated[str, AfterValidator(_safe_text)] = Field(min_length=1, max_length=512)
    algorithms: Annotated[
        tuple[Annotated[str, AfterValidator(_known(ISSUER_ALGORITHMS, "algorithm"))], ...],
        BeforeValidator(_array),
        AfterValidator(_distinct),
        AfterValidator(_non_empty),
    ]
    jwks_file: Annotated[str, AfterValidator(_home_file)] | None = None
    public_key_pem_file: Annotated[str, AfterValidator(_home_file)] | None = None
    leeway_seconds: int = Field(default=30, ge=0, le=MAX_LEEWAY_SECONDS)
    # Left out of the dump (so of the policy hash) at its default, as ``issuers``
    # is when empty: a policy file that does not mention it keeps its hash.
    require_jti: bool = Field(default=True, exclude_if=lambda value: value is True)
    mappings: Annotated[tuple[IssuerMapping, ...], BeforeValidator(_array)] = Field(
        default=(), max_length=MAX_MAPPINGS
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> Issuer:
        if (self.jwks_file is None) == (self.public_key_pem_file is None):
            raise _located("jwks_file", "give exactly one of jwks_file and public_key_pem_file")
        return self


class Policy(BaseModel):
    """A whole policy document.

    ``default`` decides a call that no allow rule matches; allow rules only mean
    something when it is ``deny``, so an allow rule under ``default = "allow"``
    is an error (it would silently grant nothing).
    """

    model_config = _FROZEN
    version: Literal[1] = 1
    default: Literal["allow", "deny"] = "allow"
    limits: Limits = Limits()
    paths: PathRules = PathRules()
    commit: CommitRules = CommitRules()
    rules: Annotated[tuple[Rule, ...], BeforeValidator(_array)] = Field(
        default=(), max_length=MAX_RULES
    )
    rate_limits: Annotated[tuple[RateLimit, ...], BeforeValidator(_array)] = Field(
        default=(), max_length=MAX_RATE_LIMITS
    )
    # Left out of the dump (so of the policy hash) when empty: policies without
    # issuers keep the hash they had before issuers existed.
    issuers: Annotated[tuple[Issuer, ...], BeforeValidator(_array)] = Field(
        default=(), max_length=MAX_ISSUERS, exclude_if=lambda value: not value
    )
    # ``[[approval]]`` tables (policy/approval.py); left out of the dump when
    # empty, so policies without them keep their hash.
    approval: Annotated[tuple[ApprovalRule, ...], BeforeValidator(_array)] = Field(
        default=(), max_length=MAX_APPROVALS, exclude_if=lambda value: not value
    )
    # Left out of the dump (so of the policy hash) when it lists no tool:
    # policies without confirmation keep the hash they had before it existed.
    confirm: Confirm = Field(default=Confirm(), exclude_if=lambda value: not value.tools)
    _index: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _allow_needs_default_deny(self) -> Policy:
        if self.default == "allow":
            for i, rule in enumerate(self.rules):
                if rule.effect == "allow":
                    raise _located(
                        f"rules[{i}].effect",
                        'an allow rule takes effect only with default = "deny" (everything '
                        "not denied is already allowed); set default, or remove the rule",
                    )
        return self

    @model_validator(mode="after")
    def _issuers_distinct(self) -> Policy:
        seen: set[str] = set()
        for i, entry in enumerate(self.issuers):
            if entry.issuer in seen:
                raise _located(f"issuers[{i}].issuer", "the same issuer is configured twice")
            seen.add(entry.issuer)
        return self


DEFAULT_POLICY_TOML = """\
# chit organisation policy (docs/policy.md).
version = 1
default = "allow"               # a call no rule allows: "allow" or "deny"

[limits]
file_bytes = 1048576            # largest file an agent may read or write
staged_bytes = 8388608          # staged bytes per session
staged_files = 256              # staged paths per session
files_per_commit = 256          # changed paths in one commit
token_lifetime_seconds = 604800 # longest lifetime of a minted or delegated token (7 days)
delegation_depth = 3            # most delegation hops below a root token (0 to 8)

[paths]
# Never readable or writable through chit (beyond the built-in .git rule).
forbidden = ["**/.env", "**/*.pem", "**/id_rsa", "**/id_ed25519"]
# Sealed at rest: encrypted in git, plaintext only through chit (docs/sealing.md).
protected = []

[commit]
message_min_length = 1          # characters in a commit message

# Rules and rate limits are arrays of tables; for example:
#
# [[rules]]
# effect = "deny"
# agents = ["ci-*"]
# tools = ["commit"]
# reason = "CI bots propose changes; people commit them"
#
# [[rate_limits]]
# agents = ["**"]
# tools = ["commit"]
# calls = 60
# per_seconds = 3600
"""


def _location(loc: tuple[int | str, ...]) -> str:
    """``("rules", 3, "agents", 0)`` -> ``rules[3].agents[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith(("function-", "tuple[", "nullable[", "json-or-python")):
            out += f".{part}" if out else part
    return out or "policy"


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        where = _location(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "policy_located":
            ctx = err.get("ctx") or {}
            sub = str(ctx.get("where", ""))
            where = sub if where == "policy" else f"{where}.{sub}"
            message = str(ctx.get("message", message))
        elif err["type"] == "extra_forbidden":
            message = "unknown key"
        problems.append((where, message))
    return problems


_HEADER = re.compile(r"\s*(\[\[?)\s*([A-Za-z0-9_-]+)\s*\]\]?\s*(?:#.*)?")
_KEY = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")
_LOCATION = re.compile(r"([A-Za-z0-9_-]+)(?:\[(\d+)\])?(?:\.([A-Za-z0-9_-]+))?.*")
_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def locate(text: str, location: str) -> int | None:
    """Best-effort line number (1-based) of a problem's location in a policy's text.

    Understands the layout of ``docs/policy.md``: ``[table]`` and ``[[array]]``
    headers and ``key = value`` lines (dotted keys and inline tables are not
    followed). ``toml`` locations take the line from the parser's message.

    Args:
        text: The policy's TOML text.
        location: A location from :class:`PolicyError` (``rules[3].agents[0]``).

    Returns:
        The line of the key, else of its table's header, else None.
    """
    found = _LOCATION.fullmatch(location)
    if found is None:
        return None
    head, index, key = found.group(1), found.group(2), found.group(3)
    section: tuple[str, int] | None = None  # (table name, array entry index)
    counts: dict[str, int] = {}
    header_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.fullmatch(line)
        if header is not None:
            name = header.group(2)
            counts[name] = counts.get(name, -1) + 1
            section = (name, counts[name] if header.group(1) == "[[" else 0)
            if section == (head, int(index or 0)):
                header_line = number
                if key is None:
                    return number
            continue
        entry = _KEY.match(line)
        if entry is None:
            continue
        if section is None and key is None and index is None and entry.group(1) == head:
            return number
        if section == (head, int(index or 0)) and entry.group(1) == key:
            return number
    return header_line


def _toml_line(message: str) -> int | None:
    found = _TOML_LINE.search(message)
    return int(found.group(1)) if found else None


def load(text: str) -> Policy:
    """Parse and validate a TOML policy document.

    Args:
        text: TOML text (TOML 1.0).

    Returns:
        The frozen :class:`Policy`.

    Raises:
        PolicyError: With one ``(location, message)`` per problem, for TOML
            syntax errors (location ``toml``), unknown keys, wrong types or
            invalid values (location ``rules[3].agents[0]`` and the like).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The operator's own file: the parser's position and reason are what they need.
        raise PolicyError([("toml", str(exc))], lines=[_toml_line(str(exc))]) from None
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        found = [(locate(text, loc), loc, msg) for loc, msg in _problems(exc)]
        found.sort(key=lambda item: item[0] if item[0] is not None else len(text))
        raise PolicyError(
            [(loc, msg) for _line, loc, msg in found], lines=[line for line, _, _ in found]
        ) from None
