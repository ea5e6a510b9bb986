"""``chit repos list|status`` and ``chit lanes list``: what the engine on a home serves.

Read-only. The repositories are those ``chit engine serve`` would serve: the
``[[repo]]`` tables of ``<home>/engine.toml``, or ``--repo [NAME=]PATH``
given here. ``repos status`` also asks each remote what it lacks and exits 1
when a remote is behind, as ``chit doctor`` does (docs/deployment.md,
"Seeing what exists").
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway.cli._output import EXIT_FAILED, EXIT_OK, print_json, term

if TYPE_CHECKING:
    from argparse import _SubParsersAction

    from engine.service import RepoSpec

__all__ = ["add_lanes", "add_repos"]

_SUBJECT_SHOWN = 50
"""Characters of a commit's first line in the human listing (``--json`` has all of it)."""

_REPO_HELP = ("a repository to show, as `chit engine serve` takes it: [NAME=]PATH (a value with "
              "/ or =), or the NAME of one of the home's [[repo]] tables; repeatable. Default: "
              "every [[repo]] table of <home>/engine.toml")


def add_repos(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit repos list`` and ``chit repos status`` to ``sub``."""
    repos = sub.add_parser(
        "repos", help="the repositories an engine on this home serves: list, status"
    ).add_subparsers(dest="repos_command", required=True)
    p = repos.add_parser(
        "list", parents=[common],
        help="each repository: name, base, remote, lanes and how far each is ahead of the base",
        description="List the repositories an engine on this home serves, from their local "
        "refs only (no network): name, base branch, remote (without credentials), and each "
        "lane with how many commits it is ahead of and behind the base.",
    )
    p.add_argument("--repo", action="append", metavar="[NAME=]PATH|NAME", help=_REPO_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_repos)
    p = repos.add_parser(
        "status", parents=[common],
        help="as list, and what each repository's remote lacks (exit 1 if a remote is behind)",
        description="As `chit repos list`, and each repository with a remote is compared with "
        "it now (git ls-remote, bounded in time): which lanes the remote is behind on or "
        "lacks, and why if known. Exit 1 if a remote is unreachable or behind, or a "
        "repository cannot be read.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="only this repository")
    p.add_argument("--repo", action="append", metavar="[NAME=]PATH|NAME", help=_REPO_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_repos)


def add_lanes(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit lanes list`` to ``sub``."""
    lanes = sub.add_parser(
        "lanes", help="the agents' lanes in the repositories an engine on this home serves"
    ).add_subparsers(dest="lanes_command", required=True)
    p = lanes.add_parser(
        "list", parents=[common],
        help="each lane: repository, agent, last commit, when, ahead/behind the base",
        description="List every lane (refs/heads/agent/*) of the repositories an engine on "
        "this home serves, from local refs only: its agent, last commit (id, UTC time, first "
        "line) and how many commits it is ahead of and behind the base branch.",
    )
    p.add_argument("--repo", action="append", metavar="NAME|[NAME=]PATH", help=_REPO_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_lanes)


def _specs(args: argparse.Namespace) -> list[RepoSpec]:
    """The repositories the command shows: ``--repo`` paths or the home's, narrowed by name."""
    from engine import admin
    from engine.service import resolve_repo_specs

    given: Sequence[str] = args.repo or []
    paths = [value for value in given if "/" in value or "=" in value]
    names = [value for value in given if value not in paths]
    if getattr(args, "name", None):
        names.append(args.name)
    home = admin.resolve_home(args.home)
    return admin.select_repos(resolve_repo_specs(home, paths or None), names)


def cmd_repos(args: argparse.Namespace) -> int:
    from engine import admin

    specs = _specs(args)
    status = args.repos_command == "status"
    report = admin.repos_status(specs) if status else admin.list_repos(specs)
    if args.json:
        print_json(report)
    else:
        for i, repo in enumerate(report["repositories"]):
            if i:
                print()
            _print_repository(repo)
    if status and not report["ok"]:
        return EXIT_FAILED
    return EXIT_OK


def cmd_lanes(args: argparse.Namespace) -> int:
    from engine import admin

    report = admin.list_lanes(_specs(args))
    if args.json:
        print_json(report)
        return EXIT_OK
    rows = [[term(lane["repo"]), term(lane["lane"]), term(lane["agent"]), lane["commit"][:12],
             lane["time"], f"+{lane['ahead']}/-{lane['behind']}", _subject(lane["subject"])]
            for lane in report["lanes"]]
    if rows:
        _table(["REPO", "LANE", "AGENT", "COMMIT", "WHEN", "AHEAD/BEHIND", "SUBJECT"], rows)
    else:
        print("no lanes")
    for odd in report["odd_refs"]:
        print(f"note: {term(odd['repo'])}: {term(odd['ref'])} names no lane (made outside chit)")
    for error in report["errors"]:
        print(f"error: {term(error['repo'])}: {_text(error['error'])}")
    return EXIT_OK


def _print_repository(repo: dict[str, Any]) -> None:
    remote = term(repo["remote"]) if repo["remote"] is not None else "(none)"
    base = term(repo["base"]) if repo["base"] is not None else "?"
    print(f"{term(repo['name'])}  {_text(repo['path'])}")
    if repo["error"] is not None:
        print(f"  error: {_text(repo['error'])}")
        return
    print(f"  base {base} at {repo['base_commit'][:12]}, remote {remote}")
    status = repo.get("remote_status")
    if status is not None:
        print(f"  remote: {_remote_summary(status)}")
    lanes = repo["lanes"]
    if lanes:
        with_remote = "remote_status" in repo and status is not None
        head = ["LANE", "AGENT", "AHEAD", "BEHIND", "LAST COMMIT"] + (
            ["REMOTE"] if with_remote else [])
        rows = [[term(lane["lane"]), term(lane["agent"]), str(lane["ahead"]),
                 str(lane["behind"]), f"{lane['commit'][:12]} {lane['time']}"]
                + ([term(lane["remote"] or "-")] if with_remote else [])
                for lane in lanes]
        _table(head, rows, indent="  ")
    else:
        print("  no lanes")
    for ref in repo["odd_refs"]:
        print(f"  note: {term(ref)} names no lane (made outside chit)")


def _remote_summary(status: dict[str, Any]) -> str:
    if not status["reachable"]:
        return f"unreachable: {_text(status['error'] or 'no reason given')}"
    if not status["behind"] and not status["parked"]:
        return "has every lane commit"
    parked = f", {len(status['parked'])} parked ref(s)" if status["parked"] else ""
    why = f"; why: {_text(status['why'])}" if status["why"] else ""
    return f"behind on {len(status['behind'])} lane(s){parked}{why}"


def _subject(text: str) -> str:
    return _text(text if len(text) <= _SUBJECT_SHOWN else text[: _SUBJECT_SHOWN - 1] + "~")


def _text(value: str) -> str:
    """Untrusted text with spaces for a terminal: as is if printable ASCII, else escaped."""
    return value if all(" " <= c <= "~" for c in value) else term(value)


def _table(head: list[str], rows: list[list[str]], *, indent: str = "") -> None:
    """Print ``rows`` under ``head``, columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        print(indent + "  ".join(cells).rstrip())
