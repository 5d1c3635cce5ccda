"""The scope-intervals schema (its one home), the table as numpy arrays, and the parent of each
scope call.

The table (made by ``stroboscope.scopes`` from the events log) has one row per scope call:
:data:`INTERVAL_FIELDS` (``name``, ``path``, ``thread_id``, ``stack_id``, ``depth``,
``begin_ns``, ``end_ns``, null while open) and one string column per label key. Calls on one
stack nest properly, so the parent of a call at depth ``d`` is the latest call of depth
``d - 1`` on the same stack that began no later; if that one had already ended (its begin was
lost from the ring, say) the call has no parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.analysis._series import I64
from stroboscope.analysis.scope_columns import (
    BASE_COLUMNS,
    COUNTER_COLUMNS,
    INTERVAL_COLUMNS,
    PROCESS_COLUMNS,
    RESERVED_LABELS,
)
from stroboscope.analysis.scope_columns import SCOPE_COLUMNS as SCOPE_COLUMNS  # analysis.scopes'


def _fields(columns: tuple[tuple[str, str], ...]) -> list[pa.Field]:
    """The Arrow fields of ``(name, type name)`` columns."""
    return [pa.field(name, pa.type_for_alias(type_name)) for name, type_name in columns]


INTERVAL_FIELDS = _fields(INTERVAL_COLUMNS)
"""The scope-intervals table's columns before its labels, with their types (their names and
types: :data:`stroboscope.analysis.scope_columns.INTERVAL_COLUMNS`)."""

PROCESS_FIELDS = _fields(PROCESS_COLUMNS)
"""Columns the intervals of several processes add after :data:`INTERVAL_FIELDS`
(:data:`~stroboscope.analysis.scope_columns.PROCESS_COLUMNS`). Not labels."""

COUNTER_FIELDS = _fields(COUNTER_COLUMNS)
"""Columns the intervals add after :data:`INTERVAL_FIELDS` when their edges carry the opening
thread's own counters (:data:`~stroboscope.analysis.scope_columns.COUNTER_COLUMNS`). Not
labels."""

OPEN_END = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Intervals:
    """The intervals table, with its columns as arrays.

    ``end`` holds :data:`OPEN_END` for a call still open (``closed`` is False there); ``parent``
    is the row of the enclosing call on the same stack, -1 for none.
    """

    table: pa.Table
    labels: list[str]
    begin: I64
    end: I64
    closed: Any  # bool array
    depth: I64
    stack: I64  # dense rank of stack_id, 0..stacks-1
    parent: I64


def _int_column(table: pa.Table, name: str, fill: int) -> I64:
    col = table.column(name).cast(pa.int64())
    return np.asarray(col.fill_null(fill).to_numpy(), dtype=np.int64)


def check_intervals(intervals: Any) -> Intervals:
    """Validate ``intervals`` (a pyarrow Table in the scope-intervals schema) and index it."""
    if not isinstance(intervals, pa.Table):
        raise TypeError(
            f"intervals must be a pyarrow.Table in the scope-intervals schema, "
            f"got {type(intervals).__name__}"
        )
    missing = [c for c in BASE_COLUMNS if c not in intervals.column_names]
    if missing:
        raise ValueError(
            f"intervals lacks the column(s) {', '.join(missing)}; expected "
            f"{', '.join(BASE_COLUMNS)} and then one string column per label key"
        )
    for c in ("begin_ns", "depth", "thread_id", "stack_id"):
        if intervals.column(c).null_count:
            raise ValueError(f"intervals has null cells in {c!r}")
    labels = [c for c in intervals.column_names if c not in RESERVED_LABELS]
    begin = _int_column(intervals, "begin_ns", 0)
    closed = np.asarray(
        intervals.column("end_ns").is_valid().to_numpy(zero_copy_only=False), dtype=bool
    )
    end = np.where(closed, _int_column(intervals, "end_ns", 0), OPEN_END)
    if bool((end < begin).any()):
        row = int(np.flatnonzero(end < begin)[0])
        raise ValueError(f"intervals row {row} ends before it begins (end_ns < begin_ns)")
    depth = _int_column(intervals, "depth", 0)
    stack_ids = intervals.column("stack_id").cast(pa.uint64()).to_numpy()
    _, stack = np.unique(stack_ids, return_inverse=True)
    stack = stack.astype(np.int64).reshape(-1)
    parent = _parents(begin, end, depth, stack)
    return Intervals(intervals, labels, begin, end, closed, depth, stack, parent)


def _parents(begin: I64, end: I64, depth: I64, stack: I64) -> I64:
    """Row of each call's enclosing call on its stack (see the module docstring), -1 for none."""
    m = len(begin)
    parent = np.full(m, -1, dtype=np.int64)
    if m == 0:
        return parent
    order = np.lexsort((depth, begin))  # begin order; a parent before a child beginning with it
    pos = np.empty(m, dtype=np.int64)
    pos[order] = np.arange(m, dtype=np.int64)
    levels = int(depth.max()) + 2
    group = stack * levels + depth + 1  # depth -1 would be group stack*levels: empty
    key = group * m + pos
    by_key = np.argsort(key, kind="stable")
    sorted_key = key[by_key]
    want = (group - 1) * m + pos
    j = np.searchsorted(sorted_key, want, side="right") - 1
    ok = (depth > 0) & (j >= 0)
    j = np.where(ok, j, 0)
    ok &= sorted_key[j] >= (group - 1) * m  # the same stack, one level up
    cand = by_key[j]
    ok &= end[cand] >= begin  # not over before the child began
    parent[ok] = cand[ok]
    return parent
