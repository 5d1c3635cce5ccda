"""Hand-made series for the report's plot tests: known readings on a known time axis, columns
with their unit and kind, and scope calls, as the report's readers hand them over."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
from stroboscope.export._inputs import Recording

T0 = 1_790_000_000_000_000_000
"""Realtime of mono_ns 0 (ns)."""
STEP_NS = 10_000_000
"""Rows 10 ms apart."""

Column = tuple[str, str, Sequence[float | None]]
"""A column: unit, kind and one value (or None) per row."""
Call = tuple[str, int, int, int, int | None]
"""A scope call: name, thread id, depth, begin and end (mono ns; None: still open)."""


def series(
    label: str,
    columns: Mapping[str, Column],
    rows: int,
    calls: Sequence[Call] = (),
    start_ns: int = 0,
    mono0: int = 1_000_000_000,
) -> Recording:
    """A recording of ``rows`` rows, ``STEP_NS`` apart from ``mono0`` (its realtime ``T0 +
    start_ns + mono0``), holding ``columns`` and the scope ``calls``."""
    mono = mono0 + np.arange(rows, dtype=np.int64) * STEP_NS
    fields = [pa.field("time", pa.timestamp("ns", "UTC")), pa.field("mono_ns", pa.int64())]
    arrays = [pa.array(mono + T0 + start_ns, pa.timestamp("ns", "UTC")), pa.array(mono)]
    for name, (unit, kind, values) in columns.items():
        meta = {b"unit": unit.encode(), b"kind": kind.encode()}
        fields.append(pa.field(name, pa.float64(), metadata=meta))
        arrays.append(pa.array(list(values), pa.float64()))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    scopes = None
    if calls:
        scopes = pa.table(
            {
                "name": pa.array([c[0] for c in calls], pa.string()),
                "path": pa.array([c[0] for c in calls], pa.string()),
                "thread_id": pa.array([c[1] for c in calls], pa.int64()),
                "stack_id": pa.array([c[1] for c in calls], pa.uint64()),
                "depth": pa.array([c[2] for c in calls], pa.int32()),
                "begin_ns": pa.array([c[3] for c in calls], pa.int64()),
                "end_ns": pa.array([c[4] for c in calls], pa.int64()),
            }
        )
    return Recording(label, f"{label}.parquet", table, {}, scopes)
