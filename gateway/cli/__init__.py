"""The ``chit`` command line, for operators, agent hosts and auditors (README.md).

Every engine error is caught in one place (:func:`main`, through
:func:`gateway._reporting.reported`), printed as its code and message (never a
traceback, never a token or key) and turned into exit status 2; a failed audit
exits 1 (docs/errors.md). Ctrl-C ends a command quietly with status 130; a
reader that closes the output early (``chit audit log | head``) is no error
(docs/deployment.md, "Stopping"). Each command group has its module (its
arguments and its handlers); :mod:`gateway.cli.parser` puts them together.
"""

from __future__ import annotations

import logging
import os
import select
import sys
from collections.abc import Sequence

from gateway._reporting import reported
from gateway.cli.parser import build_parser

__all__ = ["EXIT_INTERRUPTED", "main"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


class _ReaderGone(BaseException):  # passes through every handler of errors
    """stdout's reader closed it (``| head``): the command stops, and that is no error."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 success (also when the reader of stdout closed it
        early), 1 a check failed (audit), 2 an error, 130 interrupted (Ctrl-C).
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit: a closed pipe is seen below
    except (_ReaderGone, BrokenPipeError) as exc:
        if isinstance(exc, BrokenPipeError) and not _stdout_closed():
            raise
        _discard_stdout()
        return 0
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
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

    def run() -> int:
        try:
            status = int(args.func(args))
            sys.stdout.flush()
        except BrokenPipeError:
            if not _stdout_closed():
                raise  # another pipe (an engine's socket): an error, reported as one
            raise _ReaderGone from None
        return status

    return reported(run, args.command, as_json=bool(getattr(args, "json", False)))


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (``POLLERR``)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, ValueError, OSError):
        return False


def _discard_stdout() -> None:
    """Point stdout at the null device, so the flush at exit has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, ValueError, OSError):
        pass
