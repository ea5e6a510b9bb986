"""``chit freeze on|off|status``: read-only mode for every engine on a home.

What a frozen engine offers is in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_OK, print_json, term, when

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_freeze"]


def add_freeze(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit freeze`` and its subcommands to ``sub``."""
    freeze = sub.add_parser(
        "freeze", help="read-only mode for every engine on this home: on, off, status"
    ).add_subparsers(dest="freeze_command", required=True)
    p = freeze.add_parser("on", parents=[common], help="offer only read-only tools from the "
                          "next call; every other call fails with engine_frozen")
    p.add_argument("--reason", default="", help="a note kept with the mode and in the call log")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_freeze)
    p = freeze.add_parser("off", parents=[common], help="serve every tool tokens unlock again")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_freeze)
    p = freeze.add_parser("status", parents=[common], help="frozen or not, since when, why")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_freeze)


def cmd_freeze(args: argparse.Namespace) -> int:
    from engine import admin

    home = operator_home(args)
    if args.freeze_command == "status":
        info = admin.freeze_status(home, state=args.state)
    else:
        on = args.freeze_command == "on"
        info = admin.set_freeze(home, on, reason=args.reason if on else "", state=args.state)
    if args.json:
        print_json(info)
        return EXIT_OK
    if args.freeze_command != "status":
        print("frozen: every engine on this home serves read-only tools from its next call"
              if info["frozen"] else "unfrozen: engines serve every tool their tokens unlock")
        if not info["logged"]:
            print("warning: the change could not be recorded in the call log", file=sys.stderr)
    elif info["frozen"]:
        reason = f": {term(info['reason'])}" if info["reason"] else ""
        print(f"frozen since {when(info['changed_at'])}{reason}")
    else:
        print("not frozen")
    return EXIT_OK


def operator_home(args: argparse.Namespace) -> Path:
    """The home ``args`` name, which must hold a keyring."""
    from engine import admin

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    return home
