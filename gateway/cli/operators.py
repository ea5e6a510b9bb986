"""``chit operators add|list|remove``: who may approve calls (docs/approvals.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_OK, print_json, term, when
from gateway.cli.freeze import operator_home

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_operators"]


def add_operators(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit operators`` and its subcommands to ``sub``."""
    ops = sub.add_parser(
        "operators", help="the people who may approve calls: add, list, remove"
    ).add_subparsers(dest="operators_command", required=True)
    p = ops.add_parser("add", parents=[common], help="make an operator's key pair and register "
                       "its public key in the state store")
    p.add_argument("name", help="the operator's name (a-z 0-9 . _ -)")
    p.add_argument("--group", action="append", default=[], metavar="G",
                   help="a group the operator belongs to (repeat for several)")
    p.add_argument("--key-out", metavar="PATH", help="write the private key there (a new "
                   "file, 0600) instead of <home>/operators/NAME.key: keep it with the person")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_operators_add)
    p = ops.add_parser("list", parents=[common], help="registered operators and their groups")
    p.add_argument("--removed", action="store_true", help="include removed operators")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_operators_list)
    p = ops.add_parser("remove", parents=[common], help="an operator can no longer approve "
                       "(what it signed still verifies)")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_operators_remove)


def cmd_operators_add(args: argparse.Namespace) -> int:
    from engine import admin

    home = operator_home(args)
    info = admin.add_operator(home, args.name, groups=tuple(args.group), key_out=args.key_out,
                              state=args.state)
    if args.json:
        print_json(info)
        return EXIT_OK
    groups = ", ".join(info["groups"]) or "none"
    print(f"operator {info['name']} added: key {info['key_id']}, groups {groups}")
    print(f"private key: {info['key_file']} (0600; whoever can read it can approve as "
          f"{info['name']})")
    return EXIT_OK


def cmd_operators_list(args: argparse.Namespace) -> int:
    from engine import admin

    found = admin.list_operators(operator_home(args), removed=args.removed, state=args.state)
    if args.json:
        print_json(found)
        return EXIT_OK
    if not found:
        print("no operators")
    for op in found:
        groups = ",".join(op["groups"]) or "-"
        gone = f"  removed {when(op['removed_at'])}" if op["removed_at"] else ""
        print(f"{term(op['name'])}  {op['key_id']}  groups {groups}  added "
              f"{when(op['added_at'])}{gone}")
    return EXIT_OK


def cmd_operators_remove(args: argparse.Namespace) -> int:
    from engine import admin

    home = operator_home(args)
    info = admin.remove_operator(home, args.name, state=args.state)
    if args.json:
        print_json(info)
    else:
        print(f"operator {info['name']} removed: it can no longer approve")
    policy_file = Path(home) / "policy.toml"
    if policy_file.is_file():
        checked = admin.check_policy(policy_file, home=home, state=args.state)
        if not checked["ok"]:
            # The engine refuses a policy naming approvers the store does not know.
            print(f"warning: {policy_file} now names approvers no operator is (see "
                  "`chit policy check`); engines refuse every call until it is fixed",
                  file=sys.stderr)
    return EXIT_OK
