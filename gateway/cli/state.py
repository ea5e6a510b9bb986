"""``chit state migrate`` and ``chit state copy``: the state store's schema, and switching stores.

Engines and commands migrate the store forward when they open it; ``migrate``
does it explicitly, for an operator who upgrades chit before restarting
engines, and ``--check`` only reports (docs/deployment.md, "Schema versions").
``copy --from URL`` moves the durable state of another store into the home's
store before engines start on it (docs/deployment.md, "Switching stores").
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_FAILED, EXIT_OK, print_json, term

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_state"]


def add_state(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit state migrate`` and ``chit state copy`` to ``sub``."""
    state = sub.add_parser(
        "state", help="the engine's state store (docs/deployment.md)"
    ).add_subparsers(dest="state_command", required=True)
    p = state.add_parser("migrate", parents=[common],
                         help="migrate the state store's schema to this chit's version")
    p.add_argument("--check", action="store_true",
                   help="only report the versions; exit 1 if a migration is due")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_migrate)
    p = state.add_parser(
        "copy", parents=[common],
        help="copy revocations, delegations, the freeze, the replay cache and the call log "
        "from another store into this home's store, which must hold none",
        description="Copy the durable state of the store --from names into the store this "
        "command resolves (--state, $CHIT_STATE, [state] url in <home>/engine.toml, else "
        "<home>/state.db), in one transaction; refused unless that store holds no durable "
        "state. Intents, staged paths, rate windows, session placements and the change feed "
        "are not copied (docs/deployment.md, \"Switching stores\").",
    )
    p.add_argument("--from", dest="source", metavar="URL", required=True,
                   help="the store to copy from: sqlite:///PATH or postgresql://...")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_copy)


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


_LABELS = {
    "revocations": "revocations",
    "delegations": "delegations",
    "engine_mode": "the freeze",
    "exchange_jti": "replay-cache entries",
    "call_log": "call-log entries",
    "call_log_checkpoint": "checkpoints",
    "call_log_tree": "the tree head",
    "call_log_head": "the first form's chain head",
}


def cmd_copy(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    info = admin.copy_state(home, args.source, state=args.state)
    if args.json:
        print_json(info)
        return EXIT_OK
    print(f"copied {term(info['from'])} -> {term(info['to'])}")
    for table, rows in info["copied"].items():
        print(f"  {_LABELS.get(table, table)}: {rows}")
    print("not copied (they start afresh): " + ", ".join(info["not_copied"]))
    return EXIT_OK
