"""The ``search_text`` tool: lines matching text or an RE2 pattern, in files the caller may read.

Patterns run on RE2 (linear in the text searched, whatever the pattern: no
backtracking, so no backreferences or lookaround); only files ``ctx.visible``
accepts are read, and nothing about the others is counted, so no query can
learn what a hidden file holds. Each call stays within the bytes, files and
seconds of docs/limits.md and says where it stopped (docs/tools.md, "Listing
and searching").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import re2

from engine import progress
from engine.catalog import schemas as s
from engine.errors import InvalidRequestError
from engine.limits import LIMITS
from engine.tools.context import CallContext
from engine.tools.listing import may_hold_visible, under
from engine.tools.semantic._shared import check_paths

__all__ = ["compile_query", "search_text"]

_BINARY_PROBE = 8000  # bytes looked at for a NUL, as git does to call a file binary


def compile_query(query: str, *, regex: bool, case: bool) -> re2._Regexp:
    """Compile a query for RE2 over UTF-8 bytes, ``^`` and ``$`` at line ends.

    Args:
        query: The text, or with ``regex`` an RE2 pattern (RE2 syntax).
        regex: Whether ``query`` is a pattern (else it is matched literally).
        case: Whether letters match only their own case.

    Returns:
        The compiled pattern.

    Raises:
        InvalidRequestError: ``invalid_argument`` (``fields: ["query"]``) for
            a pattern RE2 refuses: bad syntax, a construct that needs
            backtracking (backreferences, lookaround), or one larger than
            ``LIMITS.search_pattern_bytes`` compiled.
    """
    options = re2.Options()
    options.log_errors = False
    options.max_mem = LIMITS.search_pattern_bytes
    options.case_sensitive = case
    options.literal = not regex
    pattern = query.encode("utf-8", "surrogatepass")
    if regex:
        pattern = b"(?m)" + pattern
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else b""
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise InvalidRequestError(
            "invalid_argument",
            "query is not a regular expression RE2 accepts (no backreferences or "
            f"lookaround): {text[:200]}",
            fields=["query"],
        ) from None


def _cursor(value: str | None) -> tuple[str, int] | None:
    """``(path, lines of it already searched)`` from ``<lines>:<path>``."""
    if value is None:
        return None
    lines, sep, path = value.partition(":")
    if not sep or not lines.isdigit() or len(lines) > 12 or not path:
        raise InvalidRequestError("invalid_argument", "not a cursor of search_text",
                                  fields=["cursor"])
    return path, int(lines)


@dataclass
class _Budget:
    deadline: float
    bytes_left: int
    files_left: int

    def spent(self, size: int, searched: int) -> bool:
        """Whether a file of ``size`` bytes may not be searched now (the first always may)."""
        if searched == 0:
            return False
        return (self.files_left <= 0 or size > self.bytes_left
                or time.monotonic() >= self.deadline)


def _match(path: str, number: int, line: bytes, start: int) -> s.TextMatch:
    """A matching line: whole, or a window of ``LIMITS.search_line_chars`` around ``start``."""
    before = line[:start].decode("utf-8", "replace")
    text = line.decode("utf-8", "replace")
    most = LIMITS.search_line_chars
    cut = len(text) > most
    if cut:
        first = min(max(0, len(before) - most // 4), len(text) - most)
        text = text[first : first + most]
    return s.TextMatch(path=path, line=number, column=len(before) + 1, text=text, cut=cut)


def _search_file(
    pattern: re2._Regexp, path: str, data: bytes, done: int, room: int
) -> tuple[list[s.TextMatch], int | None]:
    """Matching lines of one file after its first ``done`` lines, at most ``room``.

    Returns:
        ``(matches, stopped)``: ``stopped`` is the number of the last line
        searched when ``room`` was reached with more text left, else ``None``.
    """
    pos, number = 0, 0
    for _ in range(done):
        at = data.find(b"\n", pos)
        if at < 0:
            return [], None
        pos, number = at + 1, number + 1
    found: list[s.TextMatch] = []
    counted = pos
    while pos < len(data):
        if len(found) == room:
            return found, number
        m = pattern.search(data, pos)
        if m is None:
            break
        start = data.rfind(b"\n", 0, m.start()) + 1
        end = data.find(b"\n", m.start())
        end = len(data) if end < 0 else end
        number += data.count(b"\n", counted, start) + 1
        counted = end + 1
        found.append(_match(path, number, data[start:end], m.start() - start))
        pos = end + 1
    return found, None


def search_text(ctx: CallContext, args: s.SearchTextArgs) -> s.TextMatches:
    """Search the visible files of the session view, in path order, within the call's budgets.

    Raises:
        InvalidRequestError: ``invalid_argument`` for a pattern RE2 refuses
            or a cursor that is not one; ``path_invalid`` for a bad path.
        AccessDeniedError: ``path_outside_scope``, ``path_forbidden`` or
            ``policy_denied`` for a ``paths`` entry the caller may not read.
    """
    roots = check_paths(ctx, args.paths) if args.paths else None
    pattern = compile_query(args.query, regex=args.regex, case=args.case)
    resume = _cursor(args.cursor)

    def wanted(path: str) -> bool:
        return roots is None or any(under(path, root) for root in roots)

    def enter(folder: str) -> bool:
        near = roots is None or any(
            under(folder, root) or root.startswith(folder + "/") for root in roots
        )
        return near and may_hold_visible(ctx, folder)

    entries, read = ctx.repo.walk_view(
        ctx.token.agent, ctx.session.staged, enter=enter,
        after=None if resume is None else resume[0],
    )
    budget = _Budget(
        time.monotonic() + LIMITS.search_seconds, LIMITS.search_scan_bytes, LIMITS.search_scan_files
    )
    matches: list[s.TextMatch] = []
    searched = skipped = 0
    cursor: str | None = None

    def files() -> Iterator[tuple[str, int | None, int]]:
        if resume is not None:
            yield resume[0], None, resume[1]
        for entry in entries:
            if entry.kind == "file":
                yield entry.path, entry.size, 0

    for path, size, done in files():
        if not wanted(path) or not ctx.visible(path):
            continue
        if size is not None and size > LIMITS.range_file_bytes:
            skipped += 1
            continue
        if budget.spent(size or 0, searched) or len(matches) == args.limit:
            cursor = f"{done}:{path}"
            break
        data = read(path)
        if data is None:
            continue
        if len(data) > LIMITS.range_file_bytes or b"\0" in data[:_BINARY_PROBE]:
            skipped += 1
            continue
        searched += 1
        progress.report(searched, None, "searching files")
        budget.files_left -= 1
        budget.bytes_left -= len(data)
        found, stopped = _search_file(pattern, path, data, done, args.limit - len(matches))
        matches.extend(found)
        if stopped is not None:
            cursor = f"{stopped}:{path}"
            break
    return s.TextMatches(
        matches=matches,
        files_searched=searched,
        skipped=skipped,
        truncated=cursor is not None,
        cursor=cursor,
    )
