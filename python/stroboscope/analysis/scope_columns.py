"""The names (and Arrow type names) of the scope tables' columns, with the stdlib only: the home
of each name, from which :mod:`stroboscope.analysis._intervals` builds the intervals' schema, and
of the names a label may not take, which a labelled scope checks without loading pyarrow or
numpy (so a process that annotates while nothing records never pays for them).
"""

from __future__ import annotations

__all__ = [
    "BASE_COLUMNS",
    "COUNTER_COLUMNS",
    "INTERVAL_COLUMNS",
    "PROCESS_COLUMNS",
    "RESERVED_LABELS",
    "SCOPE_COLUMNS",
]

INTERVAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "string"),
    ("path", "string"),
    ("thread_id", "int64"),
    ("stack_id", "uint64"),
    ("depth", "int32"),
    ("begin_ns", "int64"),
    ("end_ns", "int64"),
)
"""The scope-intervals table's columns before its labels: ``(name, Arrow type name)``."""

BASE_COLUMNS = tuple(name for name, _ in INTERVAL_COLUMNS)

PROCESS_COLUMNS: tuple[tuple[str, str], ...] = (("pid", "int64"), ("producer", "string"))
"""Columns the intervals of several processes add after :data:`INTERVAL_COLUMNS` (the shared
events of a recorded command): the writer's pid and producer (``py``, ``nvtx``). Not labels."""

COUNTER_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (name, "int64") for name in ("cpu_ns", "minflt", "majflt", "nvcsw", "nivcsw")
)
"""Columns the intervals add after :data:`INTERVAL_COLUMNS` when their edges carry the opening
thread's own counters (edge counters, ``stroboscope.enable(edge_counters=...)``): per call, the
thread's CPU time (ns, exact: read by the thread at both edges), and in mode ``rusage`` its minor
and major faults and voluntary and involuntary context switches; null where an edge has none.
Not labels."""

SCOPE_COLUMNS = ("scope", "scope_name", "thread_id", "stack_id", "scope_depth")
"""The columns :func:`~stroboscope.analysis.scopes.samples_by_scope` adds to the samples."""

RESERVED_LABELS = frozenset(
    {
        *BASE_COLUMNS,
        *SCOPE_COLUMNS,
        *(name for name, _ in PROCESS_COLUMNS),
        *(name for name, _ in COUNTER_COLUMNS),
        "time",
        "mono_ns",
    }
)
"""Names a label may not take: columns of the scope tables and of the samples."""
