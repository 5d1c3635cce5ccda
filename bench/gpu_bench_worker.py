"""The child process of ``gpu_bench.py``: one device count measured in a fresh process
(stroboscope's gpu source at 1 and 10 kHz, then the same values through pynvml). The fake
library reads its script at the first ``nvmlInit``, so each case needs a process of its own.
"""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import time
from functools import partial
from typing import Any, Callable

from bench_common import UNBUDGETED

# The batch of nvmlDeviceGetFieldValues, as nvml_source_state.hpp builds it.
FIELD_IDS = (186, 190, 83, 197, 198, 3, 4)  # power instant, limit, energy, PCIe tx/rx, ECC s/d
# NVML codes after which the source stops asking (nvml_internal.hpp, classify()).
UNSUPPORTED_CODES = frozenset({2, 3, 4, 13, 22, 25, 26})
TRANSIENT_CODES = frozenset({6, 7, 10, 19, 20, 21, 23, 27})


def _task_runtime_ns() -> dict[int, int]:
    """CPU run time (ns) of every thread of this process, from schedstat."""
    out: dict[int, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                out[int(tid)] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _fake_reads(lib: ctypes.CDLL | None) -> int | None:
    """The fake's count of nvmlDeviceGetFieldValues calls on GPU 0 (one per reading)."""
    if lib is None:
        return None
    fn = lib.fake_nvml_calls
    fn.restype = ctypes.c_ulonglong
    fn.argtypes = [ctypes.c_uint, ctypes.c_char_p]
    return int(fn(0, b"nvmlDeviceGetFieldValues"))


def measure_stroboscope(
    interval_s: float, seconds: float, gpus: list[int] | None, fake: ctypes.CDLL | None
) -> dict[str, Any]:
    """Run the gpu source polled every ``interval_s`` for ``seconds``; what it achieved and cost.

    The poll thread is the first thread ``Sampler.start()`` creates (the sampler thread is the
    second); the choice is checked against ``stats().thread_cpu_ns``.
    """
    import stroboscope

    s = stroboscope.Sampler(
        interval_s,
        sources={"gpu": interval_s},
        gpu_samples=False,
        gpus=gpus,
        capacity=1 << 16,
        **UNBUDGETED,
    )
    before = set(_task_runtime_ns())
    reads0 = _fake_reads(fake)
    s.start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    runtimes = _task_runtime_ns()
    reads1 = _fake_reads(fake)
    elapsed = time.perf_counter() - t0
    st = s.stats()
    s.stop()
    new = sorted(t for t in runtimes if t not in before)
    poll_cpu: int | None = None
    sampler_cpu_ok = False
    if len(new) >= 2:
        poll_cpu = runtimes[new[0]]
        sampler_cpu = runtimes[new[1]]
        # thread_cpu_ns is read a moment later than schedstat: allow a little drift.
        sampler_cpu_ok = abs(sampler_cpu - st.thread_cpu_ns) <= 0.2 * st.thread_cpu_ns + 2e6
    table = s.snapshot().to_arrow()
    copied = table.num_rows - table.column("gpu.read_mono_ns").null_count
    lag = None
    if copied:
        import pyarrow.compute as pc

        valid = table.filter(table.column("gpu.read_mono_ns").is_valid())
        lag_ns = pc.subtract(valid.column("mono_ns"), valid.column("gpu.read_mono_ns"))
        lag = float(pc.approximate_median(lag_ns).as_py())
    src = next(x for x in st.sources if x.name == "gpu")
    readings = (reads1 - reads0) if reads0 is not None and reads1 is not None else copied
    ticks = max(int(st.ticks_taken), 1)
    out = {
        "asked_hz": 1.0 / interval_s,
        "seconds": elapsed,
        "readings": readings,
        "readings_counted_by": "fake call count" if reads0 is not None else "rows copied",
        "rows_with_reading": copied,
        "readings_per_s": readings / elapsed,
        "tick_copy_ns": src.read_ns_total / max(src.reads, 1),
        "tick_cost_mean_ns": st.cost_mean_ns,
        "wake_ns_estimate": st.thread_cpu_ns / ticks - st.cost_mean_ns,
        "poll_cpu_ns_per_reading": (poll_cpu / readings) if poll_cpu and readings else None,
        "poll_thread_identified": sampler_cpu_ok,
        "reading_lag_median_ns": lag,
        "source_failures": src.failures,
        "source_reason": src.reason,
        "columns": len(table.column_names),
    }
    s.close()
    del s, table
    gc.collect()
    return out


def pynvml_open(library: str) -> Any:
    """Import pynvml and initialise it on ``library`` (a path or soname); None if not installed.

    ``pynvml._LoadNvmlLibrary`` opens ``libnvidia-ml.so.1`` only while ``pynvml.nvmlLib`` is
    None, so assigning our own ``ctypes.CDLL`` first points every later pynvml call at it.
    """
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlLib = ctypes.CDLL(library)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_FunctionNotFound:
        # No nvmlInitWithFlags (the fake): initialise through the library's own entry point.
        init = getattr(pynvml.nvmlLib, "nvmlInit_v2", None) or pynvml.nvmlLib.nvmlInit
        rc = init()
        if rc != 0:
            raise RuntimeError(f"nvmlInit on {library} returned NVML code {rc}") from None
    return pynvml


def _pynvml_plan(nv: Any, handle: Any) -> list[Callable[[], Any]]:
    """The pynvml calls for the source's values on one device, unsupported ones left out."""
    plan: list[Callable[[], Any]] = []

    def keep(fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except nv.NVMLError as exc:
            if exc.value in UNSUPPORTED_CODES:
                return None
            if exc.value not in TRANSIENT_CODES:
                raise
            result = None
        plan.append(fn)
        return result

    fields_ok = [False] * len(FIELD_IDS)
    values = keep(lambda: nv.nvmlDeviceGetFieldValues(handle, list(FIELD_IDS)))
    if values is not None:
        fields_ok = [v.nvmlReturn == 0 for v in values]
    if hasattr(nv, "nvmlMemory_v2"):
        keep(lambda: nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2))
    else:  # an older pynvml: the original struct
        keep(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    keep(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
    keep(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
    if not fields_ok[0]:
        keep(lambda: nv.nvmlDeviceGetPowerUsage(handle))
    if not fields_ok[1]:
        keep(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    if not fields_ok[2]:
        keep(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle))
    for clock in (nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_CLOCK_GRAPHICS):
        keep(partial(nv.nvmlDeviceGetClockInfo, handle, clock))
    keep(lambda: nv.nvmlDeviceGetFanSpeed(handle))
    keep(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle))
    for i, kind in ((5, 0), (6, 1)):
        if not fields_ok[i]:
            keep(partial(nv.nvmlDeviceGetTotalEccErrors, handle, kind, 0))
    keep(lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle))
    keep(lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(handle))

    last_seen = [0]

    def proc_util() -> None:
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, last_seen[0])
        except nv.NVMLError_NotFound:
            return
        for sample in samples:
            last_seen[0] = max(last_seen[0], sample.timeStamp)

    keep(proc_util)
    return plan


def measure_pynvml(library: str, devices: int, seconds: float) -> dict[str, Any]:
    """µs per reading of every device through pynvml (median of timed batches)."""
    nv = pynvml_open(library)
    if nv is None:
        return {"skipped": "pynvml is not installed (pip install nvidia-ml-py)"}
    count = nv.nvmlDeviceGetCount()
    n = count if devices == 0 else devices
    plans = [_pynvml_plan(nv, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]

    def read_all() -> None:
        for plan in plans:
            for call in plan:
                try:
                    call()
                except nv.NVMLError as exc:
                    if exc.value not in TRANSIENT_CODES:
                        raise

    for _ in range(3):
        read_all()
    t = time.perf_counter_ns()
    read_all()
    one = max(time.perf_counter_ns() - t, 1)
    per_batch = max(1, int(20e6 / one))
    batches: list[float] = []
    end = time.perf_counter() + seconds
    while len(batches) < 5 or (time.perf_counter() < end and len(batches) < 400):
        t = time.perf_counter_ns()
        for _ in range(per_batch):
            read_all()
        batches.append((time.perf_counter_ns() - t) / per_batch)
    nv.nvmlShutdown()
    return {
        "ns_per_read": statistics.median(batches),
        "calls_per_read": sum(len(p) for p in plans),
        "batches": len(batches),
    }


def worker(opts: dict[str, Any]) -> dict[str, Any]:
    """One device count in this (fresh) process: stroboscope at 1 and 10 kHz, then pynvml."""
    library: str = opts["library"]
    fake = ctypes.CDLL(library) if opts["fake"] else None
    gpus = None if opts["devices"] == 0 else list(range(opts["devices"]))
    res: dict[str, Any] = {}
    res["strobo_1k"] = measure_stroboscope(0.001, opts["seconds"], gpus, fake)
    res["strobo_10k"] = measure_stroboscope(0.0001, opts["seconds"], gpus, fake)
    res["pynvml"] = measure_pynvml(library, opts["devices"], opts["pynvml_seconds"])
    return res
