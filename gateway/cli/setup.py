"""``chit init``, ``chit policy check`` and ``chit demo``: set up a home, check it, try it.

What a home holds is in keys/README.md; the policy file in docs/policy.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.cli._output import EXIT_ERROR, EXIT_FAILED, EXIT_OK, print_json

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_demo", "add_init", "add_policy"]


def add_init(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit init`` to ``sub``."""
    p = sub.add_parser(
        "init", parents=[common], help="create the keyring (0600) and the default policy"
    )
    p.add_argument("--repo", help="also check that this repository has a base branch with a "
                   "commit (the branch its HEAD names: main, master, ...)")
    p.add_argument("--base", help="with --repo: the base branch to check instead of HEAD's")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    info = admin.init_home(home)
    if args.repo:
        # Refuses a path that is not a repository whose base branch has a commit.
        repo = admin.open_repository(args.repo, base=args.base)
        info["repo"] = str(Path(args.repo).resolve())
        info["base"] = repo.base
    if args.json:
        print_json(info)
    else:
        print(f"chit home:  {info['home']}")
        print(f"root key:   {info['key_id']} (keys/root, 0600)")
        print(f"sealing:    {info['sealing_key_id']} (keys/sealing, 0600)")
        print(f"policy:     {info['policy']}" + (" (created)" if info["created_policy"] else ""))
        if args.repo:
            print(f"repository: {info['repo']} (base branch {info['base']})")
    return EXIT_OK


def add_policy(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit policy check`` to ``sub``."""
    pol = sub.add_parser("policy", parents=[common], help="check a policy file")
    pol_sub = pol.add_subparsers(dest="policy_command", required=True)
    p = pol_sub.add_parser(
        "check", parents=[common],
        help="report each error with its line and field; exit 1 if any (docs/policy.md)",
    )
    p.add_argument("file", nargs="?", help="the policy file (default: <home>/policy.toml)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_policy_check)


def cmd_policy_check(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    path = args.file or str(home / "policy.toml")
    report = admin.check_policy(path, home if home.is_dir() else None, state=args.state)
    if args.json:
        print_json(report)
    else:
        errors: list[dict[str, Any]] = report["errors"]  # type: ignore[assignment]
        for error in errors:
            where = f"{path}:{error['line']}" if error["line"] is not None else path
            print(f"{where}: {error['location']}: {error['message']}")
        if report["ok"]:
            print(f"{path}: valid ({report['rules']} rules, {report['rate_limits']} rate "
                  f"limits); policy hash {report['policy_hash']}")
        else:
            print(f"{path}: invalid ({len(errors)} errors)", file=sys.stderr)
    return EXIT_OK if report["ok"] else EXIT_FAILED


def add_demo(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit demo`` to ``sub``."""
    # No --home or --state: the demo makes a home of its own and removes it.
    p = sub.add_parser("demo", help="run chit end to end on a temporary repository")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import run_demo

    if args.home is not None or args.state is not None:
        print("chit demo: it runs in a temporary home and store of its own; "
              "--home and --state are not used (drop them)", file=sys.stderr)
        return EXIT_ERROR

    return run_demo(keep=args.keep)
