"""The flame graph weighted by a device's metric, end to end: the fake NVML's GPU draws 300 W in
the first 500 ms of every second of CLOCK_MONOTONIC and 50 W in the rest (``energy_clock``); the
program runs ``delta`` over the first 375 ms of each cycle and ``epsilon`` over the other 625 ms,
timing each call with its own clock. Weighted by ``gpu.0.power_w``, ``delta`` gets its share of
the GPU's energy over those cycles (64 %, where its share of the time is 37.5 %) within 3
points, the share computed from the program's own intervals and the scripted power.

Phases this long keep the test true on a loaded machine: a stall of the process (tens of ms with
both cores busy) across a change of function blurs that change, by at most the stall."""

from __future__ import annotations

import time
from typing import Any

import pytest
from stroboscope import Sampler
from stroboscope.analysis import function_table
from stroboscope.export import flame_weights

HIGH_W, LOW_W = 300.0, 50.0
HALF_NS = 500_000_000  # each power level is held 500 ms: a cycle is 1 s
CYCLE_NS = 2 * HALF_NS
DELTA_NS = 375_000_000  # delta: the first 375 ms of a cycle; epsilon: the remaining 625 ms
CYCLES = 3


def power_at(t: int) -> float:
    """The scripted power (W) at CLOCK_MONOTONIC ``t`` (ns): levels cycled from time 0."""
    return HIGH_W if t % CYCLE_NS < HALF_NS else LOW_W


def energy(begin: int, end: int) -> float:
    """The scripted energy (J) over ``[begin, end)``: the power is constant between level
    changes, so a sum over the pieces cut at them is exact."""
    total, t = 0.0, begin
    while t < end:
        step = min(end, (t // HALF_NS + 1) * HALF_NS)
        total += power_at(t) * (step - t) / 1e9
        t = step
    return total


def spin_until(t: int) -> None:
    while time.monotonic_ns() < t:
        pass


def delta(until: int) -> None:
    spin_until(until)


def epsilon(until: int) -> None:
    spin_until(until)


def settle(until: int) -> None:
    spin_until(until)


def test_delta_gets_its_share_of_the_power_time(nvml: Any) -> None:
    levels = f"{int(HIGH_W * 1000)}:{HALF_NS // 1000} {int(LOW_W * 1000)}:{HALF_NS // 1000}"
    nvml(f"devices 1\nenergy_clock 0 1000 {levels}\n")
    calls: dict[str, list[tuple[int, int]]] = {"delta": [], "epsilon": []}
    with Sampler(
        0.001, sources={"memory": None, "gpu": 0.001}, gpu_samples=False, stacks=True
    ) as s:
        now = time.monotonic_ns()
        start = (now // CYCLE_NS + 1) * CYCLE_NS  # the next cycle, at least 100 ms from now
        start += CYCLE_NS if start - now < 100_000_000 else 0
        settle(start)
        for k in range(CYCLES):
            c = start + k * CYCLE_NS
            for name, fn, until in (
                ("delta", delta, c + DELTA_NS),
                ("epsilon", epsilon, c + CYCLE_NS),
            ):
                begin = time.monotonic_ns()
                fn(until)
                calls[name].append((begin, time.monotonic_ns()))
        end = start + CYCLES * CYCLE_NS
        settle(end + 20_000_000)  # the readings of the last cycle's end reach the rows
        weights = flame_weights(s, "gpu.0.power_w", begin_ns=start, end_ns=end)
    assert weights.unit == "J"
    # the truth from the program's own intervals (112.5/175 by the plan; a busy
    # machine can make a call end late), and delta's share of the time, which it is not
    truth = sum(energy(b, e) for b, e in calls["delta"]) / energy(start, end)
    time_share = sum(e - b for b, e in calls["delta"]) / (end - start)
    assert truth - time_share > 0.15
    per = {r["function"]: r for r in function_table(weights).to_pylist()}
    # The program is this test's thread: every stack of it runs through this function. Its
    # weight is the energy, but for what the sampled process's other Python threads (the
    # stacks' own drain thread) took by the CPU they used while the program was preempted.
    program = per[test_delta_gets_its_share_of_the_power_time.__name__]["total"]
    assert program == pytest.approx(energy(start, end), rel=0.15)
    assert per["delta"]["total"] / program == pytest.approx(truth, abs=0.03)
    assert weights.total == pytest.approx(energy(start, end), rel=0.05)
