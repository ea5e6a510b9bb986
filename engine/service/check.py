"""The steps of the ordered check a call runs once its token verified.

:class:`Checked` is what steps 1, 2 and 4 established for one token (done by
:meth:`engine.service.Engine._check`, shared by ``offer`` and ``invoke``); the
functions here are the per-call steps: the tool named exactly in the offer
(or ``engine_frozen``), the policy's decision, and the catalog the edge listed
(docs/architecture.md, "The ordered check").
"""

from __future__ import annotations

from dataclasses import dataclass

import policy
from engine.auth.verify import VerifiedToken
from engine.catalog.declarations import ToolSpec
from engine.errors import AccessDeniedError, StateError, denied
from engine.service.policyfile import PolicySnapshot
from engine.service.served import Served
from engine.tools.offer import Offer, offer_for

__all__ = ["Checked", "check_catalog", "check_policy", "offered_tool"]


@dataclass(frozen=True)
class Checked:
    """A token that passed validity and chain, and the offer it gets.

    Attributes:
        token: The verified token.
        offer: What it is offered now (read-only tools only when ``frozen``).
        frozen: The operator froze the engine, or it serves a read-only edge.
        policy: The policy this call is decided under, start to end.
        repo: The repository the offer or call acts on, inside the token's
            ``repos`` scope.
    """

    token: VerifiedToken
    offer: Offer
    frozen: bool = False
    policy: PolicySnapshot | None = None
    repo: Served | None = None


def offered_tool(checked: Checked, tool: object, *, read_only_edge: bool) -> ToolSpec:
    """Step 4 for a call: the offered tool named exactly ``tool``.

    Args:
        checked: The call's checked token.
        tool: The tool name exactly as the client sent it.
        read_only_edge: The engine serves a read-only edge (``chit mcp
            --read-only``), for the ``engine_frozen`` message.

    Returns:
        The tool's declaration.

    Raises:
        StateError: ``engine_frozen`` for a tool the token holds that is not
            read-only while the engine is frozen, before any argument is read.
        AccessDeniedError: ``tool_not_offered`` (with ``offered``) for any other
            name not in the offer.
    """
    spec = checked.offer.get(tool) if isinstance(tool, str) else None
    if spec is None and checked.frozen:
        # Read-only mode: a tool the token holds but that is not read-only
        # fails here, before any argument is read, so none can lift it.
        held = offer_for(checked.token.operations, checked.token.delegable)
        if isinstance(tool, str) and held.get(tool) is not None:
            raise StateError(
                "engine_frozen",
                "this engine serves read-only tools only"
                + ("" if read_only_edge else " (frozen by the operator)")
                + "; list tools to see them",
                offered=checked.offer.names(),
            )
    if spec is None:
        raise AccessDeniedError(
            "tool_not_offered",
            "this token is not offered that tool",
            offered=checked.offer.names(),
        )
    return spec


def check_policy(
    rules: policy.Policy, token: VerifiedToken, spec: ToolSpec, paths: tuple[str, ...]
) -> None:
    """Step 5: the organisation policy's decision on the call.

    Args:
        rules: The policy the call is decided under.
        token: The call's verified token.
        spec: The tool called.
        paths: The call's paths, already checked for scope.

    Raises:
        AccessDeniedError: The refusing decision's code (``policy_denied``,
            ``path_forbidden``, ...) with its ``rule``.
    """
    decision = policy.evaluate(
        rules,
        policy.Request(
            agent=token.agent, tool=spec.name, operation=spec.operation, paths=paths
        ),
    )
    if not decision.allowed:
        raise denied(decision)


def check_catalog(spec: ToolSpec, offered_catalog_hash: str | None, checked: Checked) -> None:
    """A tool that is not read-only runs only if the edge listed the current catalog.

    A write must be made having been shown the catalog it records.

    Raises:
        StateError: ``catalog_changed`` (with the current ``catalog_hash``).
    """
    if not spec.read_only and offered_catalog_hash != checked.offer.catalog_hash:
        raise StateError(
            "catalog_changed",
            "no tool catalog was listed in this session; list tools first"
            if offered_catalog_hash is None
            else "the tool catalog changed since you listed it; list tools again",
            catalog_hash=checked.offer.catalog_hash,
        )
