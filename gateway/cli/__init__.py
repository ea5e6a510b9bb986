"""The ``chit`` command line, for operators, agent hosts and auditors (README.md).

Every engine error is caught in one place (:func:`main`), printed as its code
and message (never a traceback, never a token or key) and turned into exit
status 2; a failed audit exits 1 (docs/errors.md). Each command group has its
module (its arguments and its handlers); :mod:`gateway.cli.parser` puts them
together.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

from engine.errors import ChitError, ConfigurationError, StoreError
from gateway.cli._output import EXIT_ERROR
from gateway.cli.parser import build_parser

__all__ = ["main", "reported"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 success, 1 a check failed (audit), 2 an error.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return reported(lambda: int(args.func(args)), args.command)


def reported(run: Callable[[], int], command: str) -> int:
    """Run a command, printing any error the CLI knows as one line (no traceback).

    Also used by the worker processes of ``chit engine serve`` and ``chit mcp
    --http``, so a worker that cannot start says why as the command would.

    Args:
        run: The command; returns its exit status.
        command: The command's name, for operator-input errors.

    Returns:
        ``run``'s status, or 2 after printing an error.
    """
    try:
        status = run()
    except ChitError as exc:
        print(f"chit: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except ConfigurationError as exc:
        print(f"chit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except StoreError as exc:
        # Written for operators; names the store without its password.
        print(f"chit: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except ValueError as exc:
        # Operator input the engine refused (durations, globs, names, ids): the
        # messages are written for the operator and never carry secrets.
        print(f"chit {command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"chit: {exc.strerror or 'I/O error'}: {exc.filename or ''}", file=sys.stderr)
        return EXIT_ERROR
    return status
