"""Edge counters in-process (``Sampler(edge_counters=...)``): each edge carries its thread's own
CPU clock, so a scope's CPU time is exact per call, also for a 200 µs scope that no sampled row
falls in; off by default, and the log's mode goes back when the sampler stops."""

from __future__ import annotations

import mmap
import time

import numpy as np
import pytest
import stroboscope
import stroboscope._core as _core
from stroboscope import Sampler

HOUR = 3600.0  # no regular tick but the first one during the test
SPIN_NS = 200_000


def _spin(ns: int) -> int:
    """Spins ``ns`` of this thread's CPU time; returns the CPU time measured around it."""
    t0 = time.thread_time_ns()
    while time.thread_time_ns() - t0 < ns:
        pass
    return time.thread_time_ns() - t0


def _spin_scopes(n: int) -> list[int]:
    measured = []
    for _ in range(n):
        with stroboscope.annotate("spin"):
            measured.append(_spin(SPIN_NS))
    return measured


def check_cpu_within_bounds(cpu_ns: np.ndarray, measured: list[int]) -> None:
    """The edges' CPU time holds the time measured inside, and little more: the scope's own
    enter and exit (a few µs), never a sampling interval."""
    inside = np.asarray(measured)
    excess = cpu_ns - inside
    assert (excess >= 0).all(), excess
    assert np.median(excess) < 50_000, excess
    assert excess.max() < 1_000_000, excess


def test_a_200us_scope_has_its_exact_cpu_time_from_the_edges() -> None:
    with Sampler(HOUR, sources=["cpu"], edge_counters=True) as s:
        assert _core.events_counters() == "cpu"
        measured = _spin_scopes(100)
        iv = s.scope_intervals()
        df = s.summary()
    cpu = np.asarray(iv.column("cpu_ns").to_numpy(), dtype=np.int64)
    assert len(cpu) == 100
    check_cpu_within_bounds(cpu, measured)
    assert iv.column("minflt").null_count == 100  # mode "cpu": no rusage counts
    assert df.loc["spin", "cpu_ms_edges_n"] == 100
    assert df.loc["spin", "cpu_ms_edges"] == pytest.approx(cpu.mean() / 1e6)
    assert _core.events_counters() == "off"  # back once the sampler stopped


def test_rusage_mode_adds_faults_and_context_switches() -> None:
    with Sampler(HOUR, sources=["cpu"], edge_counters="rusage") as s:
        with stroboscope.annotate("sleepy"):
            time.sleep(0.01)  # a voluntary context switch
        with stroboscope.annotate("touch"):
            # Pages of a fresh mapping, each written once: minor faults (memory from malloc may
            # be pages this long-lived process has touched before, or zero pages never touched).
            fresh = mmap.mmap(-1, 1 << 22)
            for offset in range(0, len(fresh), mmap.PAGESIZE):
                fresh[offset] = 1
            fresh.close()
        iv = s.scope_intervals().to_pydict()
    by_name = {n: i for i, n in enumerate(iv["name"])}
    assert iv["nvcsw"][by_name["sleepy"]] >= 1
    assert iv["minflt"][by_name["touch"]] >= 1
    assert iv["majflt"][by_name["touch"]] is not None and iv["nivcsw"][0] is not None


def test_off_by_default_adds_no_record() -> None:
    assert _core.events_counters() == "off"
    with Sampler(HOUR, sources=["cpu"]) as s:
        before = _core.events_written()
        with stroboscope.annotate("plain"):
            pass
        assert _core.events_written() == before + 2  # two edges, nothing after them
        assert "cpu_ns" not in s.scope_intervals().column_names
        assert "cpu_ms_edges" not in s.summary().columns


def test_the_strongest_mode_of_the_running_samplers_wins() -> None:
    with Sampler(HOUR, sources=["cpu"], edge_counters="rusage"):
        with Sampler(HOUR, sources=["cpu"], edge_counters="cpu"):
            assert _core.events_counters() == "rusage"
        assert _core.events_counters() == "rusage"
    assert _core.events_counters() == "off"


@pytest.mark.parametrize("bad", ["on", "CPU", 1, None])
def test_a_bad_edge_counters_is_named(bad: object) -> None:
    with pytest.raises(ValueError, match=r"edge_counters must be True, False, 'off', 'cpu'"):
        Sampler(HOUR, sources=["cpu"], edge_counters=bad)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError), match="events_counters"):
        _core.events_counters(bad if isinstance(bad, str) else 1)  # type: ignore[arg-type]
