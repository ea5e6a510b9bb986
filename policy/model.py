"""Policy documents as frozen, validated models (pydantic), loaded from TOML.

See ``docs/policy.md`` for every field, its default and an example. Unknown keys
are errors, never ignored.
"""

from __future__ import annotations

import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from policy.errors import PolicyError
from policy.paths import validate_glob

__all__ = ["DEFAULT_POLICY_TOML", "Decision", "Limits", "PathRules", "Policy", "Request", "load"]

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True)


class Limits(BaseModel):
    """Size and lifetime limits. Bytes are bytes, times are seconds."""

    model_config = _FROZEN
    file_bytes: int = Field(default=1_048_576, gt=0)
    staged_bytes: int = Field(default=8_388_608, gt=0)
    staged_files: int = Field(default=256, gt=0)
    token_lifetime_seconds: int = Field(default=7 * 24 * 3600, gt=0)
    delegation_depth: int = Field(default=3, ge=0, le=8)


class PathRules(BaseModel):
    """Path rules beyond the built-in ``.git`` rule.

    ``forbidden`` paths are never readable or writable through chit. ``protected``
    paths are sealed at rest in later versions; until sealing exists they are
    treated exactly like ``forbidden`` (fail closed).
    """

    model_config = _FROZEN
    forbidden: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()

    @field_validator("forbidden", "protected", mode="before")
    @classmethod
    def _globs(cls, value: object) -> tuple[str, ...]:
        if not isinstance(value, list | tuple):
            raise ValueError("must be a list of globs")
        return tuple(validate_glob(v) for v in value)


class Policy(BaseModel):
    """A whole policy document."""

    model_config = _FROZEN
    version: Literal[1] = 1
    limits: Limits = Limits()
    paths: PathRules = PathRules()


class Request(BaseModel):
    """What the engine asks the policy about one call (plain, pure data).

    Attributes:
        agent: The calling agent's name.
        tool: The tool name.
        operation: The operation the tool needs (``none`` for effective_scope).
        paths: Repository paths the call touches (validated, in scope).
        content_bytes: Size of one file being written, in bytes.
        staged_bytes: Staged bytes in the session after this call.
        staged_files: Staged paths in the session after this call.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    agent: str
    tool: str
    operation: str
    paths: tuple[str, ...] = ()
    content_bytes: int = 0
    staged_bytes: int = 0
    staged_files: int = 0


class Decision(BaseModel):
    """The outcome of :func:`policy.evaluate`: stored with audit records.

    Attributes:
        allowed: Whether the request may proceed.
        code: ``None`` when allowed, else ``path_forbidden``, ``policy_denied``
            or ``limit_exceeded``.
        rule: The rule that decided, as a dotted location (``limits.file_bytes``).
        reasons: Caller-safe explanations.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    allowed: bool
    code: str | None = None
    rule: str | None = None
    reasons: tuple[str, ...] = ()


DEFAULT_POLICY_TOML = """\
# chit organisation policy (docs/policy.md).
version = 1

[limits]
file_bytes = 1048576            # largest file an agent may read or write
staged_bytes = 8388608          # staged bytes per session
staged_files = 256              # staged paths per session
token_lifetime_seconds = 604800 # longest lifetime of a minted or delegated token (7 days)
delegation_depth = 3            # most delegation hops below a root token (0 to 8)

[paths]
# Never readable or writable through chit (beyond the built-in .git rule).
forbidden = ["**/.env", "**/*.pem", "**/id_rsa", "**/id_ed25519"]
# Sealed at rest in a later version; until then treated like forbidden.
protected = []
"""


def load(text: str) -> Policy:
    """Parse and validate a TOML policy document.

    Args:
        text: TOML text (TOML 1.0).

    Returns:
        The frozen :class:`Policy`.

    Raises:
        PolicyError: With one ``(location, message)`` per problem, for TOML
            syntax errors, unknown keys, wrong types or invalid values.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The operator's own file: the parser's position and reason are what they need.
        raise PolicyError([("toml", str(exc))]) from None
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = [
            (".".join(str(p) for p in err["loc"]) or "policy", err["msg"]) for err in exc.errors()
        ]
        raise PolicyError(problems) from None
