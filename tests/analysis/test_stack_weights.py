"""Stack weights (analysis/stacks.py) on scripted samples and rows whose answers are computed by
hand in the comments: CPU, wall, a gauge (W -> J), a counter (bytes), the sharing of a row
between the threads sampled in it, the time range and scope selections, and the per-function
table."""

from __future__ import annotations

import pyarrow as pa
import pytest
from stroboscope.analysis import (
    function_table,
    select_samples,
    stack_weights,
    weight_column,
    weight_unit,
)

MS = 1_000_000


def _field(name: str, unit: str, kind: str) -> pa.Field:
    return pa.field(name, pa.float64(), metadata={"unit": unit, "kind": kind})


def rows(read: list[float | None] | None = None) -> pa.Table:
    """Five rows 1 ms apart. Power 10, 20, 30, 40, 50 W; disk.read_bytes a running total
    0, 100, 100, 400, 1000; proc.tid an identifier."""
    schema = pa.schema(
        [
            pa.field("time", pa.timestamp("ns", "UTC")),
            pa.field("mono_ns", pa.int64()),
            _field("gpu.0.power_w", "W", "gauge"),
            _field("disk.read_bytes", "bytes", "counter"),
            _field("proc.tid", "id", "gauge"),
        ]
    )
    return pa.table(
        [
            [1_000_000_000 + i * MS for i in range(5)],
            [i * MS for i in range(5)],
            [10.0, 20.0, 30.0, 40.0, 50.0],
            read if read is not None else [0.0, 100.0, 100.0, 400.0, 1000.0],
            [1.0] * 5,
        ],
        schema=schema,
    )


# Stacks: 0 = main;a  1 = main;b;b (b recursing)  2 = worker
FRAMES = pa.table(
    {
        "stack_id": [0, 0, 1, 1, 1, 2],
        "depth": [0, 1, 0, 1, 2, 0],
        "function": ["main", "a", "main", "b", "b", "worker"],
        "file": ["m.py", "m.py", "m.py", "m.py", "m.py", "w.py"],
        "line": [1, 10, 1, 20, 20, 5],
    }
)


def samples() -> pa.Table:
    """Thread 1 at 1, 2, 3, 4 ms (the rows' times): stacks 0, 0, 1, 1, CPU -, 0.6, 1.0, 0 ms.
    Thread 2 at 2, 3, 4 ms: stack 2 each time, CPU -, 0.4, 0 ms."""
    return pa.table(
        {
            "mono_ns": [k * MS for k in (1, 2, 3, 4, 2, 3, 4)],
            "pid": [9] * 7,
            "tid": [1, 1, 1, 1, 2, 2, 2],
            "stack_id": [0, 0, 1, 1, 2, 2, 2],
            "cpu_ns": [None, 600_000, 1_000_000, 0, None, 400_000, 0],
            "thread": ["MainThread"] * 4 + ["w"] * 3,
        }
    )


def by_stack(weights: object) -> dict[int, float]:
    table = weights.stacks  # type: ignore[attr-defined]
    return dict(zip(table.column("stack_id").to_pylist(), table.column("weight").to_pylist()))


def test_cpu_weights_are_the_threads_cpu_time() -> None:
    w = stack_weights(samples(), FRAMES, "cpu")
    assert by_stack(w) == {0: 600_000, 1: 1_000_000, 2: 400_000}
    assert w.unit == "ns" and w.total == 2_000_000
    assert w.stacks.column("samples").to_pylist() == [2, 2, 3]


def test_wall_weights_are_the_time_since_the_threads_previous_sample() -> None:
    # thread 1: first sample nothing, then 1 ms each (stack 0 once, stack 1 twice);
    # thread 2: first nothing, then 1 ms twice.
    w = stack_weights(samples(), FRAMES, "wall")
    assert by_stack(w) == {0: 1 * MS, 1: 2 * MS, 2: 2 * MS}


def test_a_null_cpu_ns_starts_a_new_thread_for_wall_time_too() -> None:
    """A Linux TID used again by a new thread: the reader marks its first sample (cpu_ns null);
    the gap since the old thread's last sample is no one's wall time."""
    s = samples()
    s = s.set_column(4, "cpu_ns", pa.array([None, 600_000, None, 0, None, 400_000, 0]))
    w = stack_weights(s, FRAMES, "wall")
    assert by_stack(w) == {0: 1 * MS, 1: 1 * MS, 2: 2 * MS}


