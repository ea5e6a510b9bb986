"""``chit audit export`` and ``chit audit attest-lane``: attestations for supply-chain tools.

``export`` writes a range's verified attestations (JSON Lines of DSSE
envelopes) and the public keys that verify them; ``attest-lane`` signs a
summary of a lane's audit. Both exit 1 when something is unattested or fails;
docs/attestations.md says what is written and how to check it without chit.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_FAILED, EXIT_OK, print_json, term, write_new_file
from gateway.cli._trusted import public_keys

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_attest"]

_REPO_HELP = ("the repository: a name of a [[repo]] table of <home>/engine.toml, or a path "
              "(the engine's, or a mirror clone of its remote); default: the home's only one")
_KEYS_HELP = "trusted public keys (chit keys export-public); default: the home's signing keys"


def add_attest(
    audit: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``export`` and ``attest-lane`` to ``chit audit``'s subcommands."""
    p = audit.add_parser(
        "export", parents=[common],
        help="write the in-toto attestations of a lane or range, and the keys that verify them",
    )
    p.add_argument("range", metavar="RANGE",
                   help="a lane (agent/NAME: its commits not on the base), REV..agent/NAME, "
                   "or REV..REV (its commits that have a chit note)")
    p.add_argument("--repo", metavar="NAME|PATH", help=_REPO_HELP)
    p.add_argument("--base", help="the base branch (default: the configured one, else the "
                   "branch HEAD names)")
    p.add_argument("--format", choices=("in-toto", "json"), default="in-toto",
                   help="in-toto: attestations.intoto.jsonl, one DSSE envelope a line "
                   "(default); json: attestations.jsonl, statements decoded")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="the folder to write (created if missing)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier export in DIR")
    p.add_argument("--keys", help=_KEYS_HELP)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_export)
    p = audit.add_parser(
        "attest-lane", parents=[common],
        help="audit a lane and print a signed in-toto summary of the verdict (exit 1 if "
        "it failed)",
    )
    p.add_argument("lane", metavar="LANE", help="agent/NAME")
    p.add_argument("--repo", metavar="NAME|PATH", help=_REPO_HELP)
    p.add_argument("--base", help="the base branch (default: the configured one, else the "
                   "branch HEAD names)")
    p.add_argument("--keys", help=_KEYS_HELP + " (to audit; the home's active key signs)")
    p.add_argument("--out", metavar="FILE",
                   help="write the DSSE envelope to FILE (which must not exist) instead "
                   "of stdout")
    p.set_defaults(func=cmd_audit_attest_lane)


def cmd_audit_export(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    path, base = admin.resolve_audit_repo(home, args.repo)
    report = admin.export_attestations(
        path, args.range, public_keys=public_keys(args), form=args.format, out=args.out,
        base=args.base or base, force=args.force,
    )
    if args.json:
        print_json(report)
    else:
        for item in report["unattested"]:
            lane = f" {term(item['lane'])}" if item["lane"] else ""
            print(f"unattested {item['commit'][:12]}{lane}: {item['reason']}",
                  file=sys.stderr)
        count = len(report["exported"])
        print(f"exported {count} attestation{'s' * (count != 1)} of {term(args.range)} to "
              f"{term(report['out'])}: {', '.join(report['files'])}")
        if report["unattested"]:
            print(f"FAILED: {len(report['unattested'])} commit(s) without an attestation "
                  "that verifies", file=sys.stderr)
    return EXIT_OK if report["ok"] else EXIT_FAILED


def cmd_audit_attest_lane(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    path, base = admin.resolve_audit_repo(home, args.repo)
    found = admin.attest_lane(home, path, args.lane, public_keys=public_keys(args),
                              base=args.base or base)
    if args.out:
        write_new_file(args.out, found["envelope"] + "\n", 0o644)
    else:
        sys.stdout.write(found["envelope"] + "\n")
    verdict = found["statement"]["predicate"]["verdict"]
    state = "ok" if verdict["ok"] else "FAILED"
    print(f"attested {term(found['lane'])} at {found['head'][:12]}: {state}, "
          f"{verdict['checked']} commits, {len(verdict['findings'])} findings "
          f"({found['digest']})", file=sys.stderr)
    return EXIT_OK if found["ok"] else EXIT_FAILED
