"""stroboscope.compat.zeus.ZeusMonitor on the fake NVML library: Zeus's window API, energies
recomputed by hand from the sampler's own frame, CUDA index mapping and argument checks."""

from __future__ import annotations

import csv
import math
import os
import re
import stat
import time
from pathlib import Path

import pyarrow as pa
import pytest
from _fake_nvml import ScriptFn, read_times
from stroboscope.compat.zeus import Measurement, ZeusMonitor
from stroboscope.sampling import CoreSampler as Sampler


def counter(step_mj: int, n: int = 60) -> str:
    return " ".join(str(step_mj * k) for k in range(n))


# The fake serves the next counter value per call, not per unit of time: a high enforced limit
# keeps the plausibility check (tests/analysis/test_energy_windows.py) out of these tests.
TWO = (
    "devices 2\nset 0 power_limit 100000000\nset 1 power_limit 100000000\n"
    f"set 0 energy {counter(1000)}\nset 1 energy {counter(3000)}\n"
)

# Counters that move with CLOCK_MONOTONIC (100 W and 300 W, a step every 2 ms): a test that
# waits on a loaded machine never runs them out of steps (60 scripted values last 0.3 s at the
# monitor's 5 ms poll, and a window's end then waited for a step that never came).
CLOCK_TWO = (
    "devices 2\nset 0 power_limit 100000000\nset 1 power_limit 100000000\n"
    "energy_clock 0 2000 100000\nenergy_clock 1 2000 300000\n"
)


def hand_energy_j(table: pa.Table, gpu: int, a: int, b: int) -> float:
    """The counter linear between the first readings of its values (docs/energy.md)."""
    rows = table.filter(table.column(f"gpu.{gpu}.energy_mj").is_valid())
    t = read_times(rows, f"gpu.{gpu}.energy_mj")
    e = [float(v) for v in rows.column(f"gpu.{gpu}.energy_mj").to_pylist()]
    tau = [t[j] for j in range(len(t)) if j == 0 or e[j] != e[j - 1]]
    val = [e[j] for j in range(len(t)) if j == 0 or e[j] != e[j - 1]]

    def at(x: int) -> float:
        k = max(i for i in range(len(tau)) if tau[i] <= x)
        if k == len(tau) - 1:  # after the last step: its mean power carried on
            return val[k] + (val[k] - val[k - 1]) * (x - tau[k]) / (tau[k] - tau[k - 1])
        return val[k] + (val[k + 1] - val[k]) * (x - tau[k]) / (tau[k + 1] - tau[k])

    return (at(b) - at(a)) / 1000


