"""``chit approvals list|show``, ``chit approve`` and ``chit deny`` (docs/approvals.md).

A refused decision prints one line, ``chit approve: refused (REASON): ...``,
and exits 3 (4 for an unknown approval id; docs/errors.md); nothing is
recorded then.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from gateway.cli._output import EXIT_OK, print_json, term, when
from gateway.cli.freeze import operator_home

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_approvals"]


def add_approvals(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit approvals``, ``chit approve`` and ``chit deny`` to ``sub``."""
    apr = sub.add_parser(
        "approvals", help="calls waiting for an operator's approval: list, show"
    ).add_subparsers(dest="approvals_command", required=True)
    p = apr.add_parser("list", parents=[common], help="pending approvals, newest first")
    p.add_argument("--all", action="store_true", help="every approval, decided ones too")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_approvals_list)
    p = apr.add_parser("show", parents=[common], help="one approval: what is asked, its state")
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_approvals_show)
    for name, verb in (("approve", "approve"), ("deny", "deny")):
        p = sub.add_parser(name, parents=[common],
                           help=f"{verb} a pending call as an operator the policy lists")
        p.add_argument("id")
        p.add_argument("--as", dest="operator", metavar="NAME",
                       default=os.environ.get("CHIT_OPERATOR"),
                       help="the operator deciding (default: $CHIT_OPERATOR)")
        p.add_argument("--key", metavar="PATH",
                       help="the operator's private key (default: <home>/operators/NAME.key)")
        p.add_argument("--note", default="", help="a note for the agent and the record")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_decide, approve=name == "approve")


def _line(a: dict[str, Any]) -> str:
    paths = ",".join(a["asked"].get("paths", [])[:3])
    more = a["asked"].get("paths_total", 0) - 3
    return (f"{a['id']}  {a['state']:<8} {term(a['tool'])} by {term(a['agent'])} on "
            f"{term(a['repo'])}  {term(paths)}{f' (+{more})' if more > 0 else ''}  "
            f"expires {when(a['expires_at'])}")


def cmd_approvals_list(args: argparse.Namespace) -> int:
    from engine import admin

    found = admin.list_approvals(operator_home(args), every=args.all, state=args.state)
    if args.json:
        print_json(found)
        return EXIT_OK
    if not found:
        print("no pending approvals" if not args.all else "no approvals")
    for approval in found:
        print(_line(approval))
    return EXIT_OK


def cmd_approvals_show(args: argparse.Namespace) -> int:
    from engine import admin

    a = admin.show_approval(operator_home(args), args.id, state=args.state)
    if args.json:
        print_json(a)
        return EXIT_OK
    asked = a["asked"]
    print(f"approval {a['id']}: {a['state']}")
    print(f"  asked      {term(a['tool'])} by {term(a['agent'])} on {term(a['repo'])}, "
          f"session {term(a['session'])}, token {a['token_id']}")
    if "summary" in asked:
        print(f"  change     {term(asked['summary'])}")
    if "grant" in asked:
        print(f"  grant      {term(asked['grant'])}")
    print(f"  paths      {term(asked.get('paths', []))}")
    print(f"  approvers  {', '.join(a['approvers'])} ({a['rule']})")
    if a["reason"]:
        print(f"  reason     {term(a['reason'])}")
    print(f"  requested  {when(a['created_at'])}, expires {when(a['expires_at'])}")
    if a["decided_by"]:
        note = f": {term(a['note'])}" if a["note"] else ""
        print(f"  decided    by {term(a['decided_by'])} at {when(a['decided_at'])}{note}")
    if a["used_at"]:
        print(f"  used       {when(a['used_at'])}")
    print(f"  request    {a['request']}")
    return EXIT_OK


def cmd_decide(args: argparse.Namespace) -> int:
    from engine import admin

    if not args.operator:
        raise ValueError("name the operator deciding: --as NAME (or $CHIT_OPERATOR)")
    info = admin.decide_approval(
        operator_home(args), args.id, operator=args.operator, approve=args.approve,
        key=args.key, note=args.note, state=args.state,
    )
    if args.json:
        print_json(info)
        return EXIT_OK
    print(f"{info['id']} {info['decision']} by {info['operator']} (key "
          f"{info['operator_key']}); the agent's retry "
          + ("runs once" if info["decision"] == "approved" else "is refused")
          + f" until {when(info['expires_at'])}")
    if not info["logged"]:
        print("warning: the decision could not be recorded in the call log")
    return EXIT_OK
