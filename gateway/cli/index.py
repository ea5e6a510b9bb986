"""``chit index``: index a repository's base branch before any agent asks (docs/semantic.md)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from gateway.cli._output import EXIT_OK, print_json
from gateway.cli.progress import Bar

if TYPE_CHECKING:
    from argparse import _SubParsersAction

    from engine.service import RepoSpec


def add_index(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit index`` to ``sub``."""
    p = sub.add_parser(
        "index", parents=[common],
        help="build the semantic index of a repository's base branch ahead of time, so no "
        "agent waits for it",
    )
    p.add_argument("--repo", metavar="NAME|PATH",
                   help="a repository: a name of a [[repo]] table of <home>/engine.toml, or a "
                   "path (default: every [[repo]] table)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_index)


def _specs(home: str, repo: str | None) -> list[RepoSpec]:
    from engine import admin
    from engine.errors import ConfigurationError
    from engine.service import resolve_repo_specs

    if repo is None:
        return resolve_repo_specs(home, None)
    if os.sep in repo or repo in (".", "..") or os.path.isdir(repo):
        return resolve_repo_specs(home, [repo])
    try:
        configured = resolve_repo_specs(home, None)
    except ConfigurationError:  # no engine.toml: no name can match
        configured = []
    return admin.select_repos(configured, [repo])


def cmd_index(args: argparse.Namespace) -> int:
    """Index each named repository's base branch; a bar on a terminal; exit 0 when done."""
    from engine import admin
    from engine.service import Engine, reporting

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    specs = _specs(str(home), args.repo)
    results: list[dict[str, Any]] = []
    with Engine(home, specs, state=args.state, role="embedded") as engine:
        for spec in specs:
            bar = Bar(enabled=False if args.json else None)  # on a terminal only
            try:
                with reporting(bar):
                    results.append(engine.index_base(spec.name))
            finally:
                bar.close()
            if not args.json:
                _print(results[-1])
    if args.json:
        print_json(results)
    return EXIT_OK


def _print(result: dict[str, Any]) -> None:
    head = f"{result['repo']}: {result['base']} at {result['commit'][:12]}"
    if result["up_to_date"]:
        print(f"{head}: up to date ({result['files']} files indexed, none to parse)")
    else:
        print(f"{head}: indexed {result['files']} files ({result['parsed']} parsed, "
              f"{result['loaded']} already indexed)")
