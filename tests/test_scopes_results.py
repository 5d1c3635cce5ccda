"""A running Sampler's scope results: summary(), samples_by_scope() and export_chrome_trace()
cover the scopes of its runs, and edge rows give a short region a row at its start."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import stroboscope
from stroboscope import sampling
from stroboscope.recording.sampler import Sampler


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _wait_row_at_or_after(s: sampling.CoreSampler, t_ns: int, timeout: float = 60.0) -> None:
    """Wait until the running sampler's newest row was taken at or after ``t_ns``
    (``time.monotonic_ns()``): its own rows, not a set time."""
    deadline = time.monotonic() + timeout
    while True:
        written = s.stats().rows_written
        last = s.copy_since(max(written - 1, 0)).to_arrow().column("mono_ns").to_pylist()
        if last and last[-1] >= t_ns:
            return
        assert time.monotonic() < deadline, f"no row at or after {t_ns} after {timeout} s"
        time.sleep(0.002)


def test_summary_rows_and_trace_of_a_sampler_run(tmp_path: Path) -> None:
    with Sampler(0.002, sources=["memory", "process"]) as s:
        for i in range(4):
            with stroboscope.annotate("step", step=i % 2), stroboscope.annotate("fwd"):
                _spin(0.004)
    intervals = s.scope_intervals()
    assert intervals.num_rows == 8
    summary = s.summary()
    scopes_of_rows = summary.index.get_level_values("scope")
    scope_calls = sorted(zip(map(str, scopes_of_rows), map(int, summary["calls"])))
    assert scope_calls == [("step", 2), ("step", 2), ("step/fwd", 4)]
    steps = summary[summary.index.get_level_values("scope") == "step"]
    assert sorted(steps.index.get_level_values("step")) == ["0", "1"]
    # The total time of each scope equals the sum of its calls' exact durations.
    rows = intervals.to_pylist()
    fwd_total = sum(r["end_ns"] - r["begin_ns"] for r in rows if r["name"] == "fwd") / 1e9
    fwd = summary[summary.index.get_level_values("scope") == "step/fwd"]
    assert abs(float(fwd["total_s"].iloc[0]) - fwd_total) < 1e-9
    by_scope = s.samples_by_scope()
    frame = s.snapshot().to_arrow()
    assert by_scope.num_rows >= frame.num_rows
    inside = [
        r for r in by_scope.select(["mono_ns", "scope"]).to_pylist() if r["scope"] == "step/fwd"
    ]
    for r in inside:  # every row said to be in a fwd call is inside one
        assert any(c["begin_ns"] <= r["mono_ns"] < c["end_ns"] for c in rows if c["name"] == "fwd")
    path = s.export_chrome_trace(tmp_path / "run.json")
    trace = json.loads(Path(path).read_text())
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert sorted(e["name"] for e in spans) == ["fwd"] * 4 + ["step"] * 4


def test_edge_rows_give_short_regions_a_row_at_their_start() -> None:
    with Sampler(0.001, sources=["memory"], edge_rows=True, capacity=1 << 14) as s:
        for _ in range(1000):
            with stroboscope.annotate("short"):
                _spin(0.0002)
            time.sleep(0.0002)
        # A row after the last request (stop() never serves a pending one): wait for it.
        _wait_row_at_or_after(s, time.monotonic_ns())
    stats = s.stats()
    assert stats.tick_requests == 1000  # one request per scope opened
    assert stats.rows_written == stats.ticks_taken + stats.ticks_requested
    rows = s.snapshot().to_arrow().column("mono_ns").to_numpy()
    calls = s.scope_intervals().to_pylist()
    assert len(calls) == 1000
    begins = np.array([c["begin_ns"] for c in calls])
    ends = np.array([c["end_ns"] for c in calls])
    # Every region is followed by a row taken for it: at or after its begin, as soon as the
    # sampler thread ran (bounded generously: a loaded machine may not schedule it at once).
    first_after = np.searchsorted(rows, begins, side="left")
    assert (first_after < len(rows)).all()
    assert (rows[first_after] - begins < 1_000_000_000).all()
    # How many 200 µs regions have a row inside them depends on the wake-up latency of the
    # sampler thread (bench/scopes_bench.py measures it); without edge rows, a 1 ms grid puts
    # a row inside about a fifth of them. Shown, not asserted: it is a property of the machine.
    inside = np.mean(rows[first_after] < ends)
    print(f"regions with a row inside: {inside:.1%}")
