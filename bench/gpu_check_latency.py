"""Section 1 of bench/gpu_check.py: the latency of every NVML call the gpu source makes, timed
with ``perf_counter_ns`` around a ctypes call (independent of stroboscope's code)."""

from __future__ import annotations

import ctypes
import statistics
import time
from ctypes import byref, c_int, c_uint, c_ulonglong, c_void_p
from functools import partial
from typing import Any, Callable

from gpu_nvml import (  # bench/ is on sys.path when run as a script
    CLOCKS,
    FIELDS,
    MAX_PROCESSES,
    MEMORY_V2_VERSION,
    NVML_ERROR_NOT_FOUND,
    NVML_SUCCESS,
    PROCESS_INFO_MAX_STRIDE,
    SAMPLE_KINDS,
    FieldValue,
    Memory,
    MemoryV2,
    Nvml,
    ProcessUtilization,
    Sample,
    Utilization,
)

# ---- 1. per-call latency ------------------------------------------------------------------------


def _ns() -> int:
    return time.perf_counter_ns()


def time_call(call: Callable[[], int], n: int, budget_ns: int) -> tuple[int, list[int]]:
    """(first return code, ns of each of up to ``n`` further calls within ``budget_ns``)."""
    rc = call()
    times: list[int] = []
    end = _ns() + budget_ns
    while len(times) < n and _ns() < end:
        t0 = _ns()
        call()
        times.append(_ns() - t0)
    return rc, times


def _call_uint(fn: Any, h: c_void_p, out: c_uint) -> int:
    return int(fn(h, byref(out)))


def _call_uint_kind(fn: Any, h: c_void_p, kind: int, out: c_uint) -> int:
    return int(fn(h, kind, byref(out)))


def _call_ecc(fn: Any, h: c_void_p, kind: int, out: c_ulonglong) -> int:
    return int(fn(h, kind, 0, byref(out)))


def _ctypes_probe(nv: Nvml) -> Callable[[], int]:
    """A ctypes call into the library that does (almost) nothing: nvmlErrorString(0)."""
    f = nv.error_string
    if f is None:
        return lambda: 0

    def probe() -> int:
        f(0)
        return 0

    return probe


