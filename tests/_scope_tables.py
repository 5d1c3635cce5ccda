"""Hand-made tables in the scope-intervals and sample-frame schemas, for the analysis tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import pyarrow as pa

ANCHOR = 1_790_000_000_000_000_000  # realtime ns minus monotonic ns in the hand-made frames

# One scope call: name, path, thread, stack, depth, begin, end (None: open), labels.
Call = tuple[str, str, int, int, int, int, Optional[int], dict[str, str]]


def intervals(calls: Sequence[Call], anchor: int | None = ANCHOR) -> pa.Table:
    """A scope-intervals table (sorted by begin_ns) with one column per label key used."""
    calls = sorted(calls, key=lambda c: (c[5], c[4]))
    keys = sorted({k for c in calls for k in c[7]})
    columns: dict[str, Any] = {
        "name": pa.array([c[0] for c in calls], pa.string()),
        "path": pa.array([c[1] for c in calls], pa.string()),
        "thread_id": pa.array([c[2] for c in calls], pa.int64()),
        "stack_id": pa.array([c[3] for c in calls], pa.uint64()),
        "depth": pa.array([c[4] for c in calls], pa.int32()),
        "begin_ns": pa.array([c[5] for c in calls], pa.int64()),
        "end_ns": pa.array([c[6] for c in calls], pa.int64()),
    }
    for k in keys:
        columns[k] = pa.array([c[7].get(k) for c in calls], pa.string())
    table = pa.table(columns)
    if anchor is not None:
        table = table.replace_schema_metadata({b"stroboscope.anchor_realtime_ns": str(anchor)})
    return table


def frame(
    mono_ns: Sequence[int] | np.ndarray[Any, Any], metrics: dict[str, Sequence[Any]]
) -> pa.Table:
    """A sample frame: ``time`` (mono + ANCHOR), ``mono_ns``, then the metric columns given
    (None cells are null; ``*_bytes`` and ``*_ns`` columns int64, the rest float64)."""
    mono = np.asarray(mono_ns, dtype=np.int64)
    columns: dict[str, Any] = {
        "time": pa.array(mono + ANCHOR, pa.timestamp("ns", tz="UTC")),
        "mono_ns": pa.array(mono, pa.int64()),
    }
    for key, values in metrics.items():
        kind = pa.int64() if key.endswith(("_bytes", "_ns")) else pa.float64()
        columns[key] = pa.array(list(values), kind)
    return pa.table(columns)
