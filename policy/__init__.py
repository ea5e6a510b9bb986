"""Declarative organisation policy: frozen data from TOML, pure evaluation.

Imports nothing from ``engine`` or ``gateway``.
"""

from policy.errors import PolicyDeniedError, PolicyError
from policy.evaluate import enforce, evaluate
from policy.model import DEFAULT_POLICY_TOML, Decision, Limits, PathRules, Policy, Request, load

__all__ = [
    "DEFAULT_POLICY_TOML",
    "Decision",
    "Limits",
    "PathRules",
    "Policy",
    "PolicyDeniedError",
    "PolicyError",
    "Request",
    "enforce",
    "evaluate",
    "load",
]
