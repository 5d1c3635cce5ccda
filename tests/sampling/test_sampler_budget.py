"""The overhead budget (``max_overhead``): a costly source is slowed step by step while the
sampler's CPU is over budget, read faster again once there is room, and every change is in
``stats()``, the provenance and the log; bad budgets are refused naming the accepted range."""

from __future__ import annotations

import logging
import math
import time

import pytest
from _fake_nvml import ScriptFn
from stroboscope.sampling import CoreSampler
from stroboscope.sampling._checks import DEFAULT_MAX_OVERHEAD
from stroboscope.sampling._stats import SamplerStats

# Four driver calls made at every poll, each spinning 45 µs of CPU (under the NVML call budget's
# "free" cost, so each is made at every poll): ~180 µs a poll, ~18 % of a core at 1 kHz. The GPU
# is lost after 1000 servings of a key: a lost GPU is not called any more, so the cost goes.
COSTLY_GPU = """
cost 0 nvmlDeviceGetTemperature 45
cost 0 nvmlDeviceGetFanSpeed 45
cost 0 nvmlDeviceGetMemoryInfo 45
cost 0 nvmlDeviceGetClockInfo 45
lost 0 after 1000
"""


def _wait_for(sampler: CoreSampler, done: object, limit_s: float = 90.0) -> SamplerStats:
    """Stats polled until ``done(stats)`` holds (a generous limit: the budget decides on
    seconds of the sampler's own CPU time, not on this test's timing)."""
    give_up = time.monotonic() + limit_s
    while True:
        st = sampler.stats()
        if done(st) or time.monotonic() > give_up:  # type: ignore[operator]
            return st
        time.sleep(0.1)


def test_a_costly_source_is_slowed_then_raised_again_and_every_change_is_recorded(
    nvml: ScriptFn, caplog: pytest.LogCaptureFixture
) -> None:
    nvml(COSTLY_GPU)
    caplog.set_level(logging.INFO, logger="stroboscope")
    s = CoreSampler(
        0.001, sources={"memory": 0.01, "gpu": 0.001}, max_overhead=0.1, gpu_samples=False
    )
    with s:
        lowered = _wait_for(s, lambda st: st.rate_changes_total > 0)
        raised = _wait_for(s, lambda st: any(c.reason == "room" for c in st.rate_changes))
        frame = s.snapshot()
    assert lowered.max_overhead == 0.1
    first = lowered.rate_changes[0]
    # The poll thread's CPU made the sampler go over 10 % of a core: the GPU source (the only
    # costly one) was slowed, its interval doubled at each step, from the 1 ms it was given;
    # each step past the source's declared resolution says so.
    resolution = lowered.source("gpu").resolution_ns
    assert first.source == "gpu" and first.overhead > 0.1
    assert (first.old_interval_ns, first.new_interval_ns) == (1_000_000, 2_000_000)
    changes = raised.rate_changes
    assert len(changes) == raised.rate_changes_total >= 2
    assert all(c.source == "gpu" for c in changes)
    for before, after in zip(changes, changes[1:]):
        assert after.old_interval_ns == before.new_interval_ns  # one chain of steps
        assert after.mono_ns >= before.mono_ns
    down = [c for c in changes if c.reason != "room"]
    up = [c for c in changes if c.reason == "room"]
    assert all(c.new_interval_ns == 2 * c.old_interval_ns for c in down)
    assert [c.reason for c in down] == [
        "over_budget_beyond_resolution" if c.new_interval_ns > resolution else "over_budget"
        for c in down
    ]
    # Raised once the lost GPU cost nothing: halved, never below the interval it was given.
    assert all(c.new_interval_ns * 2 == c.old_interval_ns >= 2_000_000 for c in up)
    assert up[0].mono_ns - down[-1].mono_ns >= 5_000_000_000  # the hysteresis: 5 s of room
    assert up[0].overhead < 0.08
    gpu = raised.source("gpu")
    assert gpu.first_interval_ns == 1_000_000
    assert gpu.interval_ns == changes[-1].new_interval_ns
    assert s.stats().source("memory").interval_ns == 10_000_000  # cheap: never changed
    # fill="forward" holds a slowed source's values until its next reading at the slowest
    # interval it had (less half a tick), not the 1 ms it was planned at.
    slowest = max(c.new_interval_ns for c in changes)
    gpu_columns = [c["name"] for c in s._details["gpu"]["columns"]]
    assert gpu_columns
    assert all(s._fill_within[c] >= slowest - 500_000 for c in gpu_columns)
    # The provenance (of the frame, and the sampler's) carries the same changes.
    budget = (frame.provenance or {})["budget"]
    assert budget["max_overhead"] == 0.1
    assert budget["rate_changes_total"] >= len(changes)
    assert [c["new_interval_ns"] for c in budget["rate_changes"][: len(changes)]] == [
        c.new_interval_ns for c in changes
    ]
    assert s.provenance()["budget"]["rate_changes_total"] == s.stats().rate_changes_total
    # And the log, when the rows were read: one line for the changes seen (rate-limited), the
    # latest of them in words.
    logged = [r.getMessage() for r in caplog.records if "rate change(s)" in r.getMessage()]
    assert len(logged) == 1
    assert "within 10.0% of a core" in logged[0]
    assert f"gpu every {up[-1].old_interval_ns / 1e6:g} ms -> " in logged[0]


def test_without_a_budget_nothing_changes_and_the_provenance_says_none() -> None:
    s = CoreSampler(0.01, sources=["memory"], max_overhead=None)
    s.tick_now(3)
    st = s.stats()
    assert (st.max_overhead, st.overhead, st.rate_changes_total, st.rate_changes) == (
        0.0,
        None,
        0,
        (),
    )
    assert s.provenance()["budget"] == {
        "max_overhead": None,
        "rate_changes_total": 0,
        "rate_changes": [],
    }
    s.close()


def test_the_default_budget_is_on() -> None:
    s = CoreSampler(0.01, sources=["memory"])
    assert s.stats().max_overhead == DEFAULT_MAX_OVERHEAD == 0.05
    assert s.provenance()["budget"]["max_overhead"] == 0.05
    s.close()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-0.1, ValueError),
        (1.5, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        ("0.02", TypeError),
        (True, TypeError),
    ],
)
def test_a_bad_budget_is_refused_naming_the_range(value: object, error: type) -> None:
    with pytest.raises(error, match=r"max_overhead must be None.*\(0, 1\]"):
        CoreSampler(0.01, sources=["memory"], max_overhead=value)  # type: ignore[arg-type]


def test_zero_is_off() -> None:
    s = CoreSampler(0.01, sources=["memory"], max_overhead=0)
    assert s.stats().max_overhead == 0.0
    s.close()
