"""``chit state migrate``: bring the state store's schema to this chit's version.

Engines and commands migrate the store forward when they open it; this does it
explicitly, for an operator who upgrades chit before restarting engines, and
``--check`` only reports (docs/deployment.md, "Schema versions").
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_FAILED, EXIT_OK, print_json

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_state"]


def add_state(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit state migrate`` to ``sub``."""
    state = sub.add_parser(
        "state", help="the engine's state store (docs/deployment.md)"
    ).add_subparsers(dest="state_command", required=True)
    p = state.add_parser("migrate", parents=[common],
                         help="migrate the state store's schema to this chit's version")
    p.add_argument("--check", action="store_true",
                   help="only report the versions; exit 1 if a migration is due")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    info = admin.migrate_state(home, state=args.state, check=args.check)
    if args.json:
        print_json(info)
    elif args.check:
        due = "a migration is due" if info["due"] else "up to date"
        print(f"{info['store']}: schema {info['version']} (this chit: {info['known']}); {due}")
    else:
        print(f"{info['store']}: schema {info['before']} -> {info['version']}")
    return EXIT_FAILED if args.check and info["due"] else EXIT_OK
