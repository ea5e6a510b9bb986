"""Declarative organisation policy: frozen data from TOML, pure evaluation.

Imports nothing from ``engine`` or ``gateway``. See ``docs/policy.md``.
"""

from policy.approval import ApprovalRule, approval_for, approval_match
from policy.confirm import Confirm
from policy.decision import Decision, Request
from policy.errors import PolicyDeniedError, PolicyError
from policy.evaluate import enforce, evaluate, rate_limits_for
from policy.model import (
    DEFAULT_POLICY_TOML,
    MAX_LEEWAY_SECONDS,
    OPERATIONS,
    TOOL_OPERATIONS,
    CommitRules,
    Issuer,
    IssuerMapping,
    Limits,
    PathRules,
    Policy,
    RateLimit,
    Rule,
    load,
    locate,
)

__all__ = [
    "DEFAULT_POLICY_TOML",
    "MAX_LEEWAY_SECONDS",
    "OPERATIONS",
    "TOOL_OPERATIONS",
    "ApprovalRule",
    "CommitRules",
    "Confirm",
    "Decision",
    "Issuer",
    "IssuerMapping",
    "Limits",
    "PathRules",
    "Policy",
    "PolicyDeniedError",
    "PolicyError",
    "RateLimit",
    "Request",
    "Rule",
    "approval_for",
    "approval_match",
    "enforce",
    "evaluate",
    "load",
    "locate",
    "rate_limits_for",
]