def test_a_gauge_is_its_integral_shared_by_cpu_time() -> None:
    """Sampled rows 1..4 (the first carries nothing); the power linear between readings. Row 2:
    from 20 to 30 W over 1 ms = 0.025 J, thread 1 (0.6 ms CPU, stack 0) alone ran: all to stack
    0. Row 3: 0.035 J, CPU 1.0 : 0.4 ms between stacks 1 and 2. Row 4: 0.045 J, and no CPU
    then: by the threads' CPU over their last samples, 1.6 : 0.4 ms."""
    w = stack_weights(samples(), FRAMES, "gpu.0.power_w", rows=rows())
    got = by_stack(w)
    assert got[0] == pytest.approx(0.025, rel=1e-12)
    assert got[1] == pytest.approx(0.035 / 1.4 + 0.045 * 0.8, rel=1e-12)
    assert got[2] == pytest.approx(0.035 * 0.4 / 1.4 + 0.045 * 0.2, rel=1e-12)
    assert w.total == pytest.approx(0.105, rel=1e-12)
    assert w.unit == "J"
    assert "J accumulated while it ran" in w.rule and "in proportion to their CPU time" in w.rule


def test_a_counter_is_its_increase_shared_by_cpu_time() -> None:
    """Increases at sampled rows 2, 3, 4: 0, 300, 600 bytes (row 4's by recent CPU, 0.8 : 0.2)."""
    w = stack_weights(samples(), FRAMES, "disk.read_bytes", rows=rows())
    got = by_stack(w)
    assert got[0] == 0
    assert got[1] == pytest.approx(300 / 1.4 + 480, rel=1e-12)
    assert got[2] == pytest.approx(300 * 0.4 / 1.4 + 120, rel=1e-12)
    assert w.unit == "bytes" and w.total == pytest.approx(900)


def test_a_counter_with_a_null_cell_is_linear_between_its_readings() -> None:
    """Row 3 null: at 3 ms the counter is 550 (100 at 2 ms, 1000 at 4 ms), so rows 3 and 4 gain
    450 each: row 3's by CPU 1.0 : 0.4, row 4's by recent CPU 0.8 : 0.2."""
    w = stack_weights(
        samples(), FRAMES, "disk.read_bytes", rows=rows([0.0, 100.0, 100.0, None, 1000.0])
    )
    assert by_stack(w) == {
        0: 0,
        1: pytest.approx(450 / 1.4 + 360, rel=1e-12),
        2: pytest.approx(450 * 0.4 / 1.4 + 90, rel=1e-12),
    }


def test_a_row_where_no_thread_ran_goes_by_recent_cpu_then_equally() -> None:
    """Row 4 (0.045 J) has no CPU: thread 1 ran 1.6 ms over its last samples, thread 2 0.4 ms.
    With no CPU anywhere (every cpu_ns 0 or null), every row goes in halves."""
    w = stack_weights(samples(), FRAMES, "gpu.0.power_w", rows=rows())
    row4 = stack_weights(samples(), FRAMES, "gpu.0.power_w", rows=rows(), begin_ns=4 * MS)
    assert by_stack(row4) == {1: pytest.approx(0.036, rel=1e-12), 2: pytest.approx(0.009)}
    assert w.total == pytest.approx(0.105, rel=1e-12)
    idle = samples().set_column(4, "cpu_ns", pa.array([None, 0, 0, 0, None, 0, 0], pa.int64()))
    halves = stack_weights(idle, FRAMES, "gpu.0.power_w", rows=rows(), begin_ns=3 * MS)
    assert by_stack(halves) == {
        1: pytest.approx(0.035 / 2 + 0.045 / 2, rel=1e-12),
        2: pytest.approx(0.035 / 2 + 0.045 / 2, rel=1e-12),
    }


def test_a_rows_samples_cover_the_time_up_to_themselves_not_to_the_row() -> None:
    """One thread sampled at 1.5 and 3.5 ms (in rows 1 and 3, whose times are 1 and 3 ms): the
    second sample covers 1.5 to 3.5 ms, the power from 25 to 45 W: 0.07 J (1 to 3 ms would give
    0.06)."""
    s = samples().slice(0, 2).set_column(0, "mono_ns", pa.array([1_500_000, 3_500_000]))
    w = stack_weights(s, FRAMES, "gpu.0.power_w", rows=rows())
    assert by_stack(w) == {0: pytest.approx(0.07, rel=1e-12)}


