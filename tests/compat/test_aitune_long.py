"""stroboscope.compat.aitune over a long scope: the rows leave the ring while the scope is held,
so none is overwritten, and rows lost anyway are counted and said. The ring is made small (and
the interval short) so that "longer than the ring lasts" takes seconds, not hours."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _monitoring

CAPACITY = 64
INTERVAL_S = 0.02  # the ring holds 1.28 s; its rows are collected every 0.32 s


@pytest.fixture
def small_ring(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[_monitoring.HardwareMetricsSession]:
    """A fresh, enabled default session whose sampler has a ring of ``CAPACITY`` rows."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_monitoring, "_CAPACITY", CAPACITY)
    monkeypatch.setattr(_monitoring, "INTERVAL_S", INTERVAL_S)
    fresh = _monitoring.HardwareMetricsSession()
    monkeypatch.setattr(_monitoring, "_DEFAULT_SESSION", fresh)
    fresh.enable()
    yield fresh
    fresh._end(dump=False)


def _written(s: _monitoring.HardwareMetricsSession) -> int:
    assert s._sampler is not None
    return s._sampler.stats().rows_written


def _wait_written(s: _monitoring.HardwareMetricsSession, goal: int) -> None:
    deadline = time.monotonic() + 120
    while _written(s) < goal:
        assert time.monotonic() < deadline, f"the sampler wrote {_written(s)} of {goal} rows"
        time.sleep(0.02)


def test_the_collect_period_is_a_fraction_of_the_ring() -> None:
    assert _monitoring.collect_every_s(1 << 16, 0.1) == _monitoring.COLLECT_EVERY_S == 10.0
    assert _monitoring.collect_every_s(64, 0.02) == pytest.approx(0.32)


def test_a_scope_held_longer_than_the_ring_keeps_its_first_rows(
    small_ring: _monitoring.HardwareMetricsSession,
) -> None:
    with aitune.collect_hardware_metrics("long"):
        _wait_written(small_ring, 5 * CAPACITY)  # five times what the ring holds
        written = _written(small_ring)
    df = aitune.get_hardware_metrics()
    assert df is not None and df.attrs["rows_lost"] == 0
    assert set(df["scope"]) == {"long"}
    # Every row written while the scope was open is here: all but the few after the last
    # count above, and those before the scope opened (the sampler starts just before it).
    assert written - 2 <= len(df) <= _written(small_ring)
    stamps = df["timestamp"].to_numpy(dtype=float)
    assert stamps[0] < 0.5  # (seconds from the session's start) not a ring's span or more
    # No hole: consecutive rows are one interval apart, never a ring's span (1.28 s).
    assert np.diff(stamps).max() < CAPACITY * INTERVAL_S / 2


def test_rows_the_ring_overwrote_are_counted_and_said(
    small_ring: _monitoring.HardwareMetricsSession, caplog: pytest.LogCaptureFixture
) -> None:
    with aitune.collect_hardware_metrics("stalled"):
        _wait_written(small_ring, 4)
        with small_ring._lock:  # the collector cannot run: as in a process stalled for long
            start = _written(small_ring)
            _wait_written(small_ring, start + 3 * CAPACITY)
        with caplog.at_level(logging.WARNING, "stroboscope"):
            df = aitune.get_hardware_metrics()
    assert df is not None
    lost = df.attrs["rows_lost"]
    assert 2 * CAPACITY <= lost <= _written(small_ring)
    # What the ring kept is there; what it lost is counted; together they are every row.
    ends = _written(small_ring)
    assert abs(len(df) + lost - ends) <= 2
    said = [r.getMessage() for r in caplog.records if "overwritten in the ring" in r.getMessage()]
    assert said and f"{lost} in all" in said[-1]
