"""What the SQLite and PostgreSQL stores do alike: error guards, row paging, row reading.

Each store turns its driver's errors into :class:`~engine.errors.StoreError`
through :func:`guard_errors`, pages the call log with :func:`log_rows_query`
and :func:`paged_log_rows`, and reads the mode's row with :func:`freeze_of`
(docs/deployment.md).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from engine.errors import StoreError
from engine.state.store import FreezeState, LogRow

__all__ = ["freeze_of", "guard_errors", "log_rows_query", "paged_log_rows"]

_T = TypeVar("_T", bound=type)
Failed = Callable[[Any, BaseException], StoreError]
Retry = Callable[[Any, BaseException], bool]


def guard_errors(
    cls: _T,
    errors: tuple[type[BaseException], ...],
    failed: Failed,
    retry: Retry | None = None,
) -> _T:
    """Make every public method of ``cls`` raise :class:`StoreError` for a driver error.

    Generator methods are guarded as they are iterated (and never retried).
    The driver's error is chained (``__cause__``) for the log.

    Args:
        cls: The class whose methods are wrapped (only those it defines).
        errors: The driver's error classes.
        failed: Builds the StoreError from the store and the error.
        retry: Says whether a call that raised one of ``errors`` is made once
            more (it must be one that ran nothing).

    Returns:
        ``cls``.
    """
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or not callable(member):
            continue
        setattr(cls, name, _guarded(member, errors, failed, retry))
    return cls


def _guarded(
    method: Callable[..., Any],
    errors: tuple[type[BaseException], ...],
    failed: Failed,
    retry: Retry | None,
) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generate(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(self, *args, **kwargs)
            except errors as exc:
                raise failed(self, exc) from exc

        return generate

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return method(self, *args, **kwargs)
            except errors as exc:
                if retry is None or not retry(self, exc):
                    raise
                return method(self, *args, **kwargs)
        except errors as exc:
            raise failed(self, exc) from exc

    return call


def log_rows_query(mark: str, *, agent: str | None, since: int | None) -> tuple[str, list[Any]]:
    """The statement paging the call log (after a ``seq``, filtered), and its filter values.

    Args:
        mark: The driver's parameter mark (``?`` or ``%s``).
        agent: Only rows whose agent column equals this.
        since: Only rows whose time column is at or after this.

    Returns:
        The statement (parameters: the ``seq`` to read after, the filter
        values, the page size) and the filter values.
    """
    where = [f"seq > {mark}"]
    params: list[Any] = []
    if agent is not None:
        where.append(f"agent = {mark}")
        params.append(agent)
    if since is not None:
        where.append(f"time >= {mark}")
        params.append(since)
    query = (
        "SELECT seq, time, agent, entry, sig FROM call_log WHERE "  # noqa: S608 - fixed
        + " AND ".join(where)
        + f" ORDER BY seq LIMIT {mark}"
    )
    return query, params


def paged_log_rows(
    fetch: Callable[[Sequence[Any]], list[tuple[Any, ...]]], params: list[Any], batch: int
) -> Iterator[LogRow]:
    """Call-log rows page by page, in ascending ``seq``.

    Args:
        fetch: Runs the statement of :func:`log_rows_query` with its parameters.
        params: The filter values.
        batch: Rows per page.

    Yields:
        :class:`LogRow`, untrusted.
    """
    after: Any = -(2**63)
    while True:
        rows = fetch((after, *params, batch))
        yield from map(LogRow._make, rows)
        if len(rows) < batch:
            return
        after = rows[-1][0]


def freeze_of(row: Sequence[Any] | None) -> FreezeState:
    """The mode from a ``(frozen, reason, changed_at)`` row; not frozen if there is none."""
    if row is None or row[0] is None:
        return FreezeState(False, "", 0)
    return FreezeState(bool(row[0]), str(row[1]), int(row[2]))
