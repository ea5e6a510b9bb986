"""What the operator's and auditor's commands call: init, mint, keys, freeze, repos, audit.

The CLI reaches the engine only through this package, :mod:`engine.service`
and :mod:`engine.errors` (docs/architecture.md), and never handles keys itself:
it calls these. In the embedded deployment they share the CLI's process;
docs/threat-model.md says what that means. The token exchange is exported as
:class:`TokenExchange`, not as its one-shot ``exchange()``, whose name would
hide the :mod:`engine.admin.exchange` module. The engine's
:data:`~engine.limits.LIMITS` are exported too, for the bounds the CLI applies
before it calls in (how much of stdin it reads for a JWT, say).
``TokenExchange`` is imported on first use, so commands that exchange nothing
never load the JWT library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.admin.approvals import (
    ApprovalRefusedError,
    decide_approval,
    list_approvals,
    show_approval,
)
from engine.admin.attestations import attest_lane, export_attestations, resolve_audit_repo
from engine.admin.audit import provenance_graph, render_graph, verify_lanes
from engine.admin.calllog import (
    call_log_checkpoint,
    call_log_entries,
    call_log_verifier_keys,
    parse_anchor,
    parse_since,
    prove_consistency,
    prove_inclusion,
    read_checkpoint_file,
    verify_call_log,
)
from engine.admin.doctor import DoctorRepository, diagnose, doctor_repository
from engine.admin.edgesettings import RequestStateKeys, approval_url_template, request_state_keys
from engine.admin.freeze import freeze_status, set_freeze
from engine.admin.home import check_policy, ensure_home, init_home, open_repository, resolve_home
from engine.admin.keys import (
    export_public,
    list_keys,
    load_trusted_keys,
    retire_key,
    rotate_key,
    rotate_sealing_key,
    rotate_signing_key,
)
from engine.admin.operators import (
    add_operator,
    list_operators,
    load_operator_key,
    remove_operator,
)
from engine.admin.repos import list_lanes, list_repos, repos_status, select_repos
from engine.admin.seed import create_repository, files_from_directory
from engine.admin.state import copy_state, migrate_state
from engine.admin.tokens import (
    attenuate_token,
    inspect_token,
    mint_token,
    parse_duration,
    revoke,
)
from engine.limits import LIMITS

if TYPE_CHECKING:
    from engine.admin.exchange import TokenExchange

__all__ = [
    "LIMITS",
    "ApprovalRefusedError",
    "DoctorRepository",
    "RequestStateKeys",
    "TokenExchange",
    "add_operator",
    "approval_url_template",
    "attenuate_token",
    "attest_lane",
    "call_log_checkpoint",
    "call_log_entries",
    "call_log_verifier_keys",
    "check_policy",
    "copy_state",
    "create_repository",
    "decide_approval",
    "diagnose",
    "doctor_repository",
    "ensure_home",
    "export_attestations",
    "export_public",
    "files_from_directory",
    "freeze_status",
    "init_home",
    "inspect_token",
    "list_approvals",
    "list_keys",
    "list_lanes",
    "list_operators",
    "list_repos",
    "load_operator_key",
    "load_trusted_keys",
    "migrate_state",
    "mint_token",
    "open_repository",
    "parse_anchor",
    "parse_duration",
    "parse_since",
    "prove_consistency",
    "prove_inclusion",
    "provenance_graph",
    "read_checkpoint_file",
    "remove_operator",
    "render_graph",
    "repos_status",
    "request_state_keys",
    "resolve_audit_repo",
    "resolve_home",
    "retire_key",
    "revoke",
    "rotate_key",
    "rotate_sealing_key",
    "rotate_signing_key",
    "select_repos",
    "set_freeze",
    "show_approval",
    "verify_call_log",
    "verify_lanes",
]


def __getattr__(name: str) -> Any:
    """``TokenExchange``, imported from ``engine.admin.exchange`` when first asked for."""
    if name == "TokenExchange":
        from engine.admin.exchange import TokenExchange

        return TokenExchange
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