def test_a_span_before_a_columns_first_reading_carries_nothing() -> None:
    """disk.read_bytes first read at 2 ms (100): the span 1 to 2 ms is unknown, not 100 bytes;
    rows 3 and 4 carry 300 and 600."""
    w = stack_weights(
        samples(), FRAMES, "disk.read_bytes", rows=rows([None, None, 100.0, 400.0, 1000.0])
    )
    assert w.total == pytest.approx(900, rel=1e-12)
    assert by_stack(w)[0] == 0  # stack 0's only weighed sample is at 2 ms


def test_a_gpu_value_is_placed_at_its_read_time() -> None:
    """gpu.0.read_mono_ns says each power reading was taken 0.5 ms before its row (the last at
    3.5 ms): the power is then 25 W at 1 ms, 35 W at 2 ms, 45 W at 3 ms. Row 2 carries 0.030 J
    (not 0.025), row 3 0.040 J; row 4's span, past the last reading, nothing."""
    table = rows().append_column(
        "gpu.0.read_mono_ns", pa.array([k * MS - MS // 2 for k in range(5)])
    )
    w = stack_weights(samples(), FRAMES, "gpu.0.power_w", rows=table)
    got = by_stack(w)
    assert got[0] == pytest.approx(0.030, rel=1e-12)  # row 2: from 25 to 35 W over 1 ms
    assert w.total == pytest.approx(0.030 + 0.040, rel=1e-12)


def test_growth_weighs_a_gauges_rises_and_not_its_falls() -> None:
    """proc.rss_bytes 0, 100, 50, 400, 1000 (a gauge): rises at sampled rows 2, 3, 4 of
    0 (100 -> 50, a fall), 350 and 600 bytes."""
    table = rows().append_column(
        pa.field("proc.rss_bytes", pa.float64(), metadata={"unit": "bytes", "kind": "gauge"}),
        pa.array([0.0, 100.0, 50.0, 400.0, 1000.0]),
    )
    w = stack_weights(samples(), FRAMES, "proc.rss_bytes:growth", rows=table)
    assert by_stack(w) == {
        0: 0,
        1: pytest.approx(350 / 1.4 + 480, rel=1e-12),
        2: pytest.approx(350 * 0.4 / 1.4 + 120, rel=1e-12),
    }
    assert w.unit == "bytes" and "bytes grown while it ran" in w.rule
    held = stack_weights(samples(), FRAMES, "proc.rss_bytes", rows=table)
    assert held.unit == "bytes·s"  # the plain gauge: bytes held over time
    assert held.total == pytest.approx((75 + 225 + 700) * 1e-3, rel=1e-12)  # trapezoids, 1 ms


def test_stacks_slower_than_rows_cover_every_row_since_the_previous_sampled_one() -> None:
    """One thread sampled at 2 and 4 ms: the second sample covers rows 3 and 4: from 30 to 50 W
    over 2 ms = 0.08 J; the rows' order in the table does not matter."""
    s = samples().slice(1, 3).filter(pa.array([True, False, True]))
    s = s.set_column(4, "cpu_ns", pa.array([None, 5], pa.int64()))
    shuffled = rows().take(pa.array([3, 0, 4, 2, 1]))
    w = stack_weights(s, FRAMES, "gpu.0.power_w", rows=shuffled)
    assert by_stack(w) == {0: 0, 1: pytest.approx(0.08, rel=1e-12)}


def test_a_sample_before_the_first_row_carries_nothing() -> None:
    s = samples().set_column(
        0,
        "mono_ns",
        pa.array([-5, 2 * MS, 3 * MS, 4 * MS, 2 * MS, 3 * MS, 4 * MS]),
    )
    w = stack_weights(s, FRAMES, "gpu.0.power_w", rows=rows())
    assert w.total == pytest.approx(0.08, rel=1e-12)  # rows 3 and 4; row 2 is the first sampled


def test_a_time_range_keeps_the_weights_of_the_whole_run() -> None:
    w = stack_weights(samples(), FRAMES, "cpu", begin_ns=3 * MS, end_ns=5 * MS)
    assert by_stack(w) == {1: 1_000_000, 2: 400_000}
    keep = select_samples(samples(), begin_ns=2 * MS + 10, end_ns=3 * MS + 10)
    assert keep.tolist() == [False, False, True, False, False, True, False]


def intervals(with_pid: bool) -> pa.Table:
    """step on thread 2 over [2.5, 3.5) ms; step on thread 1 from 3.5 ms, still open; other on
    thread 1 over [0, 10) ms; with pids, a step of another process's thread 2 over [0, 10) ms."""
    table = {
        "name": ["step", "step", "other"],
        "path": ["step", "step", "other"],
        "thread_id": pa.array([2, 1, 1], pa.int64()),
        "stack_id": pa.array([2, 1, 1], pa.uint64()),
        "depth": pa.array([0, 0, 0], pa.int32()),
        "begin_ns": pa.array([2_500_000, 3_500_000, 0], pa.int64()),
        "end_ns": pa.array([3_500_000, None, 10 * MS], pa.int64()),
    }
    if with_pid:
        for key, extra in (
            ("name", "step"),
            ("path", "step"),
            ("thread_id", 2),
            ("stack_id", 7),
            ("depth", 0),
            ("begin_ns", 0),
            ("end_ns", 10 * MS),
        ):
            values = table[key]
            values = values.to_pylist() if isinstance(values, pa.Array) else values
            table[key] = pa.array([*values, extra], INTERVAL_TYPES[key])
        table["pid"] = pa.array([9, 9, 9, 1234], pa.int64())
    return pa.table(table)


INTERVAL_TYPES = {
    "name": pa.string(),
    "path": pa.string(),
    "thread_id": pa.int64(),
    "stack_id": pa.uint64(),
    "depth": pa.int32(),
    "begin_ns": pa.int64(),
    "end_ns": pa.int64(),
}


@pytest.mark.parametrize("with_pid", [False, True])
def test_a_scope_keeps_the_samples_of_the_thread_that_ran_it(with_pid: bool) -> None:
    """Thread 2's sample at 3 ms (stack 2, 0.4 ms CPU) and thread 1's at 4 ms (stack 1, 0)."""
    w = stack_weights(samples(), FRAMES, "cpu", scope="step", intervals=intervals(with_pid))
    assert by_stack(w) == {1: 0, 2: 400_000}
    assert w.stacks.column("samples").to_pylist() == [1, 1]
    with pytest.raises(ValueError, match=r"scope 'stpe' has no call .*close names: step"):
        stack_weights(samples(), FRAMES, "cpu", scope="stpe", intervals=intervals(with_pid))
    with pytest.raises(ValueError, match=r"needs the scope intervals"):
        stack_weights(samples(), FRAMES, "cpu", scope="step")


def test_the_function_table_counts_a_recursive_function_once_per_stack() -> None:
    table = function_table(stack_weights(samples(), FRAMES, "cpu")).to_pylist()
    got = {r["function"]: r for r in table}
    assert [r["function"] for r in table] == ["main", "b", "a", "worker"]  # by total
    assert got["main"]["self"] == 0 and got["main"]["total"] == 1_600_000
    assert got["main"]["total_share"] == pytest.approx(0.8)
    assert got["b"]["self"] == 1_000_000 and got["b"]["total"] == 1_000_000
    assert got["b"]["samples"] == 2  # two samples of stack 1, b twice on it
    assert got["a"]["self_share"] == pytest.approx(0.3)
    assert got["worker"] == {
        "function": "worker",
        "file": "w.py",
        "line": 5,
        "self": 400_000,
        "total": 400_000,
        "self_share": pytest.approx(0.2),
        "total_share": pytest.approx(0.2),
        "samples": 3,
    }


def test_units_of_a_column_weight() -> None:
    assert weight_unit("W", "gauge") == "J"
    assert weight_unit("bytes", "counter") == "bytes"
    assert weight_unit("bytes/s", "rate") == "bytes"
    assert weight_unit("%", "rate") == "%·s"
    assert weight_unit("bytes", "gauge") == "bytes·s"
    assert weight_column(rows().schema, "disk.read_bytes") == ("bytes", "counter")


def test_a_weight_that_is_no_metric_column_is_refused_with_close_names() -> None:
    with pytest.raises(ValueError, match=r"'gpu.0.powr_w' is not .*close names: gpu.0.power_w"):
        stack_weights(samples(), FRAMES, "gpu.0.powr_w", rows=rows())
    with pytest.raises(ValueError, match=r"'time' is not a metric column"):
        stack_weights(samples(), FRAMES, "time", rows=rows())
    with pytest.raises(ValueError, match=r"'proc.tid' is an identifier"):
        stack_weights(samples(), FRAMES, "proc.tid", rows=rows())
    with pytest.raises(ValueError, match=r"pass rows"):
        stack_weights(samples(), FRAMES, "gpu.0.power_w")
    with pytest.raises(ValueError, match=r"weight must be 'cpu', 'wall' or a metric column"):
        stack_weights(samples(), FRAMES, "")
