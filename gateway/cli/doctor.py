"""``chit doctor``: is the home usable, and is each repository's remote level with its lanes.

It changes nothing; exit 1 when something needs the operator (docs/deployment.md,
"Lanes on the organisation's remote"; docs/vital-signs.md), 2 when it cannot tell.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gateway.cli._output import EXIT_FAILED, EXIT_OK, print_json, term

EXIT_UNKNOWN = 2
"""``chit doctor`` could not tell (the state store could not be read)."""

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_doctor"]


def add_doctor(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit doctor`` to ``sub``."""
    p = sub.add_parser(
        "doctor", parents=[common],
        help="check the home, the state store and a repository, and whether its remote "
        "has every lane commit (exit 1 if not)",
    )
    p.add_argument("--repo", metavar="NAME|PATH",
                   help="a repository to examine: a name of a [[repo]] table of "
                   "<home>/engine.toml, or a path (default: every [[repo]] table)")
    p.add_argument("--base", help="its base branch (default: the branch its HEAD names)")
    p.add_argument("--remote", metavar="URL",
                   help="its remote (prefer a URL without a password: docs/deployment.md)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    repos = None
    if args.repo:
        repos = [admin.doctor_repository(home, args.repo, base=args.base, remote=args.remote)]
    report = admin.diagnose(home, repos, state=args.state)
    if args.json:
        print_json(report)
    else:
        for check in report["checks"]:
            mark = "ok  " if check["ok"] else "FAIL"
            print(f"{mark} {check['check']}: {check['detail']}")
        for sign in report["signs"]:
            if sign["sign"] != "policy":  # the policy check above said it
                print(f"{_mark(sign)} {_sign_line(sign)}")
        for seen in report["seen"]:
            print(f"seen {seen['kind']} {term(seen['label'])} ({term(seen['role'])}): "
                  f"{seen['age_seconds']} s ago")
        for repo in report["repositories"]:
            _print_repository(repo)
        print("doctor: " + {"healthy": "all good", "wrong": "needs attention",
                             "unknown": "cannot tell"}[report["verdict"]])
    return {"healthy": EXIT_OK, "wrong": EXIT_FAILED, "unknown": EXIT_UNKNOWN}[report["verdict"]]


def _print_repository(repo: dict[str, Any]) -> None:
    mark = "ok  " if repo["ok"] else "FAIL"
    if repo["error"]:
        print(f"{mark} repository {term(repo['name'])}: {repo['error']}")
        return
    print(f"{mark} repository {term(repo['name'])}: base {term(repo['base'])} at "
          f"{repo['base_head'][:12]}, {repo['lanes']} lanes")
    for sign in repo["signs"]:
        print(f"     {_sign_line(sign)}")
    remote = repo["remote"]
    if remote is None:
        return
    if not remote["reachable"]:
        print(f"     remote {term(remote['url'])}: unreachable: {term(remote['error'])}")
        return
    print(f"     remote {term(remote['url'])}: reachable")
    for lane in remote["lanes"]:
        if lane["state"] == "behind":
            print(f"     behind: {term(lane['lane'])} ({lane['commits']} commits not on the "
                  "remote)")
        elif lane["state"] != "level":
            print(f"     {lane['state'].replace('_', ' ')}: {term(lane['lane'])}")
    if remote["would_push"] is True:
        print("     why: the remote would take them now; the engine's next retry sends them")
    elif remote["would_push"]:
        print(f"     why: {term(remote['would_push'])}")


def _mark(sign: dict[str, Any]) -> str:
    return "ok  " if sign["state"] in ("ok", "stale") else "FAIL"


def _sign_line(sign: dict[str, Any]) -> str:
    """``sign: state: reason`` with what else the sign carries (docs/vital-signs.md)."""
    line = f"{sign['sign']}: {sign['state']}: {term(sign['reason'])}"
    if "found" in sign:
        line += f" (expected {term(sign['expected'])}, found {term(sign['found'])})"
    if sign.get("lanes"):
        line += " (lanes " + ", ".join(term(lane) for lane in sign["lanes"]) + ")"
    return line
