"""What the engine asks the policy about one call, and the answer (docs/policy.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Decision", "Request"]


class Request(BaseModel):
    """What the engine asks the policy about one call (plain, pure data).

    Attributes:
        agent: The calling agent's name.
        tool: The tool name.
        operation: The operation the tool needs (``none`` for effective_scope).
        paths: Repository paths the call touches (validated, in scope); for
            ``commit``, the paths the commit changes.
        content_bytes: Size of one file being written or read, in bytes.
        staged_bytes: Staged bytes in the session after this call.
        staged_files: Staged paths in the session after this call.
        commit_files: Changed paths in the commit being made (``commit`` only).
        message: The commit message as it will be recorded (``commit`` only).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    agent: str
    tool: str
    operation: str
    paths: tuple[str, ...] = ()
    content_bytes: int = 0
    staged_bytes: int = 0
    staged_files: int = 0
    commit_files: int = 0
    message: str | None = None


class Decision(BaseModel):
    """The outcome of :func:`policy.evaluate`: stored with audit records.

    Attributes:
        allowed: Whether the request may proceed.
        code: ``None`` when allowed, else ``path_forbidden``, ``path_invalid``,
            ``policy_denied`` or ``limit_exceeded``.
        rule: The rule that decided, as a location in the policy document
            (``paths.forbidden``, ``rules[3]``, ``limits.file_bytes``,
            ``rate_limits[0]``, ``default``); ``None`` when allowed by default.
        reasons: Caller-safe explanations.
        retry_after: For a rate limit, whole seconds until the call would be
            admitted; otherwise ``None``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    allowed: bool
    code: str | None = None
    rule: str | None = None
    reasons: tuple[str, ...] = ()
    retry_after: int | None = None
