"""The energy windows of a sampler (stroboscope.sampling._energy.EnergyWindows), on their own
over a bare core: which windows are open, the refusals, and an ended window's figure against
the recorded rows and the fake NVML library's scripted power."""

from __future__ import annotations

import time

import pytest
from _fake_nvml import ScriptFn
from _fake_proc import FakeProc
from _sampler_core import bare_core
from stroboscope.analysis.energy import window_energy
from stroboscope.sampling._energy import EnergyWindows
from stroboscope.sampling._frame import Frame

POWER_W = 200.0
STEP_US = 4000  # the fake counter steps every 4 ms


def test_windows_need_a_running_sampler_with_a_gpu_source(fake_proc: FakeProc) -> None:
    core, _ = bare_core(fake_proc, {"memory": 1})
    windows = EnergyWindows(core, 0.01)
    with pytest.raises(RuntimeError, match="running Sampler"):
        windows.begin("a")
    core.start()
    try:
        with pytest.raises(ValueError, match="no 'gpu'"):
            windows.begin("a")
    finally:
        core.stop()
    assert windows.opened == {}
    with pytest.raises(TypeError, match="key must be a str"):
        windows.begin(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"energy window 'b' is not open \(open: \[\]\)"):
        windows.end("b")


def test_open_windows_are_the_parts_own_and_an_end_gives_the_recorded_figure(
    nvml: ScriptFn, fake_proc: FakeProc
) -> None:
    nvml(f"devices 1\nenergy_clock 0 {STEP_US} {int(POWER_W * 1000)}\n")
    core, _ = bare_core(fake_proc, {"memory": 1, "gpu": 1}, interval=0.001, capacity=1 << 14)
    windows = EnergyWindows(core, 0.001)
    other = EnergyWindows(core, 0.001)  # a second part over the same ring: its own windows
    core.start()
    try:
        deadline = time.monotonic() + 60
        while len(Frame(core.snapshot()).to_arrow().column("gpu.0.energy_mj").drop_null()) < 20:
            assert time.monotonic() < deadline, "no GPU readings after 60 s"
            time.sleep(0.005)
        first = windows.begin("a")
        assert list(windows.opened) == ["a"] and other.opened == {}
        with pytest.raises(ValueError, match="'a' is already open"):
            windows.begin("a")
        assert windows.begin("a", restart=True) >= first
        windows.discard("a")
        assert windows.opened == {}
        with pytest.raises(KeyError), windows.window("b"):
            assert list(windows.opened) == ["b"]
            raise KeyError("inside")
        assert windows.opened == {}  # a block that raised leaves no window open
        with windows.window("c", timeout=30) as w:
            time.sleep(0.02)
        table = Frame(core.snapshot()).to_arrow()
    finally:
        core.stop()
    assert w.key == "c" and w.end_ns is not None and w.end_ns > w.begin_ns
    assert w.reading_after_end and w.note is None
    recorded = window_energy(table, w.begin_ns, w.end_ns)[0]
    assert w.joules[0] == pytest.approx(recorded.joules, rel=1e-9)  # the frame's figure
    truth = POWER_W * (w.end_ns - w.begin_ns) / 1e9
    assert w.gpus[0].low_j <= truth <= w.gpus[0].high_j
