"""How a ``chit`` command, or a worker process it started, reports an error: one line, by cause.

Shared by the CLI (:func:`gateway.cli.main`) and the worker processes of ``chit
engine serve`` and ``chit mcp --http`` (gateway/_workers.py), so a worker that
cannot start says why as the command would. The exit statuses are chit's
contract with scripts (docs/errors.md, "Exit statuses"): 0 done, 1 a check
failed, 2 usage (the command line, its input or the home's configuration is
wrong), 3 refused, 4 not found, 5 internal (the state store, the system or
chit itself failed), 130 interrupted.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable

from engine.errors import ChitError, ConfigurationError, StoreError

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERNAL",
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "exit_for",
    "reported",
]

logger = logging.getLogger("chit.gateway")

EXIT_USAGE = 2
EXIT_ERROR = EXIT_USAGE  # the status of a refused operator input (kept for callers)
EXIT_REFUSED = 3
EXIT_NOT_FOUND = 4
EXIT_INTERNAL = 5

# Codes that say the input itself is wrong, however well-meant.
_USAGE_CODES = frozenset({
    "invalid_argument", "path_invalid", "token_malformed", "caveat_malformed",
    "caveat_unknown", "token_unsupported_version",
})


def exit_for(code: str) -> int:
    """The exit status of a command refused with a chit error ``code`` (docs/errors.md)."""
    if code in _USAGE_CODES:
        return EXIT_USAGE
    if code == "not_found":
        return EXIT_NOT_FOUND
    if code == "internal_error":
        return EXIT_INTERNAL
    return EXIT_REFUSED


def _say(line: str, code: str, message: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": code, "message": message}, sort_keys=True))
    else:
        print(line, file=sys.stderr)


def reported(run: Callable[[], int], command: str, *, as_json: bool = False) -> int:
    """Run a command, printing any error as one line (no traceback), and exit by its cause.

    Args:
        run: The command; returns its exit status.
        command: The command's name, for the message.
        as_json: Print an error as ``{"error": CODE, "message": ...}`` on
            stdout (the command's ``--json``) instead of a line on stderr.

    Returns:
        ``run``'s status, or the error's (:func:`exit_for`; ``ValueError``:
        2, usage, as are a home or configuration that cannot be used as
        given and a file that exists already; a file that does not exist: 4;
        the state store, the system or a defect of chit: 5).
    """
    try:
        return run()
    except ChitError as exc:
        _say(f"chit: {exc.code}: {exc.message}", exc.code, exc.message, as_json)
        return exit_for(exc.code)
    except ConfigurationError as exc:
        # The home, its keys or configuration cannot be used as given: the
        # operator's to fix, as a wrong argument is.
        _say(f"chit: {exc}", "configuration", str(exc), as_json)
        return EXIT_USAGE
    except StoreError as exc:
        # Written for operators; names the store without its password.
        _say(f"chit: {exc.message}", "store_unavailable", exc.message, as_json)
        return EXIT_INTERNAL
    except ValueError as exc:
        # Operator input the engine refused (durations, globs, names, ids): the
        # messages are written for the operator and never carry secrets. A
        # refused decision (engine.admin.approvals) names its reason.
        reason = getattr(exc, "reason", None)
        code = reason if isinstance(reason, str) else "usage"
        _say(f"chit {command}: {exc}", code, str(exc), as_json)
        if code == "usage":
            return EXIT_USAGE
        return EXIT_NOT_FOUND if code == "unknown_approval" else EXIT_REFUSED
    except FileExistsError as exc:  # chit never overwrites a file it is told to write
        text = f"the file exists already: {exc.filename or ''}"
        _say(f"chit: {text}", "usage", text, as_json)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        text = f"{exc.strerror or 'No such file or directory'}: {exc.filename or ''}"
        _say(f"chit: {text}", "not_found", text, as_json)
        return EXIT_NOT_FOUND
    except OSError as exc:
        text = f"{exc.strerror or 'I/O error'}: {exc.filename or ''}"
        _say(f"chit: {text}", "io_error", text, as_json)
        return EXIT_INTERNAL
    except Exception:  # a defect: say so without a traceback (-v logs it)
        logger.info("internal error", exc_info=True)
        text = "internal error (run with -v for the details, and report it)"
        _say(f"chit {command}: {text}", "internal_error", text, as_json)
        return EXIT_INTERNAL
