"""Energy windows (stroboscope.analysis.energy, Sampler.energy_window) against hand computations.

Frames come from the fake NVML library (tests/fake_nvml) serving a scripted power ramp and the
energy counter that matches it; each expected figure is recomputed here from the readings that
landed in the frame, following the model stated in analysis/energy.py and docs/energy.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from _fake_nvml import ScriptFn, hand_trapezoid, readings, script_fixture
from stroboscope.analysis.energy import window_energy
from stroboscope.sampling import CoreSampler as Sampler

POLL_NS = 5_000_000


@pytest.fixture
def nvml(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ScriptFn]:
    yield from script_fixture(fake_libs, tmp_path, monkeypatch)


# A power ramp of 100 W + 10 W per reading, and the counter that matches it at 5 ms per reading.
POWER_W = [100 + 10 * k for k in range(48)]
ENERGY_MJ = [sum(p * 5 for p in POWER_W[:k]) for k in range(48)]


# The fake serves the next counter value on each call, not per unit of time, and the poll
# thread's phase shifts can bring two or three readings within a millisecond: a step of a few
# joules there "implies" kilowatts. The enforced limit is set high (100 kW, so the plausible bound
# is 300 kW) where a test is not about that check; a misread wrap (4.3 MJ) is still far above.
LIMIT_W = 100_000


def record(nvml: ScriptFn, energy: list[int], power_w: list[int], readings: int) -> pa.Table:
    nvml(
        f"devices 1\nset 0 power_limit {LIMIT_W * 1000}\n"
        f"set 0 energy {' '.join(map(str, energy))}\n"
        f"set 0 power {' '.join(str(p * 1000) for p in power_w)}\n"
    )
    s = Sampler(0.001, sources={"memory": None, "gpu": POLL_NS / 1e9}, gpu_samples=False)
    with s:  # until enough readings have landed (not: until some time has passed)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(s.snapshot().to_arrow().column("gpu.0.energy_mj").drop_null()) >= readings:
                break
            time.sleep(0.005)
    table = s.snapshot().to_arrow()
    del s
    return table


def knots(t: list[int], e: list[float]) -> tuple[list[int], list[float], list[int | None]]:
    """First reading of each new counter value, its value, and the reading before it."""
    tau, val, sigma = [t[0]], [e[0]], [None]  # type: list[int], list[float], list[int | None]
    for j in range(1, len(t)):
        if e[j] != e[j - 1]:
            tau.append(t[j])
            val.append(e[j])
            sigma.append(t[j - 1])
    return tau, val, sigma


def hand_at(tau: list[int], val: list[float], x: float) -> float:
    """The counter at x (mJ): linear between the knots around x."""
    k = max(i for i in range(len(tau)) if tau[i] <= x)
    if k == len(tau) - 1:  # after the last step: its mean power carried on
        return val[k] + (val[k] - val[k - 1]) * (x - tau[k]) / (tau[k] - tau[k - 1])
    return val[k] + (val[k + 1] - val[k]) * (x - tau[k]) / (tau[k + 1] - tau[k])


def hand_bounds(
    tau: list[int], val: list[float], sigma: list[int | None], x: int
) -> tuple[float, float]:
    low = val[max(i for i in range(len(tau)) if tau[i] <= x)]
    high = val[min(i for i, s in enumerate(sigma) if s is not None and s >= x)]
    return low - 1, high + 1  # the counter's 1 mJ resolution at each edge


def test_windows_on_a_power_ramp_against_hand_interpolation(nvml: ScriptFn) -> None:
    table = record(nvml, ENERGY_MJ, POWER_W, 30)
    t, e = readings(table, "gpu.0.energy_mj")
    # Since the first reading: the scripted values less the first one read.
    assert any({x + off for x in e} <= set(ENERGY_MJ) for off in ENERGY_MJ) and len(t) >= 30
    tau, val, sigma = knots(t, e)
    # Edges on readings: the exact difference of the counter.
    w = window_energy(table, t[3], t[20])[0]
    assert w.method == "counter" and w.reason is None
    assert w.joules == (e[20] - e[3]) / 1000
    # Between readings, a long window and a 5 ms one (shorter than a reading gap or two).
    cases = [(t[4] + (t[5] - t[4]) // 3, t[18] + (t[19] - t[18]) // 2)]
    a5 = t[10] + (t[11] - t[10]) * 2 // 3
    cases.append((a5, a5 + 5_000_000))
    for a, b in cases:
        w = window_energy(table, a, b)[0]
        hand = (hand_at(tau, val, b) - hand_at(tau, val, a)) / 1000
        assert w.joules == pytest.approx(hand, rel=1e-9)
        low_a, high_a = hand_bounds(tau, val, sigma, a)
        low_b, high_b = hand_bounds(tau, val, sigma, b)
        assert w.low_j == pytest.approx(max(low_b - high_a, 0) / 1000)
        assert w.high_j == pytest.approx((high_b - low_a) / 1000)
        assert w.low_j <= w.joules <= w.high_j
        assert w.readings == sum(a <= x < b for x in t)
    w5 = window_energy(table, a5, a5 + 5_000_000)[0]
    assert w5.duration_s == 0.005 and w5.joules > 0  # its share of the steps, not 0
    check = w5.counter
    assert check is not None and check.ok and check.resolution_j == 0.001
    assert check.steps == len(tau) - 1 and check.readings == len(t)
    assert check.bound_w == 3 * LIMIT_W  # three times the enforced limit


def test_a_counter_slower_than_the_readings_is_interpolated_between_its_steps(
    nvml: ScriptFn,
) -> None:
    # Each counter value is read twice: the counter updates every other reading (10 ms).
    slow = [v for v in ENERGY_MJ[::2] for _ in range(2)]
    table = record(nvml, slow, POWER_W, 30)
    t, e = readings(table, "gpu.0.energy_mj")
    tau, val, sigma = knots(t, e)
    assert len(tau) < len(t)  # plateaus were read
    k = 5
    a = tau[k] + (tau[k + 1] - tau[k]) // 4
    for b in (a + 3_000_000, a + 5_000_000, tau[k + 6] + 1):
        w = window_energy(table, a, b)[0]
        hand = (hand_at(tau, val, b) - hand_at(tau, val, a)) / 1000
        assert w.joules == pytest.approx(hand, rel=1e-9) and w.joules > 0
        low_a, high_a = hand_bounds(tau, val, sigma, a)
        low_b, high_b = hand_bounds(tau, val, sigma, b)
        assert (w.low_j, w.high_j) == pytest.approx(
            (max(low_b - high_a, 0) / 1000, (high_b - low_a) / 1000)
        )
    assert w.counter is not None
    assert w.counter.update_period_s > w.counter.reading_period_s


def test_a_wrapping_counter(nvml: ScriptFn) -> None:
    raw = [((1 << 32) - 5000 + 1000 * k) % (1 << 32) for k in range(40)]  # wraps at k = 5
    table = record(nvml, raw, [200] * 40, 20)
    t, e = readings(table, "gpu.0.energy_mj")
    # Unwrapped by the core: 1000 mJ per raw reading (a reading may be overtaken by the next).
    steps = [y - x for x, y in zip(e, e[1:])]
    assert steps and all(d > 0 and d % 1000 == 0 and d <= 3000 for d in steps)
    ja = max(j for j in range(len(e)) if e[j] < 4000)
    jb = min(j for j in range(len(e)) if e[j] > 7000)
    a, b = (t[ja] + t[ja + 1]) // 2, (t[jb] + t[jb + 1]) // 2  # across the wrap
    w = window_energy(table, a, b)[0]
    assert w.method == "counter" and w.counter is not None and w.counter.ok
    tau, val, _ = knots(t, e)
    assert w.joules == pytest.approx((hand_at(tau, val, b) - hand_at(tau, val, a)) / 1000)


def test_a_counter_going_backwards_falls_back_to_the_power_integral(nvml: ScriptFn) -> None:
    # 1000 mJ per reading, then 500 mJ back: the core reads that as a 32-bit wrap (+4.3 MJ).
    raw = [1000 * k for k in range(8)] + [6500 + 1000 * k for k in range(32)]
    table = record(nvml, raw, POWER_W[:40], 20)
    t, e = readings(table, "gpu.0.energy_mj")
    jump = next(j for j in range(1, len(e)) if e[j] - e[j - 1] > 1e6)
    a, b = t[jump - 3] + 1000, t[jump + 4] - 1000
    w = window_energy(table, a, b)[0]
    assert w.method == "power integral"
    assert w.reason is not None and "implies" in w.reason and "32-bit wrap" in w.reason
    assert w.counter is not None and not w.counter.ok and w.counter.bound_w == 3 * LIMIT_W
    tp, p = readings(table, "gpu.0.power_w")
    hand = hand_trapezoid(tp, p, a, b) / 1e9
    assert w.joules == pytest.approx(hand, rel=1e-9)
    assert w.low_j <= w.joules <= w.high_j
    # A window before the bad step still uses the counter.
    before = window_energy(table, t[1], t[jump - 2])[0]
    assert before.method == "counter" and before.joules == (e[jump - 2] - e[1]) / 1000
    # Without the counter column: the power integral, and why.
    bare = window_energy(table.drop_columns(["gpu.0.energy_mj"]), a, b)[0]
    assert bare.method == "power integral" and bare.reason == "no energy counter"
    assert bare.joules == pytest.approx(hand, rel=1e-9)


def synthetic(energy: list[float | None], power: list[float | None]) -> pa.Table:
    n = len(energy)
    return pa.table(
        {
            "mono_ns": pa.array([1000 * k for k in range(n)], pa.int64()),
            "gpu.read_mono_ns": pa.array([1000 * k for k in range(n)], pa.int64()),
            "gpu.0.energy_mj": pa.array(energy, pa.float64()),
            "gpu.0.power_w": pa.array(power, pa.float64()),
        }
    )


def test_bounds_and_sanity_on_a_hand_made_frame() -> None:
    # Readings every 1 µs; the counter changes at readings 0, 3, 6 (a plateau in between).
    table = synthetic([0, 0, 0, 30, 30, 30, 60, 60, 60], [30_000_000.0] * 9)
    w = window_energy(table, 1500, 4500, max_power_w=1e9)[0]
    # Knots (0 ns, 0), (3000, 30), (6000, 60); sigma 2000 and 5000.
    assert w.joules == pytest.approx((45 - 15) / 1000)
    # a=1500: low 0, high 30 (sigma 2000 >= 1500); b=4500: low 30, high 60 (sigma 5000).
    assert (w.low_j, w.high_j) == pytest.approx((0.0, (60 + 1 - (0 - 1)) / 1000))
    # Beyond the last knot: the last step's power carried on, bounded by the highest power.
    late = window_energy(table, 6000, 8000, max_power_w=1e9)[0]
    assert late.extrapolated and late.joules == pytest.approx(30 / 3000 * 2000 / 1000)
    # A since-start column that goes backwards (not the core's, but any frame) is refused.
    back = window_energy(synthetic([0, 10, 5, 20], [1.0] * 4), 0, 3000)[0]
    assert back.method == "power integral" and "went backwards by 5 mJ" in (back.reason or "")
    assert back.joules == pytest.approx(3000 / 1e9)  # 1 W for 3 µs
    # The same step implying more than max_power_w is refused; within it, it is served.
    assert window_energy(table, 1500, 4500, max_power_w=100.0)[0].method == "power integral"


def test_each_gpu_is_timed_by_its_own_read() -> None:
    """A poll reads the GPUs one after another: GPU 1's counter is read 400 ns after the poll
    began (gpu.read_mono_ns), and its knots sit at its own read times (gpu.1.read_mono_ns)."""
    ENERGY = [0.0, 10.0, 40.0, 90.0, 160.0]
    poll = [0, 1000, 2000, 3000, 4000]
    own = [t + 400 for t in poll]
    table = pa.table(
        {
            "mono_ns": pa.array([t + 900 for t in poll], pa.int64()),
            "gpu.read_mono_ns": pa.array(poll, pa.int64()),
            "gpu.0.read_mono_ns": pa.array(poll, pa.int64()),
            "gpu.1.read_mono_ns": pa.array(own, pa.int64()),
            "gpu.0.energy_mj": pa.array(ENERGY),
            "gpu.1.energy_mj": pa.array(ENERGY),
        }
    )
    w = window_energy(table, 1200, 2200, max_power_w=1e9)
    for gpu, t in ((0, poll), (1, own)):
        tau, val, sigma = knots(t, ENERGY)
        assert w[gpu].joules == pytest.approx(
            (hand_at(tau, val, 2200) - hand_at(tau, val, 1200)) / 1000
        )
        (la, ha), (lb, hb) = hand_bounds(tau, val, sigma, 1200), hand_bounds(tau, val, sigma, 2200)
        assert (w[gpu].low_j, w[gpu].high_j) == pytest.approx(
            (max(0, lb - ha) / 1000, (hb - la) / 1000)
        )
    # By hand for GPU 1: the counter is 8 mJ at 1200 and 34 mJ at 2200 (timed by the poll it
    # would read 16 and 50); at most 92 mJ (91 by 2200, at least -1 by 1200).
    assert w[1].joules == pytest.approx(0.026) and w[1].high_j == pytest.approx(0.092)


def test_bad_arguments() -> None:
    table = synthetic([0, 10, 20], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="end_ns must be >= begin_ns"):
        window_energy(table, 10, 5)
    with pytest.raises(TypeError, match="begin_ns must be an int"):
        window_energy(table, 1.5, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"gpus \[3\] have no .* the frame has GPUs \[0\]"):
        window_energy(table, 0, 5, gpus=[3])
    with pytest.raises(ValueError, match="max_power_w must be a power in W > 0"):
        window_energy(table, 0, 5, max_power_w=0)
    with pytest.raises(TypeError, match=r"samples must be a pyarrow\.Table"):
        window_energy([1, 2], 0, 5)


def test_sampler_energy_window_end_to_end(nvml: ScriptFn) -> None:
    nvml(
        f"devices 1\nset 0 power_limit {LIMIT_W * 1000}\n"
        f"set 0 energy {' '.join(map(str, ENERGY_MJ))}\n"
    )
    calls: list[str] = []
    s = Sampler(0.001, sources={"memory": None, "gpu": 0.005}, gpu_samples=False)
    with pytest.raises(RuntimeError, match="need a running Sampler"):
        s.begin_energy_window("x")
    with s:
        while len(s.snapshot().to_arrow().column("gpu.0.energy_mj").drop_null()) < 3:
            time.sleep(0.002)
        with s.energy_window("w", sync=lambda: calls.append("sync"), timeout=30) as w:
            time.sleep(0.012)
        with pytest.raises(ValueError, match="already open"):
            s.begin_energy_window("k")
            s.begin_energy_window("k")
        with pytest.raises(ValueError, match="is not open"):
            s.end_energy_window("nope")
        with pytest.raises(TypeError, match="sync must be a callable"):
            s.begin_energy_window("k2", sync=3)  # type: ignore[arg-type]
        while True:  # two more readings: a step surely after the end
            after = s.snapshot().to_arrow().column("gpu.read_mono_ns").drop_null().to_pylist()
            if sum(x > (w.end_ns or 0) for x in after) >= 2:
                break
            time.sleep(0.002)
    assert calls == ["sync", "sync"]
    assert w.end_ns is not None and w.reading_after_end
    table = s.snapshot().to_arrow()
    t, e = readings(table, "gpu.0.energy_mj")
    tau, val, _ = knots(t, e)
    hand = (hand_at(tau, val, w.end_ns) - hand_at(tau, val, w.begin_ns)) / 1000
    assert w.joules[0] == pytest.approx(hand, rel=1e-9)
    # With the readings that came after the end, the same estimate and lower bound; the
    # upper bound is the counter's own once a step surely after the end is known.
    again = window_energy(table, w.begin_ns, w.end_ns)[0]
    assert (w.gpus[0].joules, w.gpus[0].low_j) == (again.joules, again.low_j)
    assert again.hard_bounds and again.low_j <= again.joules <= again.high_j
    del s
    plain = Sampler(0.01, sources=["memory"])
    with plain, pytest.raises(ValueError, match=r"no 'gpu' \(or 'amd_gpu'\) source"):
        plain.begin_energy_window()
