"""SystemMonitor checks every argument when it is made, through the checks module: a
dump_format it cannot write is refused even when not crash-safe (it was accepted, and only
failed at start() once crash safety was on), and a publish period is bounded like a sampling
interval (1e300 s was accepted: a monitor that never publishes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from _fake_nvml import ScriptFn
from _monitor import Recorder
from stroboscope.compat.scaffold import SystemMonitor
from stroboscope.formats.dataset import PART_SECONDS, part_seconds
from stroboscope.formats.segments import segment_seconds
from stroboscope.recording.sampler import Sampler
from stroboscope.sampling._checks import MAX_INTERVAL_S


@pytest.mark.parametrize("crash_safe", [False, True])
@pytest.mark.parametrize("fmt", ["xml", "CSV", "", 3, None])
def test_a_dump_format_it_cannot_write_is_refused_when_made(
    fmt: object, crash_safe: bool, tmp_path: os.PathLike[str]
) -> None:
    with pytest.raises(ValueError) as info:
        SystemMonitor(
            os.getpid(),
            Recorder(),
            2,
            crash_safe=crash_safe,
            dump_format=fmt,  # type: ignore[arg-type]
            dump_path=os.path.join(tmp_path, "dump.csv"),
        )
    assert str(info.value).startswith(
        f"dump_format must be one of 'csv', 'parquet', got {type(fmt).__name__} {fmt!r}"
    )
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rate", [1e300, MAX_INTERVAL_S * 1.5, float("inf")])
def test_a_publish_period_beyond_an_hour_is_refused(rate: float) -> None:
    with pytest.raises(ValueError) as info:
        SystemMonitor(os.getpid(), Recorder(), rate)
    assert str(info.value).startswith("sample_rate_seconds must be ")
    assert f"got float {rate!r}" in str(info.value)


def test_a_publish_period_of_an_hour_is_taken() -> None:
    mon = SystemMonitor(os.getpid(), Recorder(), MAX_INTERVAL_S)
    try:
        assert mon.sample_rate_seconds == 3600.0
    finally:
        mon.shutdown()


def test_a_crash_safe_monitor_at_one_hertz_is_taken(tmp_path: Path) -> None:
    """A quarter of a 65,536-row ring at 1 s is 16,384 s: the segment length it asks for is
    capped at the longest one a Sampler takes, not refused as a value the user never gave."""
    mon = SystemMonitor(
        os.getpid(),
        Recorder(),
        2,
        interval=1.0,
        capacity=65536,
        crash_safe=True,
        dump_path=tmp_path / "dump.csv",
    )
    try:
        assert mon.raw_sampler.segments is not None
    finally:
        mon.shutdown()


@pytest.mark.parametrize(("capacity", "part_s"), [(None, 10.0), (2000, 5.0), (100_000, 10.0)])
def test_a_datasets_parts_follow_the_datasets_one_rule(
    capacity: int | None, part_s: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A part's length has one rule (formats.dataset.part_seconds), the monitor's as `record`'s:
    # a quarter of the ring, at most PART_SECONDS; by default a ring that holds full parts. The
    # monitor had its own (a 2000-row ring at 10 ms gave 8 s parts, `record` 5 s).
    asked: dict[str, Any] = {}

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.update(kwargs)
        return Sampler(*args, **kwargs)

    monkeypatch.setattr("stroboscope.compat.scaffold.Sampler", spy)
    mon = SystemMonitor(
        os.getpid(), Recorder(), 60, interval=0.01, capacity=capacity, dataset=tmp_path / "ds"
    )
    mon.shutdown()
    ring = asked["capacity"]
    assert asked["segment_seconds"] == part_seconds(ring, 0.01) == part_s
    assert part_s == segment_seconds(ring, 0.01, most=PART_SECONDS)  # what `record` asks


@pytest.mark.parametrize(("interval", "every"), [(0.01, 10), (0.03, 4), (0.1, 1), (0.25, 1)])
def test_the_gpu_is_read_no_faster_than_a_tenth_of_a_second(
    interval: float, every: int, nvml: ScriptFn
) -> None:
    # The sampler's own rule for a source's period (sampling._plan.natural_every, in whole ns):
    # the fewest ticks that last at least 0.1 s (the monitor had its own, in floats less 1e-9).
    nvml("devices 1\n")
    mon = SystemMonitor(os.getpid(), Recorder(), 60, interval=interval)
    try:
        polled = {s.name: s.interval_ns for s in mon.raw_sampler.stats().sources}
    finally:
        mon.shutdown()
    assert polled["gpu"] == every * round(interval * 1e9)  # NVML is polled on its own thread
