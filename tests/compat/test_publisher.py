"""The window publisher (recording/_publisher.py): one window reduction for the monitor,
``stroboscope record``'s senders and the training callbacks, with the one last-value rule of
analysis/_last_value.py. Windows closed on demand here; on a schedule in cli/test_publish.py
(a scripted clock) and compat/test_scaffold*.py (the thread)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from stroboscope.analysis.windows import WindowInfo
from stroboscope.compat._publisher import WindowPublisher
from stroboscope.sampling import Column

COLUMNS = [
    Column("mono_ns", "ns", "int64", "gauge", "time"),
    Column("proc.threads", "count", "int64", "gauge", "threads"),
    Column("gpu.0.sm_clock_mhz", "MHz", "int64", "gauge", "clock"),
    Column("gpu.0.mem_used_bytes", "bytes", "int64", "gauge", "used"),
    Column("gpu.0.fan_pct", "%", "float64", "gauge", "fan"),
    Column("net.sent_bytes", "bytes", "int64", "counter", "sent"),
]
ROWS: dict[str, list[float]] = {
    "mono_ns": [10, 20, 30, 40],
    "proc.threads": [4, 4, 4, 7],
    "gpu.0.sm_clock_mhz": [1980, 1980, 1980, 345],
    "gpu.0.mem_used_bytes": [100, 200, 300, 1000],
    "gpu.0.fan_pct": [30.0, 30.0, 30.0, 50.0],
    "net.sent_bytes": [0, 10, 20, 30],
}


def test_a_window_reduces_by_the_aggregate_and_the_last_value_rule() -> None:
    seen: list[tuple[dict[str, float | int], WindowInfo]] = []
    tables = [pa.table(ROWS)]

    def emit(values: dict[str, float | int], info: WindowInfo) -> int:
        seen.append((values, info))
        return len(seen)

    publisher = WindowPublisher(
        COLUMNS, emit, aggregate="mean", levels=["gpu.0.fan_pct"], source=tables.pop
    )
    assert publisher.publish() == 1  # what emit returns
    values, info = seen[0]
    # Counts and clocks (the package's rule) and a counter give their last value; a level
    # named by the owner too; the other columns their mean. The time column is no metric.
    assert values == {
        "proc.threads": 7,
        "gpu.0.sm_clock_mhz": 345,
        "gpu.0.mem_used_bytes": pytest.approx(400.0),
        "gpu.0.fan_pct": 50.0,
        "net.sent_bytes": 30,
    }
    assert (info.rows, info.first_mono_ns, info.last_mono_ns) == (4, 10, 40)
    assert publisher.aggregate_of("gpu.0.mem_used_bytes") == "mean"
    assert publisher.aggregate_of("proc.threads") == "last"
    # The next window starts empty: nothing came from the source since.
    tables.append(pa.table({k: v[:0] for k, v in ROWS.items()}))
    assert publisher.publish() == 2 and seen[1][0] == {} and seen[1][1].rows == 0


def test_select_and_bad_arguments() -> None:
    publisher = WindowPublisher(COLUMNS, lambda v, i: v, select=["proc.threads"])
    publisher.feed(pa.table(ROWS))  # without ``every``: a window closes only when asked
    assert publisher.publish() == {"proc.threads": 7}
    with pytest.raises(ValueError, match="every: the publishing thread needs seconds"):
        publisher.start()
    with pytest.raises(ValueError, match="aggregate must be one of last, mean, max, got 'median'"):
        WindowPublisher(COLUMNS, lambda v, i: v, aggregate="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="every"):
        WindowPublisher(COLUMNS, lambda v, i: v, every=-1.0)