def source_calls(nv: Nvml, h: c_void_p) -> list[tuple[str, str, Callable[[], int]]]:
    """(name, when the source makes it, a zero-argument call returning the NVML code)."""
    out: list[tuple[str, str, Callable[[], int]]] = []
    ids = list(FIELDS)
    if nv.fields is not None:
        arr = (FieldValue * len(ids))()

        def batch() -> int:
            for i, fid in enumerate(ids):
                arr[i].fieldId = fid
            return int(nv.fields(h, len(ids), arr))

        out.append(("nvmlDeviceGetFieldValues (7 fields)", "every read", batch))
        for fid, name in FIELDS.items():
            one = (FieldValue * 1)()

            def single(fid: int = fid, one: Any = one) -> int:
                one[0].fieldId = fid
                rc = int(nv.fields(h, 1, one))
                return rc if rc != NVML_SUCCESS else int(one[0].nvmlReturn)

            out.append((f"  field {fid} {name} alone", "(in the batch)", single))
    if nv.mem2 is not None:
        m2 = MemoryV2()

        def mem2() -> int:
            m2.version = MEMORY_V2_VERSION
            return int(nv.mem2(h, byref(m2)))

        out.append(("nvmlDeviceGetMemoryInfo_v2", "every read", mem2))
    if nv.mem1 is not None:
        m1 = Memory()
        out.append(("nvmlDeviceGetMemoryInfo", "if no _v2", lambda: int(nv.mem1(h, byref(m1)))))
    u = Utilization()
    ui = c_uint()
    ull = c_ulonglong()
    if nv.util is not None:
        out.append(
            ("nvmlDeviceGetUtilizationRates", "every read", lambda: int(nv.util(h, byref(u))))
        )
    if nv.temp is not None:
        out.append(
            ("nvmlDeviceGetTemperature(GPU)", "every read", lambda: int(nv.temp(h, 0, byref(ui))))
        )
    if nv.clock is not None:
        for name, kind in CLOCKS.items():
            out.append(
                (
                    f"nvmlDeviceGetClockInfo({name})",
                    "every read",
                    partial(_call_uint_kind, nv.clock, h, kind, ui),
                )
            )
    if nv.fan is not None:
        out.append(("nvmlDeviceGetFanSpeed", "every read", lambda: int(nv.fan(h, byref(ui)))))
    if nv.reasons is not None:
        out.append((nv.names["reasons"], "every read", lambda: int(nv.reasons(h, byref(ull)))))
    buf = (ctypes.c_ubyte * (MAX_PROCESSES * PROCESS_INFO_MAX_STRIDE))()
    for key, fn in (("compute", nv.compute), ("graphics", nv.graphics)):
        if fn is None:
            continue

        def procs(fn: Any = fn) -> int:
            n = c_uint(MAX_PROCESSES)
            return int(fn(h, byref(n), buf))

        out.append((f"{nv.names[key]} ({MAX_PROCESSES} slots)", "every read", procs))
    if nv.putil is not None:
        pbuf = (ProcessUtilization * MAX_PROCESSES)()
        last_seen = [0]

        def putil() -> int:
            n = c_uint(MAX_PROCESSES)
            rc = int(nv.putil(h, pbuf, byref(n), last_seen[0]))
            if rc == NVML_SUCCESS:
                for i in range(min(n.value, MAX_PROCESSES)):
                    last_seen[0] = max(last_seen[0], pbuf[i].timeStamp)
            return rc

        out.append(("nvmlDeviceGetProcessUtilization (lastSeen)", "every read", putil))
    for name, fn in (
        ("nvmlDeviceGetPowerUsage", nv.power),
        ("nvmlDeviceGetEnforcedPowerLimit", nv.limit),
    ):
        if fn is not None:
            out.append((name, "if its field fails", partial(_call_uint, fn, h, ui)))
    if nv.energy is not None:
        out.append(
            (
                "nvmlDeviceGetTotalEnergyConsumption",
                "if its field fails",
                lambda: int(nv.energy(h, byref(ull))),
            )
        )
    if nv.ecc is not None:
        for name, kind in (("CORRECTED", 0), ("UNCORRECTED", 1)):
            out.append(
                (
                    f"nvmlDeviceGetTotalEccErrors({name}, VOLATILE)",
                    "if its field fails",
                    partial(_call_ecc, nv.ecc, h, kind, ull),
                )
            )
    if nv.samples is not None:
        sbuf = (Sample * 4096)()
        for kind, name in SAMPLE_KINDS.items():
            seen = [0]

            def samples(kind: int = kind, seen: list[int] = seen) -> int:
                vt, n = c_int(), c_uint(4096)
                rc = int(nv.samples(h, kind, seen[0], byref(vt), byref(n), sbuf))
                if rc == NVML_SUCCESS and n.value:
                    seen[0] = max(sbuf[i].timeStamp for i in range(min(n.value, 4096)))
                return rc

            out.append((f"nvmlDeviceGetSamples({name.split()[0]})", "gpu_samples, 4/s", samples))
    return out


def check_latency(nv: Nvml, index: int, n: int, budget_s: float) -> dict[str, Any]:
    """Time every call of ``source_calls`` on one device; prints the table."""
    h = nv.device(index)
    calls = source_calls(nv, h)
    per_call_ns = int(budget_s * 1e9 / max(len(calls), 1))
    rows = []
    print("\n  | call | made by the source | first rc | median µs | p90 µs | calls |")
    print("  | --- | --- | --- | --- | --- | --- |")
    per_read_us = 0.0
    for name, when, call in calls:
        rc, times = time_call(call, n, per_call_ns)
        med = statistics.median(times) / 1e3 if times else float("nan")
        p90 = sorted(times)[int(len(times) * 0.9)] / 1e3 if times else float("nan")
        ok = rc in (NVML_SUCCESS, NVML_ERROR_NOT_FOUND)
        if when == "every read" and ok:
            per_read_us += med
        rows.append(
            {
                "call": name,
                "when": when,
                "rc": rc,
                "median_us": med,
                "p90_us": p90,
                "calls": len(times),
            }
        )
        print(f"  | {name} | {when} | {nv.text(rc)} | {med:,.1f} | {p90:,.1f} | {len(times)} |")
    print(
        f"  NVML time per read of this GPU (sum of the medians of the calls made every read that "
        f"answer): {per_read_us:,.1f} µs,\n  so one thread reads this GPU at most "
        f"~{1e6 / per_read_us if per_read_us else float('inf'):,.0f} times/s."
    )
    return {"calls": rows, "per_read_us": per_read_us}
