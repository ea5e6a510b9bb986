"""How a ``chit`` command, or a worker process it started, reports an error: one line, status 2.

Shared by the CLI (:func:`gateway.cli.main`) and the worker processes of ``chit
engine serve`` and ``chit mcp --http`` (gateway/_workers.py), so a worker that
cannot start says why as the command would (docs/errors.md, exit statuses).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from engine.errors import ChitError, ConfigurationError, StoreError

__all__ = ["EXIT_ERROR", "reported"]

EXIT_ERROR = 2


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
