"""Sections 6 and 7 of bench/gpu_check.py, run while bench/gpu_load.py loads the GPU (if torch or
cupy is installed):

6. the sampler's own tick with and without the gpu source: cost per tick, lateness and CPU, the
   /proc sources read every 1 ms and the GPU polled every 10 ms on its own thread (the GPU must
   not make the /proc tick late);
7. energy windows (``Sampler.energy_window``) of 5 ms to 1 s beside the Zeus way of measuring
   them: ``nvmlDeviceGetTotalEnergyConsumption`` read directly at both edges. Ours is
   interpolated between counter steps and carries its bounds; the direct difference is quantised
   to the counter's update period.
"""

from __future__ import annotations

import math
import time
from ctypes import byref, c_ulonglong
from typing import Any

from bench_common import UNBUDGETED
from gpu_nvml import NVML_SUCCESS, Nvml  # bench/ is on sys.path when run as a script

PROC_SOURCES = ["cpu", "memory", "network", "process"]


def check_tick(stroboscope: Any, seconds: float) -> list[dict[str, Any]]:
    """The sampler's tick at 1 kHz with the /proc sources, without and with the gpu source."""
    rows = []
    print("\n  | sources | ticks | cost mean µs | cost p99 µs | late p50 µs | late p99 µs "
          "| missed | sampler CPU µs/tick |")  # fmt: skip
    print("  | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, sources in (
        ("/proc only", dict.fromkeys(PROC_SOURCES)),
        ("/proc + gpu every 10 ms", {**dict.fromkeys(PROC_SOURCES), "gpu": 0.01}),
    ):
        s = stroboscope.Sampler(0.001, sources=sources, gpu_samples=False, **UNBUDGETED)
        with s:
            time.sleep(seconds)
        st = s.stats()
        per_tick = st.thread_cpu_ns / max(st.ticks_taken, 1) / 1e3
        row = {
            "sources": label,
            "ticks": st.ticks_taken,
            "cost_mean_us": st.cost_mean_ns / 1e3,
            "cost_p99_us": st.cost_p99_ns / 1e3,
            "late_p50_us": st.lateness_p50_ns / 1e3,
            "late_p99_us": st.lateness_p99_ns / 1e3,
            "missed": st.ticks_missed,
            "cpu_us_per_tick": per_tick,
        }
        rows.append(row)
        print(
            f"  | {label} | {st.ticks_taken:,} | {row['cost_mean_us']:,.1f} "
            f"| {row['cost_p99_us']:,.1f} | {row['late_p50_us']:,.1f} | {row['late_p99_us']:,.1f} "
            f"| {st.ticks_missed} | {per_tick:,.1f} |"
        )
    return rows


def _direct_mj(nv: Nvml, handles: list[Any]) -> list[int | None]:
    out: list[int | None] = []
    ull = c_ulonglong()
    for h in handles:
        ok = nv.energy is not None and nv.energy(h, byref(ull)) == NVML_SUCCESS
        out.append(int(ull.value) if ok else None)
    return out


def check_energy_windows(
    stroboscope: Any, nv: Nvml, count: int, windows: tuple[float, ...] = (0.005, 0.05, 0.2, 1.0)
) -> list[dict[str, Any]]:
    """Energy windows of the given lengths, ours beside the direct counter difference."""
    handles = [nv.device(i) for i in range(count)]
    s = stroboscope.Sampler(0.001, sources={"gpu": 0.005}, gpu_samples=False, **UNBUDGETED)
    rows = []
    print(
        "\n  | GPU | window ms | ours J | ± J | method | mean W | direct J (Zeus way) "
        "| direct mean W | counter steps seen |"
    )
    print("  | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with s:
        time.sleep(0.2)  # a few readings before the first window
        for length in windows:
            # On the fake, direct calls would race our poll thread for the scripted values.
            before = None if nv.fake else _direct_mj(nv, handles)
            with s.energy_window(f"w{length}") as w:
                time.sleep(length)
            after = None if nv.fake else _direct_mj(nv, handles)
            for i in range(count):
                g = w.gpus.get(i)
                if g is None:
                    continue
                direct = None
                b0, b1 = (before[i], after[i]) if before and after else (None, None)
                if b0 is not None and b1 is not None:
                    direct = (b1 - b0) / 1e3
                steps = g.counter.steps if g.counter is not None else 0
                dur = g.duration_s
                row = {
                    "gpu": i,
                    "window_s": dur,
                    "joules": g.joules,
                    "uncertainty_j": g.uncertainty_j,
                    "method": g.method,
                    "reason": g.reason,
                    "direct_j": direct,
                    "counter_update_s": g.counter.update_period_s if g.counter else None,
                }
                rows.append(row)
                print(
                    f"  | {i} | {dur * 1e3:,.1f} | {g.joules:,.3f} | {g.uncertainty_j:,.3f} "
                    f"| {g.method} | {g.mean_power_w:,.1f} "
                    f"| {'—' if direct is None else f'{direct:,.3f}'} "
                    f"| {'—' if direct is None else f'{direct / dur:,.1f}'} | {steps} |"
                )
    upd = [r["counter_update_s"] for r in rows if math.isfinite(r["counter_update_s"] or math.nan)]
    if upd:
        print(f"\n  the energy counter's update period as our readings saw it: "
              f"{min(upd) * 1e3:,.1f} ms (every 5 ms reading)")  # fmt: skip
    return rows
