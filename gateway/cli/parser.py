"""The ``chit`` argument parser: the global options, then each command from its module.

Commands are added in the order ``chit --help`` lists them (README.md shows each).
"""

from __future__ import annotations

import argparse

from gateway import __version__
from gateway.cli import (
    approvals,
    audit,
    completion,
    doctor,
    freeze,
    index,
    keys,
    operators,
    repos,
    serve,
    setup,
    state,
    tokens,
)

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``chit`` command; each sets ``func``, its handler."""
    parser = argparse.ArgumentParser(
        prog="chit", description="Capability gateway for coding agents."
    )
    parser.add_argument("--home", help="chit home (default: $CHIT_HOME, else ~/.chit)")
    parser.add_argument("--state", metavar="URL",
                        help="state store: sqlite:///PATH or postgresql://... (default: "
                        "$CHIT_STATE, else [state] url in <home>/engine.toml, else "
                        "<home>/state.db; docs/deployment.md)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    parser.add_argument("--version", action="version", version=f"chit {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help="chit home")
    common.add_argument("--state", metavar="URL", default=argparse.SUPPRESS,
                        help="state store URL (docs/deployment.md)")
    sub = parser.add_subparsers(dest="command")  # none: main() prints the help
    setup.add_init(sub, common)
    tokens.add_mint(sub, common)
    tokens.add_exchange(sub, common)
    tokens.add_inspect(sub, common)
    tokens.add_attenuate(sub, common)
    tokens.add_revoke(sub, common)
    keys.add_keys(sub, common)
    setup.add_policy(sub, common)
    serve.add_mcp(sub, common)
    serve.add_engine(sub, common)
    repos.add_repos(sub, common)
    repos.add_lanes(sub, common)
    freeze.add_freeze(sub, common)
    operators.add_operators(sub, common)
    approvals.add_approvals(sub, common)
    state.add_state(sub, common)
    audit.add_audit(sub, common)
    doctor.add_doctor(sub, common)
    index.add_index(sub, common)
    setup.add_demo(sub, common)
    completion.add_completion(sub, common)
    parser.set_defaults(root_parser=parser)  # chit completion reads the whole tree
    return parser
