"""What of a store is durable: the fixed list of tables and columns ``chit state copy`` moves.

Revocations, delegations, the freeze, the token exchange's replay cache,
operators and approvals, and the call log (entries with their signatures, the
tree head, checkpoints, the first form's chain head) are what an engine must
never lose; intents, staged paths, rate windows, session placements and the
change feed are not copied (docs/deployment.md, "Switching stores"). Both
stores build their statements from this list and nothing else: no table or
column name ever comes from input, and every value is a bound parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DURABLE_TABLES",
    "LEFT_BEHIND",
    "NOT_COPIED",
    "DurableTable",
    "checked_row",
    "durable_table",
    "exists_sql",
    "export_sql",
    "insert_sql",
]


@dataclass(frozen=True)
class DurableTable:
    """One durable table as both stores hold it.

    Attributes:
        name: The table's name.
        columns: The columns copied, in order.
        kinds: Each column's Python type as the drivers read it (``int``,
            ``str`` or ``bytes``; never NULL).
        key: The columns rows are copied in the order of.
        present: A fixed SQL condition a row must meet to be state (the
            PostgreSQL tree head's row exists from the start, empty), or ``""``.
        live_from: A column below the copy's time on rows that have expired
            and are not copied, or ``""``.
    """

    name: str
    columns: tuple[str, ...]
    kinds: tuple[type, ...]
    key: tuple[str, ...]
    present: str = ""
    live_from: str = ""


DURABLE_TABLES: tuple[DurableTable, ...] = (
    DurableTable("revocations", ("id", "revoked_at", "reason"), (str, int, str), ("id",)),
    DurableTable(
        "delegations",
        ("child_id", "parent_id", "parent_agent", "child_agent", "issued_at", "expires_at",
         "scope"),
        (str, str, str, str, int, int, str),
        ("child_id",),
    ),
    DurableTable("engine_mode", ("id", "frozen", "reason", "changed_at"), (int, int, str, int),
                 ("id",)),
    DurableTable("exchange_jti", ("issuer", "jti", "used_at", "keep_until"), (str, str, int, int),
                 ("issuer", "jti"), live_from="keep_until"),
    DurableTable("call_log", ("seq", "time", "agent", "entry", "sig"),
                 (int, int, str, bytes, bytes), ("seq",)),
    DurableTable("call_log_checkpoint", ("size", "time", "note"), (int, int, str), ("size",)),
    DurableTable(
        "call_log_tree",
        ("id", "origin", "size", "last", "frontier", "signed", "signed_at"),
        (int, str, int, bytes, bytes, int, int),
        ("id",),
        present="origin IS NOT NULL",
    ),
    DurableTable("call_log_head", ("id", "seq", "hash", "head", "sig"),
                 (int, int, bytes, bytes, bytes), ("id",)),
    DurableTable("operators", ("key_id", "name", "public", "groups", "added_at", "removed_at"),
                 (str, str, bytes, str, int, int), ("key_id",)),
    DurableTable(
        "approvals",
        ("id", "request", "tool", "agent", "token_id", "session", "repo", "asked", "approvers",
         "reason", "rule", "created_at", "expires_at", "state", "decision", "decided_by",
         "decided_at", "note", "used_at"),
        (str, str, str, str, str, str, str, str, str, str, str, int, int, str, bytes, str, int,
         str, int),
        ("id",),
    ),
)
"""Every durable table, in the order a copy reads and writes them."""

LEFT_BEHIND: frozenset[str] = frozenset({"revocations", "delegations", "call_log"})
"""Tables whose rows an engine refuses to leave behind in ``<home>/state.db``."""

NOT_COPIED: tuple[str, ...] = (
    "intents", "staged paths", "rate windows", "engine session placements", "the change feed",
    "the engines and edges seen",
)
"""What a copy leaves behind, all of it ephemeral: sessions and windows start afresh."""

_BY_NAME = {table.name: table for table in DURABLE_TABLES}


def durable_table(name: str) -> DurableTable:
    """The durable table called ``name``.

    Raises:
        ValueError: If ``name`` is not one of :data:`DURABLE_TABLES` (nothing
            else is ever read or written by a copy).
    """
    table = _BY_NAME.get(name) if isinstance(name, str) else None
    if table is None:
        raise ValueError("not a durable table of the state store")
    return table


def _where(table: DurableTable, mark: str) -> str:
    conditions = [c for c in (table.present,) if c]
    if table.live_from:
        conditions.append(f"{table.live_from} >= {mark}")
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def export_sql(table: DurableTable, mark: str) -> str:
    """The statement reading ``table``'s rows in key order.

    Its one parameter, if the table has :attr:`~DurableTable.live_from`, is the
    copy's time.
    """
    return (
        f"SELECT {', '.join(table.columns)} FROM {table.name}"  # noqa: S608 - fixed names
        f"{_where(table, mark)} ORDER BY {', '.join(table.key)}"
    )


def insert_sql(table: DurableTable, mark: str) -> str:
    """The statement inserting one row of ``table`` (parameters: its columns in order)."""
    marks = ", ".join([mark] * len(table.columns))
    return f"INSERT INTO {table.name} ({', '.join(table.columns)}) VALUES ({marks})"  # noqa: S608


def exists_sql(table: DurableTable) -> str:
    """The statement answering one row ``(1,)`` iff ``table`` holds state."""
    where = f" WHERE {table.present}" if table.present else ""
    return f"SELECT 1 FROM {table.name}{where} LIMIT 1"  # noqa: S608 - fixed names


def checked_row(table: DurableTable, row: Any) -> tuple[Any, ...]:
    """``row`` as a tuple of ``table``'s columns, each of its column's type.

    Raises:
        ValueError: If the row has another number of values, or a value of
            another type (NULL included): a source store edited behind
            chit's back, which a copy refuses rather than guess about.
    """
    values = tuple(row)
    if len(values) != len(table.columns) or not all(
        type(value) is kind for value, kind in zip(values, table.kinds, strict=True)
    ):
        raise ValueError(f"a row of the source's table {table.name} is malformed; nothing "
                         "was copied")
    return values