def wait_readings(sampler: Sampler, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(sampler.snapshot().to_arrow().column("gpu.0.energy_mj").drop_null()) >= n:
            return
        time.sleep(0.002)


def test_windows_like_zeus(nvml: ScriptFn) -> None:
    nvml(CLOCK_TWO)
    with ZeusMonitor(timeout=30) as monitor:
        assert monitor.gpu_indices == [0, 1]
        assert monitor.sampler is not None
        wait_readings(monitor.sampler, 3)
        monitor.begin_window("outer")
        monitor.begin_window("step")
        time.sleep(0.012)
        step = monitor.end_window("step")
        time.sleep(0.006)
        outer = monitor.end_window("outer")
        table = monitor.sampler.snapshot().to_arrow()
    assert isinstance(step, Measurement) and step.cpu_energy is None
    for m in (step, outer):
        w = m.window
        assert w is not None and w.end_ns is not None
        assert m.time == (w.end_ns - w.begin_ns) / 1e9
        assert set(m.gpu_energy) == {0, 1}
        for gpu in (0, 1):
            assert m.gpu_energy[gpu] == pytest.approx(
                hand_energy_j(table, gpu, w.begin_ns, w.end_ns), rel=1e-9
            )
            assert m.gpu_energy_method[gpu] == "counter"
            assert m.gpu_energy_uncertainty[gpu] == w.gpus[gpu].uncertainty_j
        assert m.total_energy == pytest.approx(m.gpu_energy[0] + m.gpu_energy[1])
    assert outer.time > step.time and outer.gpu_energy[1] > step.gpu_energy[1]
    assert monitor.sampler.closed  # the monitor's own sampler, closed with it


def test_window_keys_cancel_and_reset(nvml: ScriptFn) -> None:
    nvml(TWO)
    with ZeusMonitor(gpu_indices=[1]) as monitor:
        monitor.begin_window("a")
        with pytest.raises(ValueError, match="Measurement window 'a' already exists"):
            monitor.begin_window("a")
        monitor.begin_window("a", restart=True)
        with pytest.raises(ValueError, match="Measurement window 'b' does not exist"):
            monitor.end_window("b")
        cancelled = monitor.end_window("a", cancel=True)
        assert cancelled.time == 0.0 and cancelled.gpu_energy == {1: 0.0}
        with pytest.raises(ValueError, match="does not exist"):
            monitor.end_window("a")  # cancelled is gone
        monitor.begin_window("c")
        monitor.reset_windows()
        with pytest.raises(ValueError, match="does not exist"):
            monitor.end_window("c")
        assert monitor.sampler is not None and not monitor.sampler.open_energy_windows
        with pytest.raises(TypeError, match="key must be a str"):
            monitor.begin_window(3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="sync_execution must be True or False, got"):
            monitor.begin_window("d", sync_execution="yes")  # type: ignore[arg-type]


def test_sync_only_when_asked(nvml: ScriptFn) -> None:
    nvml(TWO)
    calls: list[int] = []
    with ZeusMonitor(sync=lambda: calls.append(1)) as monitor:
        monitor.begin_window("a")
        monitor.end_window("a")
        assert len(calls) == 2
        monitor.begin_window("b", sync_execution=False)
        monitor.end_window("b", sync_execution=False)
        assert len(calls) == 2
    with ZeusMonitor() as plain:  # no sync= : never synchronises (Zeus would, with torch)
        plain.begin_window("a")
        assert plain.end_window("a").time > 0
    with pytest.raises(ValueError, match="sync_execution_with must be one of"):
        ZeusMonitor(sync_execution_with="jax")
    with pytest.raises(TypeError, match="sync must be a callable"):
        ZeusMonitor(sync=42)  # type: ignore[arg-type]


def test_a_given_sampler_must_label_its_gpus_by_cuda_index(
    nvml: ScriptFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu_indices are CUDA indices: a sampler of the caller's whose columns are labelled by
    NVML index (gpu.0 = NVML 0) would measure another GPU than cuda:0 = NVML 1, so it is
    refused, naming the fix; one built with gpus="cuda" serves."""
    nvml(TWO)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    refused = pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES='1'.*gpus='cuda'")
    with Sampler(0.005, sources={"gpu": None}, gpu_samples=False) as by_nvml, refused:
        ZeusMonitor(gpu_indices=[0], sampler=by_nvml)
    by_cuda = Sampler(0.005, sources={"gpu": None}, gpus="cuda", gpu_samples=False)
    with by_cuda, ZeusMonitor(gpu_indices=[0], sampler=by_cuda) as monitor:
        assert monitor.gpu_indices == [0]


def test_cuda_indices_follow_cuda_visible_devices(
    nvml: ScriptFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml(TWO)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with ZeusMonitor(gpu_indices=[0], timeout=30) as monitor:
        assert monitor.sampler is not None
        wait_readings(monitor.sampler, 3)
        monitor.begin_window("a")
        time.sleep(0.01)
        m = monitor.end_window("a")
        table = monitor.sampler.snapshot().to_arrow()
    assert "gpu.1.energy_mj" not in table.column_names  # cuda:0 is NVML device 1
    e = table.column("gpu.0.energy_mj").drop_null().to_pylist()
    # Device 1's counter (steps of 3000 mJ; device 0's are 1000): however many readings the
    # poll thread made between two rows on a loaded machine, each value is one of device 1's.
    assert len(e) >= 3 and all(v % 3000 == 0 for v in e)
    assert m.window is not None and m.window.end_ns is not None
    assert m.gpu_energy[0] == pytest.approx(
        hand_energy_j(table, 0, m.window.begin_ns, m.window.end_ns), rel=1e-9
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # every GPU hidden: none, as in Zeus
    with ZeusMonitor() as hidden:
        assert hidden.gpu_indices == [] and hidden.sampler is None
    with pytest.raises(ValueError, match=r"gpu_indices \[0\]: no GPU can be read here.*hides"):
        ZeusMonitor(gpu_indices=[0])


def test_gpu_indices_and_arguments_are_checked(nvml: ScriptFn, tmp_path: Path) -> None:
    nvml(TWO)
    with pytest.raises(ValueError, match=r"gpu_indices \[5\]: no such GPU.*CUDA devices \[0, 1\]"):
        ZeusMonitor(gpu_indices=[5])
    with pytest.raises(TypeError, match="gpu_indices must be a list of ints or None"):
        ZeusMonitor(gpu_indices=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"gpu_indices\[0\] must be an int >= 0 .* got bool True"):
        ZeusMonitor(gpu_indices=[True])
    with pytest.raises(ValueError, match=r"gpu_indices\[0\] must be an int >= 0 .* got int -1"):
        ZeusMonitor(gpu_indices=[-1])
    with pytest.raises(ValueError, match=r"gpu_indices names a device twice: \[0, 0\]"):
        ZeusMonitor(gpu_indices=[0, 0])
    with pytest.raises(ValueError, match=r"cpu_indices: CPU .* not served"):
        ZeusMonitor(cpu_indices=[0])
    with pytest.raises(TypeError, match="approx_instant_energy must be True or False, got int 1"):
        ZeusMonitor(approx_instant_energy=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sampler must be a stroboscope Sampler"):
        ZeusMonitor(sampler="s")  # type: ignore[arg-type]
    log = tmp_path / "zeus.csv"
    with ZeusMonitor(gpu_indices=[0], cpu_indices=[], log_file=log) as monitor:
        monitor.begin_window("w")
        m = monitor.end_window("w")
    lines = log.read_text().splitlines()
    assert lines[0] == "start_time,window_name,elapsed_time,gpu0_energy"
    start, name, elapsed, energy = lines[1].split(",")
    assert name == "w" and float(elapsed) == m.time and float(energy) == m.gpu_energy[0]
    assert abs(float(start) - time.time()) < 600
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600


def test_a_given_sampler_is_used_and_left_running(nvml: ScriptFn) -> None:
    nvml(TWO)
    s = Sampler(0.001, sources={"memory": None, "gpu": 0.005}, gpu_samples=False)
    with s:
        wait_readings(s, 2)
        monitor = ZeusMonitor(gpu_indices=[1], sampler=s)
        monitor.begin_window("a")
        m = monitor.end_window("a")
        monitor.close()
        assert s.running and set(m.gpu_energy) == {1}
    plain = Sampler(0.01, sources=["memory"])
    with pytest.raises(ValueError, match=r"gpu_indices \[0\]: no such GPU"):
        ZeusMonitor(gpu_indices=[0], sampler=plain)


def test_no_gpu_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(tmp_path / "absent.so"))
    with ZeusMonitor() as monitor:  # as Zeus: no GPU, windows measure time only
        assert monitor.gpu_indices == [] and monitor.sampler is None
        monitor.begin_window("a")
        m = monitor.end_window("a")
        assert m.gpu_energy == {} and m.time > 0
    with pytest.raises(ValueError, match=r"gpu_indices \[0\]: no GPU can be read here: .*absent"):
        ZeusMonitor(gpu_indices=[0])


SECONDS = r"must be a finite number of seconds in \[0\.0001, 3600\], got "


def test_window_flags_must_be_bools(nvml: ScriptFn) -> None:
    nvml(TWO)
    with ZeusMonitor(gpu_indices=[0], timeout=30) as monitor:
        monitor.begin_window("w")
        with pytest.raises(TypeError, match=r"^restart must be True or False, got str 'no'"):
            monitor.begin_window("w", restart="no")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^cancel must be True or False, got int 0"):
            monitor.end_window("w", cancel=0)  # type: ignore[arg-type]
        assert monitor.end_window("w").window is not None  # the refused calls changed nothing


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"interval": 0}, ValueError, "^interval " + SECONDS + "int 0$"),
        ({"interval": math.nan}, ValueError, "^interval " + SECONDS + "float nan$"),
        ({"interval": -1}, ValueError, "^interval " + SECONDS + "int -1$"),
        ({"interval": "0.01"}, TypeError, r"^interval must be a number of seconds .* str '0\.01'"),
        (
            {"capacity": 1},
            ValueError,
            r"^capacity must be within \[2, 1073741824\] rows, got int 1",
        ),
        ({"capacity": 2.5}, TypeError, r"^capacity must be an int \(rows\), got float 2\.5"),
        ({"timeout": -1}, ValueError, r"^timeout must be a finite number of seconds >= 0, or None"),
        ({"timeout": math.nan}, ValueError, r"^timeout must be .* got float nan"),
        ({"timeout": "1"}, TypeError, r"^timeout must be a number of seconds .* str '1'"),
    ],
)
def test_the_owned_samplers_arguments_are_checked_not_taken_for_no_gpu(
    nvml: ScriptFn, kwargs: dict[str, object], exc: type[Exception], pattern: str
) -> None:
    nvml(TWO)  # two GPUs here: a refused sampler must not read as "no GPU, time only"
    with pytest.raises(exc) as info:
        ZeusMonitor(**kwargs)  # type: ignore[arg-type]
    assert type(info.value) is exc and re.search(pattern, str(info.value)), str(info.value)


def test_window_keys_are_one_field_of_the_csv_log(nvml: ScriptFn, tmp_path: Path) -> None:
    nvml(TWO)
    log = tmp_path / "zeus.csv"
    keys = ["a,b", "two\nlines", 'say "hi"', "cr\rlf\r\n", "plain"]
    with ZeusMonitor(gpu_indices=[0, 1], log_file=log, timeout=30) as monitor:
        measured = {}
        for key in keys:
            monitor.begin_window(key)
            measured[key] = monitor.end_window(key)
    with open(log, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["start_time", "window_name", "elapsed_time", "gpu0_energy", "gpu1_energy"]
    assert [r[1] for r in rows[1:]] == keys  # one row per window, the key whole
    for row, key in zip(rows[1:], keys):
        m = measured[key]
        assert len(row) == 5
        assert float(row[2]) == m.time
        assert [float(v) for v in row[3:]] == [m.gpu_energy[0], m.gpu_energy[1]]
