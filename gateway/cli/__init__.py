"""The ``chit`` command line, for operators, agent hosts and auditors (README.md).

Every engine error is caught in one place (:func:`main`, through
:func:`gateway._reporting.reported`), printed as its code and message (never a
traceback, never a token or key) and turned into exit status 2; a failed audit
exits 1 (docs/errors.md). Each command group has its module (its arguments and
its handlers); :mod:`gateway.cli.parser` puts them together.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from gateway._reporting import reported
from gateway.cli.parser import build_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 success, 1 a check failed (audit), 2 an error.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `chit`: what it can do, not an error
        parser.print_help()
        return 0
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return reported(lambda: int(args.func(args)), args.command)
